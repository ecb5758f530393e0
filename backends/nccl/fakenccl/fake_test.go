//go:build cgo

package fakenccl_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/backends/nccl"
	"github.com/godist/godist/backends/nccl/fakenccl"
	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
)

// skip is why the tests cannot run (no C compiler), or "".
var skip string

// fakeSO is the fake library's path, which TestMain points nccl.Config at.
var fakeSO string

// TestMain builds the fake into a temporary folder and points
// backends/nccl at it before anything loads NCCL: this test binary's
// nccl.Load sees only the fake.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fakenccl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	so := filepath.Join(dir, "libfakenccl.so")
	if _, err := exec.LookPath("gcc"); err != nil {
		skip = "gcc is not installed: the fake NCCL library cannot be built"
		return m.Run()
	}
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", so, "fake_nccl.c", "fake_cuda.c", "fake_run.c",
		"-lpthread").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the fake NCCL: %v\n%s", err, out)
		return 1
	}
	nccl.Configure(nccl.Config{NCCLLibrary: so, CUDARTLibrary: so})
	fakeSO = so
	if err := fakenccl.Open(so); err != nil {
		fmt.Fprintf(os.Stderr, "loading the fake NCCL: %v\n", err)
		return 1
	}
	return m.Run()
}

func need(t *testing.T) {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
}

// noMisuse fails t if the fake recorded misuse.
func noMisuse(t *testing.T) {
	t.Helper()
	require.Zero(t, fakenccl.GetCounts().Errors, "the fake recorded misuse:\n%s", fakenccl.Errors())
}

var groups atomic.Int64

// group makes a one-rank group whose device path has its communicator on
// cuda:0; it is closed when t ends.
func group(t *testing.T) *libgodist.ProcessGroup {
	t.Helper()
	name := fmt.Sprintf("g%d", groups.Add(1))
	pg, err := libgodist.New(libgodist.Config{Rank: 0, Size: 1, Group: name, Timeout: 10 * time.Second},
		backend.Set{Accelerator: nccl.Accelerator{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Close() })
	id, err := pg.DeviceID()
	require.NoError(t, err)
	require.Len(t, id, 128)
	require.NoError(t, pg.DeviceOpen(0, libgodist.GroupComm, id))
	require.True(t, pg.HasDeviceComm(libgodist.GroupComm))
	return pg
}

func mem(t *testing.T, n int) *fakenccl.Mem {
	m := fakenccl.Alloc(n)
	t.Cleanup(m.Free)
	return m
}

func putF32(m *fakenccl.Mem, vs ...float32) {
	for i, v := range vs {
		binary.LittleEndian.PutUint32(m.Bytes()[4*i:], math.Float32bits(v))
	}
}

func f32s(m *fakenccl.Mem) []float32 {
	out := make([]float32, len(m.Bytes())/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(m.Bytes()[4*i:]))
	}
	return out
}

func putI64(m *fakenccl.Mem, vs ...int64) {
	for i, v := range vs {
		binary.LittleEndian.PutUint64(m.Bytes()[8*i:], uint64(v))
	}
}

func i64s(m *fakenccl.Mem) []int64 {
	out := make([]int64, len(m.Bytes())/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(m.Bytes()[8*i:]))
	}
	return out
}

// runOp runs op on pg and waits for its Work.
func runOp(t *testing.T, pg *libgodist.ProcessGroup, name string, op libgodist.DeviceOp) {
	t.Helper()
	w, err := pg.DeviceRun(name, op)
	require.NoError(t, err)
	require.NoError(t, w.Wait(5*time.Second), name)
	require.NoError(t, pg.DeviceOrder(w, 0), "DeviceOrder on a completed op")
}

func TestLoad(t *testing.T) {
	need(t)
	lib, err := nccl.Load()
	require.NoError(t, err)
	require.Equal(t, "2.30.7", lib.VersionString())
	require.Equal(t, 13000, lib.RuntimeVersion)
	require.Equal(t, fakeSO, lib.NCCLFrom)
	a, err := lib.UniqueID()
	require.NoError(t, err)
	b, err := lib.UniqueID()
	require.NoError(t, err)
	require.Len(t, a, 128)
	require.NotEqual(t, a, b)
	n, err := lib.DeviceCount()
	require.NoError(t, err)
	require.Equal(t, 2, n)
	noMisuse(t)
}

