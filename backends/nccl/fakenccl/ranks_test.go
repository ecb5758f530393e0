//go:build cgo

package fakenccl_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/backends/nccl"
	"github.com/godist/godist/backends/nccl/fakenccl"
	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// TestEveryCallOnItsDevice: a group on cuda:1 makes cuda:1 current for
// every CUDA call on its streams and events, from whatever thread makes
// it (the fake records a call on an object of another device: the
// watchdog's event queries, the closer's destroys), through ops that
// complete, one that times out, and the teardown.
func TestEveryCallOnItsDevice(t *testing.T) {
	need(t)
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprintf("hang=%v", hang), func(t *testing.T) {
			pg, err := libgodist.New(libgodist.Config{Rank: 0, Size: 1, Group: fmt.Sprintf("dev1-%v", hang),
				Timeout: 10 * time.Second}, backend.Set{Accelerator: nccl.Accelerator{}})
			require.NoError(t, err)
			id, err := pg.DeviceID()
			require.NoError(t, err)
			require.NoError(t, pg.DeviceOpen(1, libgodist.GroupComm, id))
			m := mem(t, 16)
			putF32(m, 1, 2, 3, 4)
			stream := fakenccl.Stream(1)
			for _, async := range []bool{false, true} {
				runOp(t, pg, "allreduce", libgodist.DeviceOp{Device: 1, Stream: stream, Async: async,
					Peer: libgodist.GroupComm, Calls: []backend.DeviceCall{{Kind: backend.CallAllReduce,
						Send: m.Addr(), Recv: m.Addr(), Count: 4, DType: reduce.Float32, Op: reduce.Sum}}})
			}
			require.Equal(t, []float32{1, 2, 3, 4}, f32s(m))
			if hang {
				fakenccl.SetHang(true)
				w, err := pg.DeviceRun("allreduce", libgodist.DeviceOp{Device: 1, Stream: stream, Async: true,
					Peer: libgodist.GroupComm, Timeout: 50 * time.Millisecond, Calls: []backend.DeviceCall{{
						Kind: backend.CallAllReduce, Send: m.Addr(), Recv: m.Addr(), Count: 4,
						DType: reduce.Float32, Op: reduce.Sum}}})
				require.NoError(t, err)
				require.NoError(t, waitDone(w, 2*time.Second))
				fakenccl.SetHang(false)
				require.Error(t, w.Err())
			}
			require.NoError(t, pg.Close())
			noMisuse(t)
		})
	}
}

// world makes the n ranks of a group in this process, over an in-memory
// transport, each with the group's communicator on cuda:0.
func world(t *testing.T, n int, timeout time.Duration) []*libgodist.ProcessGroup {
	t.Helper()
	name := fmt.Sprintf("w%d", groups.Add(1))
	net := transport.NewMemNetwork(n)
	pgs := make([]*libgodist.ProcessGroup, n)
	for r := range pgs {
		pg, err := libgodist.NewWithDevice(libgodist.Config{Rank: r, Size: n, Group: name, Timeout: timeout},
			net.Transport(r), nccl.Accelerator{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = pg.Close() })
		pgs[r] = pg
	}
	id, err := pgs[0].DeviceID()
	require.NoError(t, err)
	open(t, pgs, func(int) int { return libgodist.GroupComm }, id)
	return pgs
}

// open has every rank of pgs join the communicator of peer at once (each
// one's initialization waits for the others').
func open(t *testing.T, pgs []*libgodist.ProcessGroup, peer func(r int) int, id []byte) {
	t.Helper()
	errs := make([]error, len(pgs))
	var wg sync.WaitGroup
	for r, pg := range pgs {
		wg.Go(func() { errs[r] = pg.DeviceOpen(0, peer(r), id) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// TestPointToPointOnPairComm: rank 0 sends to rank 1 and then joins an
// all_reduce; rank 1 joins the all_reduce first and then receives. The
// send and the receive use the pair's communicator although the group has
// one, as in ProcessGroupNCCL, so both finish; on the group's
// communicator the send and the all_reduce would wait for each other
// until the timeout.
func TestPointToPointOnPairComm(t *testing.T) {
	need(t)
	pgs := world(t, 2, 2*time.Second)
	id, err := pgs[0].DeviceID()
	require.NoError(t, err)
	open(t, pgs, func(r int) int { return 1 - r }, id)
	require.True(t, pgs[0].HasDeviceComm(1) && pgs[1].HasDeviceComm(0))

	streams := []uintptr{fakenccl.Stream(0), fakenccl.Stream(0)} // the ranks' current streams
	msg, got := mem(t, 8), mem(t, 8)
	copy(msg.Bytes(), "to rank1")
	bufs := []*fakenccl.Mem{mem(t, 8), mem(t, 8)}
	putF32(bufs[0], 1, 2)
	putF32(bufs[1], 10, 20)
	allReduce := func(r int) libgodist.DeviceOp {
		return libgodist.DeviceOp{Device: 0, Stream: streams[r], Peer: libgodist.GroupComm,
			Calls: []backend.DeviceCall{{Kind: backend.CallAllReduce, Send: bufs[r].Addr(), Recv: bufs[r].Addr(),
				Count: 2, DType: reduce.Float32, Op: reduce.Sum}}}
	}
	var works []*libgodist.Work
	run := func(pg *libgodist.ProcessGroup, name string, op libgodist.DeviceOp) {
		w, err := pg.DeviceRun(name, op)
		require.NoError(t, err, name)
		works = append(works, w)
	}
	run(pgs[0], "send", libgodist.DeviceOp{Device: 0, Stream: streams[0], Async: true, Peer: 1,
		Calls: []backend.DeviceCall{{Kind: backend.CallSend, Send: msg.Addr(), Count: 8, Bytes: true, Root: 1}}})
	run(pgs[0], "allreduce", allReduce(0))
	run(pgs[1], "allreduce", allReduce(1))
	run(pgs[1], "recv", libgodist.DeviceOp{Device: 0, Stream: streams[1], Async: true, Peer: 0,
		Calls: []backend.DeviceCall{{Kind: backend.CallRecv, Recv: got.Addr(), Count: 8, Bytes: true, Root: 0}}})
	for i, w := range works {
		require.NoError(t, w.Wait(5*time.Second), "op %d", i)
	}
	require.Equal(t, "to rank1", string(got.Bytes()))
	require.Equal(t, []float32{11, 22}, f32s(bufs[0]))
	require.Equal(t, []float32{11, 22}, f32s(bufs[1]))
	noMisuse(t)
}
