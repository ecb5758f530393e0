//go:build cgo

package fakenccl_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/backends/nccl"
	"github.com/godist/godist/backends/nccl/fakenccl"
	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
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
