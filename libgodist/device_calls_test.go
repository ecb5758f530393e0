package libgodist

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
)

func TestDeviceCalls(t *testing.T) {
	f32 := ReduceArgs{DType: reduce.Float32, Op: reduce.Sum}
	buf := func(addr uintptr, n int64) DeviceBuf { return DeviceBuf{Addr: addr, Bytes: n} }
	send := func(addr uintptr, n int64, to int) backend.DeviceCall {
		return backend.DeviceCall{Kind: backend.CallSend, Send: addr, Count: n, Bytes: true, Root: to}
	}
	recv := func(addr uintptr, n int64, from int) backend.DeviceCall {
		return backend.DeviceCall{Kind: backend.CallRecv, Recv: addr, Count: n, Bytes: true, Root: from}
	}
	for _, tc := range []struct {
		name  string
		rank  int
		args  DeviceArgs
		calls []backend.DeviceCall
		peer  int
		err   string
	}{
		{name: "allreduce counts elements", args: DeviceArgs{Op: "allreduce", Buf: buf(0x100, 16), Reduce: f32},
			calls: []backend.DeviceCall{{Kind: backend.CallAllReduce, Send: 0x100, Recv: 0x100, Count: 4,
				DType: reduce.Float32, Op: reduce.Sum}}, peer: GroupComm},
		{name: "allreduce of part of an element", args: DeviceArgs{Op: "allreduce", Buf: buf(0x100, 6), Reduce: f32},
			err: "6 bytes are not whole float32 elements"},
		{name: "reduce root out of range", args: DeviceArgs{Op: "reduce", Buf: buf(0x100, 16), Reduce: f32, Root: 3},
			err: "reduce: root 3 is out of range for a group of 3"},
		{name: "broadcast", args: DeviceArgs{Op: "broadcast", Buf: buf(0x100, 5), Root: 2},
			calls: []backend.DeviceCall{{Kind: backend.CallBroadcast, Send: 0x100, Recv: 0x100, Count: 5, Bytes: true,
				Root: 2}}, peer: GroupComm},
		{name: "broadcast of a bad buffer", args: DeviceArgs{Op: "broadcast", Buf: buf(0, 5)},
			err: "buffer: invalid CUDA buffer"},
		{name: "allgather flat", args: DeviceArgs{Op: "allgather", Buf: buf(0x100, 4), Out: buf(0x200, 12)},
			calls: []backend.DeviceCall{{Kind: backend.CallAllGather, Send: 0x100, Recv: 0x200, Count: 4,
				Bytes: true}}, peer: GroupComm},
		{name: "allgather flat of the wrong size", args: DeviceArgs{Op: "allgather", Buf: buf(0x100, 4),
			Out: buf(0x200, 8)}, err: "allgather: output has 8 bytes, expected 4 x 3"},
		{name: "allgather into a list", rank: 1, args: DeviceArgs{Op: "allgather", Buf: buf(0x100, 4),
			Outs: []DeviceBuf{buf(0x200, 4), buf(0x300, 4), buf(0x400, 4)}},
			calls: []backend.DeviceCall{send(0x100, 4, 0), recv(0x200, 4, 0), send(0x100, 4, 1), recv(0x300, 4, 1),
				send(0x100, 4, 2), recv(0x400, 4, 2)}, peer: GroupComm},
		{name: "allgather into a short list", args: DeviceArgs{Op: "allgather", Buf: buf(0x100, 4),
			Outs: []DeviceBuf{buf(0x200, 4)}}, err: "allgather: 1 outputs for a group of 3"},
		{name: "gather off the root sends only", rank: 0, args: DeviceArgs{Op: "gather", Buf: buf(0x100, 4), Root: 1},
			calls: []backend.DeviceCall{send(0x100, 4, 1)}, peer: GroupComm},
		{name: "gather at the root", rank: 1, args: DeviceArgs{Op: "gather", Buf: buf(0x100, 4), Root: 1,
			Outs: []DeviceBuf{buf(0x200, 4), buf(0x300, 4), buf(0x400, 4)}},
			calls: []backend.DeviceCall{recv(0x200, 4, 0), send(0x100, 4, 1), recv(0x300, 4, 1), recv(0x400, 4, 2)},
			peer:  GroupComm},
		{name: "gather at the root without a list", rank: 1, args: DeviceArgs{Op: "gather", Buf: buf(0x100, 4), Root: 1},
			err: "gather: 0 outputs for a group of 3"},
		{name: "scatter off the root receives only", rank: 2, args: DeviceArgs{Op: "scatter", Out: buf(0x100, 4)},
			calls: []backend.DeviceCall{recv(0x100, 4, 0)}, peer: GroupComm},
		{name: "reduce_scatter", args: DeviceArgs{Op: "reduce_scatter", Buf: buf(0x100, 24), Out: buf(0x200, 8),
			Reduce: f32}, calls: []backend.DeviceCall{{Kind: backend.CallReduceScatter, Send: 0x100, Recv: 0x200,
			Count: 2, DType: reduce.Float32, Op: reduce.Sum}}, peer: GroupComm},
		{name: "reduce_scatter of a list", args: DeviceArgs{Op: "reduce_scatter", Out: buf(0x200, 8),
			Ins: []DeviceBuf{buf(0x100, 8)}, Reduce: f32}, err: "reduce_scatter on CUDA takes one flat input"},
		{name: "alltoall splits its buffers", args: DeviceArgs{Op: "alltoall", Buf: buf(0x100, 6), Out: buf(0x200, 6)},
			calls: []backend.DeviceCall{send(0x100, 2, 0), recv(0x200, 2, 0), send(0x102, 2, 1), recv(0x202, 2, 1),
				send(0x104, 2, 2), recv(0x204, 2, 2)}, peer: GroupComm},
		{name: "alltoall of an uneven buffer", args: DeviceArgs{Op: "alltoall", Buf: buf(0x100, 7), Out: buf(0x200, 6)},
			err: "alltoall: the input's 7 bytes do not split into 3 equal parts"},
		{name: "send takes the pair's communicator", args: DeviceArgs{Op: "send", Buf: buf(0x100, 4), Peer: 2},
			calls: []backend.DeviceCall{send(0x100, 4, 2)}, peer: 2},
		{name: "send to itself takes the group's", args: DeviceArgs{Op: "send", Buf: buf(0x100, 4), Peer: 0},
			calls: []backend.DeviceCall{send(0x100, 4, 0)}, peer: GroupComm},
		{name: "recv from any source", args: DeviceArgs{Op: "recv", Buf: buf(0x100, 4), Peer: -1},
			err: "NCCL cannot receive from any source"},
		{name: "recv from no rank", args: DeviceArgs{Op: "recv", Buf: buf(0x100, 4), Peer: 3},
			err: "recv: peer 3 is out of range for a group of 3"},
		{name: "barrier", args: DeviceArgs{Op: "barrier"}, err: "barrier has no CUDA form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, peer, err := deviceCalls(3, tc.rank, tc.args)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrInvalid)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.calls, calls)
			require.Equal(t, tc.peer, peer)
		})
	}
}

