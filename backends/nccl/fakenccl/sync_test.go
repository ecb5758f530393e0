//go:build cgo

package fakenccl_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/backends/nccl/fakenccl"
	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
)

// TestSyncOpTimeoutFailsItsOwnWork: rank 1 never joins a synchronous
// all_reduce (enqueued on the caller's stream, which the CPU does not wait
// for). The op still has its Work, which fails within the timeout plus a
// bound, as a timeout that names the op and its sequence number; the
// group's next op is refused and names it too.
func TestSyncOpTimeoutFailsItsOwnWork(t *testing.T) {
	need(t)
	const timeout = 200 * time.Millisecond
	pgs := world(t, 2, timeout)
	m := mem(t, 16)
	op := libgodist.DeviceOp{Device: 0, Stream: fakenccl.Stream(0), Peer: libgodist.GroupComm,
		Calls: []backend.DeviceCall{{Kind: backend.CallAllReduce, Send: m.Addr(), Recv: m.Addr(), Count: 4,
			DType: reduce.Float32, Op: reduce.Sum}}}
	start := time.Now()
	w, err := pgs[0].DeviceRun("allreduce", op)
	require.NoError(t, err, "enqueueing does not wait for the peer")
	require.Less(t, time.Since(start), timeout, "the CPU did not wait for the device")
	require.NoError(t, waitDone(w, timeout+2*time.Second), "the synchronous op's Work completes")
	took := time.Since(start)
	require.GreaterOrEqual(t, took, timeout)
	require.Less(t, took, timeout+time.Second)
	var oe *libgodist.OpError
	require.ErrorAs(t, w.Err(), &oe)
	require.True(t, oe.Timeout(), "%v", w.Err())
	require.Equal(t, "allreduce", oe.Op)
	require.Equal(t, uint64(1), oe.Seq)
	require.Contains(t, w.Err().Error(), "allreduce (seq 1)")

	_, err = pgs[0].DeviceRun("allreduce", op)
	require.ErrorIs(t, err, libgodist.ErrBroken)
	require.Contains(t, err.Error(), "allreduce (seq 1)")
	noMisuse(t)
}