func TestCollectives(t *testing.T) {
	need(t)
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			pg := group(t)
			op := func(calls ...backend.DeviceCall) libgodist.DeviceOp {
				return libgodist.DeviceOp{Device: 0, Async: async, Peer: -1, Calls: calls}
			}

			in, out := mem(t, 16), mem(t, 16)
			putF32(in, 1, 2.5, -3, 4)
			runOp(t, pg, "allreduce", op(backend.DeviceCall{Kind: backend.CallAllReduce, Send: in.Addr(),
				Recv: out.Addr(), Count: 4, DType: reduce.Float32, Op: reduce.Sum}))
			require.Equal(t, []float32{1, 2.5, -3, 4}, f32s(out))

			runOp(t, pg, "allreduce", op(backend.DeviceCall{Kind: backend.CallAllReduce, Send: in.Addr(),
				Recv: in.Addr(), Count: 4, DType: reduce.Float32, Op: reduce.PremulSum, Factor: 0.5}))
			require.Equal(t, []float32{0.5, 1.25, -1.5, 2}, f32s(in))

			li, lo := mem(t, 24), mem(t, 24)
			putI64(li, -7, 1<<40, 3)
			runOp(t, pg, "allreduce", op(backend.DeviceCall{Kind: backend.CallAllReduce, Send: li.Addr(),
				Recv: lo.Addr(), Count: 3, DType: reduce.Int64, Op: reduce.Max}))
			require.Equal(t, []int64{-7, 1 << 40, 3}, i64s(lo))

			b := mem(t, 5)
			copy(b.Bytes(), "hello")
			runOp(t, pg, "broadcast", op(backend.DeviceCall{Kind: backend.CallBroadcast, Send: b.Addr(),
				Recv: b.Addr(), Count: 5, Bytes: true, Root: 0}))
			require.Equal(t, "hello", string(b.Bytes()))

			g := mem(t, 5)
			runOp(t, pg, "allgather", op(backend.DeviceCall{Kind: backend.CallAllGather, Send: b.Addr(),
				Recv: g.Addr(), Count: 5, Bytes: true}))
			require.Equal(t, "hello", string(g.Bytes()))

			rs := mem(t, 16)
			putF32(in, 9, 8, 7, 6)
			runOp(t, pg, "reduce_scatter", op(backend.DeviceCall{Kind: backend.CallReduceScatter, Send: in.Addr(),
				Recv: rs.Addr(), Count: 4, DType: reduce.Float32, Op: reduce.Sum}))
			require.Equal(t, []float32{9, 8, 7, 6}, f32s(rs))

			src, dst := mem(t, 6), mem(t, 6)
			copy(src.Bytes(), "p2p ok")
			before := fakenccl.GetCounts().GroupStarts
			runOp(t, pg, "send_recv", libgodist.DeviceOp{Device: 0, Async: async, Peer: libgodist.GroupComm, Calls: []backend.DeviceCall{
				{Kind: backend.CallSend, Send: src.Addr(), Count: 6, Bytes: true, Root: 0},
				{Kind: backend.CallRecv, Recv: dst.Addr(), Count: 6, Bytes: true, Root: 0},
			}})
			require.Equal(t, "p2p ok", string(dst.Bytes()))
			require.Equal(t, before+1, fakenccl.GetCounts().GroupStarts, "two calls are one NCCL group")
			require.Zero(t, fakenccl.GetCounts().LivePremul)
			noMisuse(t)
		})
	}
}

func TestGroupedPremulSum(t *testing.T) {
	need(t)
	pg := group(t)
	a, b := mem(t, 8), mem(t, 16)
	putF32(a, 2, -4)
	binary.LittleEndian.PutUint64(b.Bytes(), math.Float64bits(3))
	binary.LittleEndian.PutUint64(b.Bytes()[8:], math.Float64bits(-1.5))
	runOp(t, pg, "allreduce_coalesced", libgodist.DeviceOp{Device: 0, Peer: -1, Calls: []backend.DeviceCall{
		{Kind: backend.CallAllReduce, Send: a.Addr(), Recv: a.Addr(), Count: 2, DType: reduce.Float32,
			Op: reduce.PremulSum, Factor: 0.25},
		{Kind: backend.CallAllReduce, Send: b.Addr(), Recv: b.Addr(), Count: 2, DType: reduce.Float64,
			Op: reduce.PremulSum, Factor: 2},
	}})
	require.Equal(t, []float32{0.5, -1}, f32s(a))
	require.Equal(t, 6.0, math.Float64frombits(binary.LittleEndian.Uint64(b.Bytes())))
	require.Equal(t, -3.0, math.Float64frombits(binary.LittleEndian.Uint64(b.Bytes()[8:])))
	noMisuse(t) // no op was destroyed before ncclGroupEnd
	require.Zero(t, fakenccl.GetCounts().LivePremul, "the ops made for the group are destroyed")
}