func TestDeviceSubmitBatch(t *testing.T) {
	acc := &fakeAcc{}
	pg, _ := devGroup(t, 0, 3, acc)
	require.NoError(t, pg.DeviceOpen(0, 1, []byte("pair")))
	_, err := pg.DeviceSubmitBatch(nil)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = pg.DeviceSubmitBatch([]DeviceArgs{{Op: "send", Buf: DeviceBuf{1, 4}, Peer: 1, Stream: 7},
		{Op: "recv", Buf: DeviceBuf{2, 4}, Peer: 1, Stream: 8}})
	require.ErrorContains(t, err, "must share group, flags, device and stream")

	// Sends and receives with one peer take the pair's communicator.
	w, err := pg.DeviceSubmitBatch([]DeviceArgs{{Op: "send", Buf: DeviceBuf{1, 4}, Peer: 1, Stream: 7},
		{Op: "recv", Buf: DeviceBuf{2, 4}, Peer: 1, Stream: 7}})
	require.NoError(t, err)
	require.Equal(t, "coalesced", w.Op)
	c := acc.opened()[0]
	l, _, _, _, _ := c.get()
	require.Len(t, l, 1)
	require.Len(t, l[0].calls, 2)
	c.complete(l[0].ev)
	require.NoError(t, waitWork(t, w, 5*time.Second))
	require.NoError(t, pg.Close())
}