func TestHang(t *testing.T) {
	need(t)
	base := fakenccl.GetCounts()
	pg := group(t)
	before := fakenccl.GetCounts()
	fakenccl.SetHang(true)
	defer fakenccl.SetHang(false)
	m := mem(t, 16)
	start := time.Now()
	w, err := pg.DeviceRun("allreduce", libgodist.DeviceOp{Device: 0, Peer: -1, Timeout: 100 * time.Millisecond,
		Calls: []backend.DeviceCall{{Kind: backend.CallAllReduce, Send: m.Addr(), Recv: m.Addr(), Count: 4,
			DType: reduce.Float32, Op: reduce.Sum}}})
	require.NoError(t, err)
	require.NoError(t, waitDone(w, 2*time.Second))
	err = w.Err()
	require.Less(t, time.Since(start), time.Second)
	var oe *libgodist.OpError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Timeout(), "%v", err)
	require.Equal(t, before.Aborts+1, fakenccl.GetCounts().Aborts)

	_, err = pg.DeviceRun("allreduce", libgodist.DeviceOp{Device: 0, Peer: -1,
		Calls: []backend.DeviceCall{{Kind: backend.CallAllReduce, Send: m.Addr(), Recv: m.Addr(), Count: 4,
			DType: reduce.Float32, Op: reduce.Sum}}})
	require.ErrorIs(t, err, libgodist.ErrBroken)

	closed := make(chan struct{})
	go func() { _ = pg.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "closing a group whose communicator hung does not end")
	}
	c := fakenccl.GetCounts()
	require.Equal(t, before.Aborts+1, c.Aborts, "aborted once")
	require.Equal(t, before.Destroys, c.Destroys, "an aborted communicator is not destroyed")
	require.Equal(t, base.LiveEvents, c.LiveEvents, "the events are destroyed")
	require.Equal(t, base.LiveStreams, c.LiveStreams, "the stream is destroyed")
	require.Equal(t, base.LiveComms, c.LiveComms)
	noMisuse(t)
}

// TestHangInGroup: a group that stays in progress (a peer that never
// joins) fails the op when its deadline passes, as a timeout, before
// anything is enqueued after it.
func TestHangInGroup(t *testing.T) {
	need(t)
	pg := group(t)
	before := fakenccl.GetCounts()
	fakenccl.SetHang(true)
	defer fakenccl.SetHang(false)
	src, dst := mem(t, 8), mem(t, 8)
	start := time.Now()
	_, err := pg.DeviceRun("send_recv", libgodist.DeviceOp{Device: 0, Peer: libgodist.GroupComm, Timeout: 100 * time.Millisecond,
		Calls: []backend.DeviceCall{
			{Kind: backend.CallSend, Send: src.Addr(), Count: 8, Bytes: true, Root: 0},
			{Kind: backend.CallRecv, Recv: dst.Addr(), Count: 8, Bytes: true, Root: 0},
		}})
	require.Less(t, time.Since(start), time.Second)
	var oe *libgodist.OpError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Timeout(), "%v", err)
	var ne *nccl.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
	require.Equal(t, before.Aborts+1, fakenccl.GetCounts().Aborts)
	_, err = pg.DeviceRun("send_recv", libgodist.DeviceOp{Device: 0, Peer: libgodist.GroupComm})
	require.ErrorIs(t, err, libgodist.ErrBroken)
	noMisuse(t)
}

// waitDone waits up to d for w to complete.
func waitDone(w *libgodist.Work, d time.Duration) error {
	select {
	case <-w.Done():
		return nil
	case <-time.After(d):
		return errors.New("work did not complete")
	}
}

func TestAsyncErrorPending(t *testing.T) {
	need(t)
	pg := group(t)
	before := fakenccl.GetCounts()
	fakenccl.SetHang(true)
	defer fakenccl.SetHang(false)
	m := mem(t, 16)
	w, err := pg.DeviceRun("allreduce", libgodist.DeviceOp{Device: 0, Peer: -1, Timeout: time.Minute,
		Calls: []backend.DeviceCall{{Kind: backend.CallAllReduce, Send: m.Addr(), Recv: m.Addr(), Count: 4,
			DType: reduce.Float32, Op: reduce.Sum}}})
	require.NoError(t, err)
	fakenccl.SetAsyncError(6)
	defer fakenccl.SetAsyncError(0)
	require.NoError(t, waitDone(w, 2*time.Second), "a pending op fails on the communicator's asynchronous error")
	err = w.Err()
	var oe *libgodist.OpError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Timeout())
	var ne *nccl.Error
	require.ErrorAs(t, err, &ne)
	require.Equal(t, 6, ne.NCCL)
	require.Equal(t, before.Aborts+1, fakenccl.GetCounts().Aborts)
	noMisuse(t)
}

func TestAsyncErrorNext(t *testing.T) {
	need(t)
	pg := group(t)
	before := fakenccl.GetCounts()
	fakenccl.SetAsyncError(6)
	defer fakenccl.SetAsyncError(0)
	m := mem(t, 16)
	op := libgodist.DeviceOp{Device: 0, Peer: -1, Calls: []backend.DeviceCall{{Kind: backend.CallAllReduce,
		Send: m.Addr(), Recv: m.Addr(), Count: 4, DType: reduce.Float32, Op: reduce.Sum}}}
	_, err := pg.DeviceRun("allreduce", op)
	var ne *nccl.Error
	require.ErrorAs(t, err, &ne)
	require.Equal(t, 6, ne.NCCL)
	testutil.Eventually(t, time.Second, func() bool { return fakenccl.GetCounts().Aborts == before.Aborts+1 },
		"the communicator is aborted")
	_, err = pg.DeviceRun("allreduce", op)
	require.ErrorIs(t, err, libgodist.ErrBroken)
	noMisuse(t)
}

func TestClose(t *testing.T) {
	need(t)
	before := fakenccl.GetCounts()
	pg := group(t)
	m := mem(t, 16)
	for _, async := range []bool{false, true} {
		runOp(t, pg, "allreduce", libgodist.DeviceOp{Device: 0, Peer: -1, Async: async,
			Calls: []backend.DeviceCall{{Kind: backend.CallAllReduce, Send: m.Addr(), Recv: m.Addr(), Count: 4,
				DType: reduce.Float32, Op: reduce.Sum}}})
	}
	open := fakenccl.GetCounts()
	require.Equal(t, before.LiveComms+1, open.LiveComms)
	require.Greater(t, open.LiveEvents, before.LiveEvents)
	require.NoError(t, pg.Close())
	c := fakenccl.GetCounts()
	require.Equal(t, before.Finalizes+1, c.Finalizes)
	require.Equal(t, before.Destroys+1, c.Destroys)
	require.Equal(t, before.Aborts, c.Aborts)
	require.Equal(t, before.LiveComms, c.LiveComms)
	require.Equal(t, before.LiveEvents, c.LiveEvents, "the events are destroyed")
	require.Equal(t, before.LiveStreams, c.LiveStreams, "the stream is destroyed")
	noMisuse(t)
}

// TestOpenFails: a communicator whose initialization fails is aborted and
// its stream destroyed, and the group can try again.
func TestOpenFails(t *testing.T) {
	need(t)
	pg, err := libgodist.New(libgodist.Config{Rank: 0, Size: 1, Group: "open-fails", Timeout: 10 * time.Second},
		backend.Set{Accelerator: nccl.Accelerator{}})
	require.NoError(t, err)
	defer pg.Close()
	id, err := pg.DeviceID()
	require.NoError(t, err)
	before := fakenccl.GetCounts()
	fakenccl.SetAsyncError(6)
	err = pg.DeviceOpen(0, libgodist.GroupComm, id)
	fakenccl.SetAsyncError(0)
	var ne *nccl.Error
	require.ErrorAs(t, err, &ne)
	require.Equal(t, 6, ne.NCCL)
	require.Equal(t, "ncclCommInitRankConfig", ne.Call)
	c := fakenccl.GetCounts()
	require.Equal(t, before.Aborts+1, c.Aborts)
	require.Equal(t, before.LiveComms, c.LiveComms)
	require.Equal(t, before.LiveStreams, c.LiveStreams)
	require.Equal(t, before.LiveEvents, c.LiveEvents)
	require.False(t, pg.HasDeviceComm(libgodist.GroupComm))

	err = pg.DeviceOpen(2, libgodist.GroupComm, id) // the fake has cuda:0 and cuda:1
	require.ErrorAs(t, err, &ne)
	require.Equal(t, "cudaSetDevice", ne.Call)
	require.Equal(t, 101, ne.CUDA)

	require.NoError(t, pg.DeviceOpen(0, libgodist.GroupComm, id))
	noMisuse(t)
}
