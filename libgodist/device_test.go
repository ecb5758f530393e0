package libgodist

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// fakeAcc is an Accelerator whose communicators are fakeComms.
type fakeAcc struct {
	loadErr error

	mu     sync.Mutex
	setups []backend.DeviceSetup
	comms  []*fakeComm
	ids    int
}

func (a *fakeAcc) Name() string { return "fakeacc" }
func (a *fakeAcc) Load() error  { return a.loadErr }

func (a *fakeAcc) UniqueID() ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids++
	return []byte("fake-id"), nil
}

func (a *fakeAcc) Open(_ context.Context, s backend.DeviceSetup) (backend.DeviceComm, error) {
	c := &fakeComm{setup: s, done: map[backend.Event]bool{}, released: map[backend.Event]int{}}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.setups = append(a.setups, s)
	a.comms = append(a.comms, c)
	return c, nil
}

func (a *fakeAcc) opened() []*fakeComm {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*fakeComm(nil), a.comms...)
}

type fakeLaunch struct {
	stream uintptr
	async  bool
	calls  []backend.DeviceCall
	ev     backend.Event
}

type fakeOrder struct {
	stream uintptr
	ev     backend.Event
}

// fakeComm is a DeviceComm whose events complete when the test says so.
type fakeComm struct {
	setup backend.DeviceSetup

	mu        sync.Mutex
	next      backend.Event
	done      map[backend.Event]bool
	launches  []fakeLaunch
	orders    []fakeOrder
	released  map[backend.Event]int
	asyncErr  error
	launchErr error
	gate      chan struct{} // if set, Launch waits for it to close
	entered   chan struct{} // if set, Launch closes it on entry
	aborts    int
	closes    int
	looks     map[backend.Event]int // Done calls per event: the watchdog's polls
}

func (c *fakeComm) Launch(_ context.Context, stream uintptr, async bool, calls []backend.DeviceCall) (backend.Event, error) {
	c.mu.Lock()
	gate, entered := c.gate, c.entered
	c.entered = nil
	c.mu.Unlock()
	if entered != nil {
		close(entered)
	}
	if gate != nil {
		<-gate
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.launchErr != nil {
		return 0, c.launchErr
	}
	c.next++
	ev := c.next
	c.done[ev] = false
	c.launches = append(c.launches, fakeLaunch{stream: stream, async: async,
		calls: append([]backend.DeviceCall(nil), calls...), ev: ev})
	return ev, nil
}

func (c *fakeComm) Done(ev backend.Event) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.looks == nil {
		c.looks = map[backend.Event]int{}
	}
	c.looks[ev]++
	return c.done[ev], nil
}

// looked returns how many times the watchdog has asked whether ev is done.
func (c *fakeComm) looked(ev backend.Event) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.looks[ev]
}

// watched waits until the watchdog has polled each of evs n more times
// than when it was called: an op whose event is not done by then has
// stayed pending through n of the watchdog's looks at it.
func watched(t *testing.T, c *fakeComm, n int, evs ...backend.Event) {
	t.Helper()
	want := make([]int, len(evs))
	for i, ev := range evs {
		want[i] = c.looked(ev) + n
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		for i, ev := range evs {
			if c.looked(ev) < want[i] {
				return false
			}
		}
		return true
	}, fmt.Sprintf("%d watchdog polls of events %v", n, evs))
}

func (c *fakeComm) Order(stream uintptr, ev backend.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.orders = append(c.orders, fakeOrder{stream, ev})
	return nil
}

func (c *fakeComm) Release(ev backend.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released[ev]++
}

func (c *fakeComm) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asyncErr
}

func (c *fakeComm) Abort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.aborts++
}

func (c *fakeComm) Close(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closes++
	return nil
}

func (c *fakeComm) complete(ev backend.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done[ev] = true
}

func (c *fakeComm) set(f func(c *fakeComm)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *fakeComm) get() (launches []fakeLaunch, orders []fakeOrder, released map[backend.Event]int, aborts, closes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rel := map[backend.Event]int{}
	for k, v := range c.released {
		rel[k] = v
	}
	return append([]fakeLaunch(nil), c.launches...), append([]fakeOrder(nil), c.orders...), rel, c.aborts, c.closes
}

func (c *fakeComm) aborted() int { _, _, _, a, _ := c.get(); return a }
func (c *fakeComm) closedN() int { _, _, _, _, n := c.get(); return n }
func (c *fakeComm) lastEv() backend.Event {
	l, _, _, _, _ := c.get()
	if len(l) == 0 {
		return 0
	}
	return l[len(l)-1].ev
}

// devGroup builds an in-memory group of size ranks and attaches acc to
// the one of rank rank.
func devGroup(t *testing.T, rank, size int, acc backend.Accelerator) (*ProcessGroup, []*ProcessGroup) {
	t.Helper()
	pgs, _ := group(t, size, 10*time.Second)
	pg := pgs[rank]
	pg.attachDevice(acc)
	return pg, pgs
}

// waitWork waits up to d for w and fails the test if it has not completed.
func waitWork(t *testing.T, w *Work, d time.Duration) error {
	t.Helper()
	select {
	case <-w.Done():
		return w.Err()
	case <-time.After(d):
		t.Fatalf("%s (seq %d) did not complete within %v", w.Op, w.Seq, d)
		return nil
	}
}

func requirePending(t *testing.T, w *Work) {
	t.Helper()
	select {
	case <-w.Done():
		t.Fatalf("%s (seq %d) completed early: %v", w.Op, w.Seq, w.Err())
	default:
	}
}

// noGoroutineLeak polls until the number of goroutines is back to before.
func noGoroutineLeak(t *testing.T, before int) {
	t.Helper()
	var n int
	ok := testutil.WaitUntil(5*time.Second, func() bool {
		n = runtime.NumGoroutine()
		return n <= before
	})
	require.True(t, ok, "goroutines: %d before, %d after", before, n)
}

func allReduceOp(device int) DeviceOp {
	return DeviceOp{Device: device, Stream: 7, Peer: GroupComm, Calls: []backend.DeviceCall{
		{Kind: backend.CallAllReduce, Send: 1, Recv: 1, Count: 4, DType: reduce.Float32, Op: reduce.Sum},
	}}
}

func TestDeviceRunCompletesOnEvent(t *testing.T) {
	acc := &fakeAcc{}
	pg, _ := devGroup(t, 1, 3, acc)
	require.NoError(t, pg.DeviceOpen(0, GroupComm, []byte("id")))
	require.True(t, pg.HasDeviceComm(GroupComm))
	require.Equal(t, []backend.DeviceSetup{{Device: 0, Rank: 1, Size: 3, ID: []byte("id")}}, acc.setups)
	c := acc.opened()[0]

	var ws []*Work
	for i := 1; i <= 3; i++ {
		op := allReduceOp(0)
		op.Calls = append(op.Calls, backend.DeviceCall{Kind: backend.CallBroadcast, Bytes: true, Count: 8, Root: 2})
		w, err := pg.DeviceRun("allreduce", op)
		require.NoError(t, err)
		require.Equal(t, uint64(i), w.Seq)
		require.Equal(t, "allreduce", w.Op)
		ws = append(ws, w)
	}
	launches, _, _, _, _ := c.get()
	require.Len(t, launches, 3)
	for _, l := range launches {
		require.Equal(t, uintptr(7), l.stream)
		require.Equal(t, 2, l.calls[1].Root, "the group communicator's ranks are the group's")
	}
	// Nothing completes before its event.
	watched(t, c, 20, launches[0].ev, launches[1].ev, launches[2].ev)
	for _, w := range ws {
		requirePending(t, w)
	}
	c.complete(launches[1].ev)
	require.NoError(t, waitWork(t, ws[1], 5*time.Second))
	requirePending(t, ws[0])
	requirePending(t, ws[2])
	c.complete(launches[0].ev)
	c.complete(launches[2].ev)
	require.NoError(t, waitWork(t, ws[0], 5*time.Second))
	require.NoError(t, waitWork(t, ws[2], 5*time.Second))

	// Close stops the watchdog and waits for it: nothing was released
	// twice, by a later poll or by closing.
	require.NoError(t, pg.Close())
	_, _, released, aborts, closes := c.get()
	require.Equal(t, map[backend.Event]int{launches[0].ev: 1, launches[1].ev: 1, launches[2].ev: 1}, released)
	require.Zero(t, aborts)
	require.Equal(t, 1, closes)
}

func TestDevicePairCommRoots(t *testing.T) {
	for _, tc := range []struct {
		rank, peer, pairRank int
	}{
		{rank: 1, peer: 3, pairRank: 0},
		{rank: 3, peer: 1, pairRank: 1},
	} {
		acc := &fakeAcc{}
		pg, _ := devGroup(t, tc.rank, 4, acc)
		require.NoError(t, pg.DeviceOpen(2, tc.peer, []byte("pair")))
		require.True(t, pg.HasDeviceComm(tc.peer))
		require.False(t, pg.HasDeviceComm(GroupComm))
		require.Equal(t, []backend.DeviceSetup{{Device: 2, Rank: tc.pairRank, Size: 2, ID: []byte("pair")}}, acc.setups)
		c := acc.opened()[0]

		w, err := pg.DeviceRun("send", DeviceOp{Device: 2, Stream: 9, Peer: tc.peer, Calls: []backend.DeviceCall{
			{Kind: backend.CallSend, Send: 1, Count: 16, Bytes: true, Root: tc.peer},
			{Kind: backend.CallRecv, Recv: 2, Count: 16, Bytes: true, Root: tc.peer},
		}})
		require.NoError(t, err)
		l, _, _, _, _ := c.get()
		require.Len(t, l, 1)
		require.Equal(t, 1-tc.pairRank, l[0].calls[0].Root, "rank %d, peer %d", tc.rank, tc.peer)
		require.Equal(t, 1-tc.pairRank, l[0].calls[1].Root)
		c.complete(l[0].ev)
		require.NoError(t, waitWork(t, w, 5*time.Second))
		require.NoError(t, pg.Close())
	}
}

func TestDeviceInvalid(t *testing.T) {
	acc := &fakeAcc{}
	pg, _ := devGroup(t, 1, 3, acc)

	_, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.ErrorIs(t, err, ErrInvalid, "no communicator yet")

	for _, peer := range []int{-2, 1, 3, 10} {
		err := pg.DeviceOpen(0, peer, nil)
		require.ErrorIs(t, err, ErrInvalid, "peer %d", peer)
	}
	require.Empty(t, acc.opened())

	require.NoError(t, pg.DeviceOpen(0, GroupComm, []byte("a")))
	require.NoError(t, pg.DeviceOpen(0, GroupComm, []byte("b")), "opening again keeps the first")
	require.Len(t, acc.opened(), 1)
	err = pg.DeviceOpen(1, GroupComm, nil)
	require.Error(t, err)
	require.ErrorIs(t, err, ErrInvalid)
	require.Len(t, acc.opened(), 1)

	_, err = pg.DeviceRun("allreduce", allReduceOp(1))
	require.ErrorIs(t, err, ErrInvalid, "tensors on another device")
	require.Contains(t, err.Error(), "cuda:1")
	l, _, _, _, _ := acc.opened()[0].get()
	require.Empty(t, l)

	// The invalid calls did not break the path.
	w, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.NoError(t, err)
	acc.opened()[0].complete(acc.opened()[0].lastEv())
	require.NoError(t, waitWork(t, w, 5*time.Second))
}

func TestDeviceTimeout(t *testing.T) {
	acc := &fakeAcc{}
	pg, _ := devGroup(t, 0, 2, acc)
	require.NoError(t, pg.DeviceOpen(3, GroupComm, nil))
	c := acc.opened()[0]

	op := allReduceOp(3)
	op.Timeout = 50 * time.Millisecond
	w1, err := pg.DeviceRun("allreduce", op)
	require.NoError(t, err)
	w2, err := pg.DeviceRun("broadcast", allReduceOp(3)) // the group's timeout: 10 s
	require.NoError(t, err)

	start := time.Now()
	err = waitWork(t, w1, 5*time.Second)
	require.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond)
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Timeout(), "%v", err)
	require.Equal(t, "allreduce", oe.Op)
	require.Equal(t, uint64(1), oe.Seq)
	require.Equal(t, "test", oe.Group)
	require.Equal(t, 50*time.Millisecond, oe.After)
	require.Contains(t, err.Error(), "cuda:3")
	require.GreaterOrEqual(t, c.aborted(), 1)

	err = waitWork(t, w2, 5*time.Second)
	require.Error(t, err)
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "broadcast", oe.Op)
	require.Equal(t, uint64(2), oe.Seq)
	require.Contains(t, err.Error(), "allreduce (seq 1)")

	_, err = pg.DeviceRun("allreduce", allReduceOp(3))
	require.ErrorIs(t, err, ErrBroken)
	require.Contains(t, err.Error(), "allreduce (seq 1)")
	_, _, released, _, _ := c.get()
	require.Equal(t, map[backend.Event]int{1: 1, 2: 1}, released)
	l, _, _, _, _ := c.get()
	require.Len(t, l, 2, "nothing launched on a broken path")
}

func TestDeviceAsyncError(t *testing.T) {
	acc := &fakeAcc{}
	pg, _ := devGroup(t, 0, 2, acc)
	require.NoError(t, pg.DeviceOpen(0, GroupComm, nil))
	c := acc.opened()[0]

	w1, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.NoError(t, err)
	w2, err := pg.DeviceRun("allgather", allReduceOp(0))
	require.NoError(t, err)
	launches, _, _, _, _ := c.get()
	require.Len(t, launches, 2)
	watched(t, c, 20, launches[0].ev, launches[1].ev)
	requirePending(t, w1)
	requirePending(t, w2)
	require.Zero(t, c.aborted())

	peerFailed := errors.New("remote process exited")
	c.set(func(c *fakeComm) { c.asyncErr = peerFailed })
	err = waitWork(t, w1, 5*time.Second)
	require.ErrorIs(t, err, peerFailed)
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "allreduce", oe.Op)
	require.Equal(t, uint64(1), oe.Seq)
	err = waitWork(t, w2, 5*time.Second)
	require.ErrorIs(t, err, peerFailed)
	require.GreaterOrEqual(t, c.aborted(), 1)

	_, err = pg.DeviceRun("allreduce", allReduceOp(0))
	require.ErrorIs(t, err, ErrBroken)
	require.Contains(t, err.Error(), "remote process exited")
}

func TestDeviceLaunchErrors(t *testing.T) {
	acc := &fakeAcc{}
	pg, _ := devGroup(t, 0, 2, acc)
	require.NoError(t, pg.DeviceOpen(0, GroupComm, nil))
	c := acc.opened()[0]

	c.set(func(c *fakeComm) { c.launchErr = wrapErr("bfloat16 max", backend.ErrUnsupported) })
	_, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, `godist: allreduce (seq 1) in group "test" failed: bfloat16 max: `+backend.ErrUnsupported.Error(), err.Error())
	require.Zero(t, c.aborted())

	// Not broken: the next op runs.
	c.set(func(c *fakeComm) { c.launchErr = nil })
	w, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.NoError(t, err)
	pending, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.NoError(t, err)
	c.complete(1)
	require.NoError(t, waitWork(t, w, 5*time.Second))

	launchFailed := errors.New("unhandled cuda error")
	c.set(func(c *fakeComm) { c.launchErr = launchFailed })
	_, err = pg.DeviceRun("reduce", allReduceOp(0))
	require.ErrorIs(t, err, launchFailed)
	require.NotErrorIs(t, err, ErrInvalid)
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "reduce", oe.Op)
	require.Equal(t, 1, c.aborted())
	err = waitWork(t, pending, 5*time.Second)
	require.ErrorIs(t, err, launchFailed, "the op in flight on the aborted communicator fails")

	c.set(func(c *fakeComm) { c.launchErr = nil })
	_, err = pg.DeviceRun("allreduce", allReduceOp(0))
	require.ErrorIs(t, err, ErrBroken)
}

func wrapErr(msg string, err error) error { return &wrapped{msg, err} }

type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg + ": " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func TestDeviceOrder(t *testing.T) {
	acc := &fakeAcc{}
	pg, _ := devGroup(t, 0, 2, acc)
	require.NoError(t, pg.DeviceOpen(0, GroupComm, nil))
	c := acc.opened()[0]

	w, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.NoError(t, err)
	ev := c.lastEv()
	require.NoError(t, pg.DeviceOrder(w, 42))
	_, orders, _, _, _ := c.get()
	require.Equal(t, []fakeOrder{{stream: 42, ev: ev}}, orders)

	c.complete(ev)
	require.NoError(t, waitWork(t, w, 5*time.Second))
	require.NoError(t, pg.DeviceOrder(w, 43))
	_, orders, _, _, _ = c.get()
	require.Len(t, orders, 1, "no Order on a released event")

	// A failed op: its error, and no Order.
	op := allReduceOp(0)
	op.Timeout = 20 * time.Millisecond
	w2, err := pg.DeviceRun("allreduce", op)
	require.NoError(t, err)
	werr := waitWork(t, w2, 5*time.Second)
	require.Error(t, werr)
	require.Equal(t, werr, pg.DeviceOrder(w2, 44))
	_, orders, _, _, _ = c.get()
	require.Len(t, orders, 1)
}

func TestDeviceCloseWaitsForWork(t *testing.T) {
	before := runtime.NumGoroutine()
	acc := &fakeAcc{}
	pg, pgs := devGroup(t, 0, 2, acc)
	require.NoError(t, pg.DeviceOpen(0, GroupComm, nil))
	c := acc.opened()[0]
	w, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.NoError(t, err)

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = pg.Close()
	}()
	// Close waits for the op: the communicator stays open meanwhile, while
	// the watchdog keeps polling the op's event.
	testutil.Eventually(t, 5*time.Second, func() bool {
		pg.dev.mu.Lock()
		defer pg.dev.mu.Unlock()
		return pg.dev.closed
	}, "Close to start")
	watched(t, c, 30, c.lastEv())
	select {
	case <-closed:
		t.Fatal("Close returned with an op in flight")
	default:
	}
	requirePending(t, w)
	require.Zero(t, c.closedN())
	c.complete(c.lastEv())
	require.NoError(t, waitWork(t, w, 5*time.Second))
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	require.Equal(t, 1, c.closedN())
	require.Zero(t, c.aborted())
	select {
	case <-pg.dev.done:
	default:
		t.Fatal("the watchdog is still running")
	}
	_, err = pg.DeviceRun("allreduce", allReduceOp(0))
	require.ErrorIs(t, err, ErrClosed)
	for _, p := range pgs {
		require.NoError(t, p.Close())
	}
	noGoroutineLeak(t, before)
}

func TestDeviceAbort(t *testing.T) {
	before := runtime.NumGoroutine()
	acc := &fakeAcc{}
	pg, pgs := devGroup(t, 0, 2, acc)
	require.NoError(t, pg.DeviceOpen(0, GroupComm, nil))
	require.NoError(t, pg.DeviceOpen(0, 1, nil))
	comms := acc.opened()
	w, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.NoError(t, err)

	abortErr := errors.New("the job is going down")
	pg.Abort(abortErr)
	require.ErrorIs(t, waitWork(t, w, 5*time.Second), abortErr)
	for _, c := range comms {
		require.Equal(t, 1, c.aborted())
		require.Equal(t, 1, c.closedN())
	}
	_, _, released, _, _ := comms[0].get()
	require.Equal(t, map[backend.Event]int{1: 1}, released)
	for _, p := range pgs {
		require.NoError(t, p.Close())
	}
	noGoroutineLeak(t, before)
}

// TestDeviceCloseDuringLaunch: an op whose Launch is under way when the
// group closes still completes, and leaves no goroutine behind.
func TestDeviceCloseDuringLaunch(t *testing.T) {
	for _, started := range []bool{false, true} {
		before := runtime.NumGoroutine()
		acc := &fakeAcc{}
		pg, pgs := devGroup(t, 0, 2, acc)
		require.NoError(t, pg.DeviceOpen(0, GroupComm, nil))
		c := acc.opened()[0]
		if started { // the watchdog runs already
			w, err := pg.DeviceRun("allreduce", allReduceOp(0))
			require.NoError(t, err)
			c.complete(c.lastEv())
			require.NoError(t, waitWork(t, w, 5*time.Second))
		}
		gate, entered := make(chan struct{}), make(chan struct{})
		c.set(func(c *fakeComm) { c.gate, c.entered = gate, entered })
		type result struct {
			w   *Work
			err error
		}
		res := make(chan result, 1)
		go func() {
			w, err := pg.DeviceRun("allreduce", allReduceOp(0))
			res <- result{w, err}
		}()
		<-entered
		pg.Abort(errors.New("going down"))
		require.Equal(t, 1, c.closedN())
		close(gate)
		var r result
		select {
		case r = <-res:
		case <-time.After(5 * time.Second):
			t.Fatal("DeviceRun did not return")
		}
		if r.err == nil {
			_ = waitWork(t, r.w, 5*time.Second)
			t.Fatalf("started=%v: DeviceRun on a closed group succeeded", started)
		}
		require.ErrorIs(t, r.err, ErrClosed, "started=%v", started)
		_, _, released, _, _ := c.get()
		require.Equal(t, 1, released[c.lastEv()], "the launched op's event is released")
		for _, p := range pgs {
			require.NoError(t, p.Close())
		}
		noGoroutineLeak(t, before)
	}
}

func TestDeviceLoadFails(t *testing.T) {
	noLib := errors.New("libnccl.so.2: cannot open shared object file")
	acc := &fakeAcc{loadErr: noLib}
	pg, _ := devGroup(t, 0, 2, acc)

	_, err := pg.DeviceID()
	require.ErrorIs(t, err, noLib)
	require.Contains(t, err.Error(), "fakeacc")
	err = pg.DeviceOpen(0, GroupComm, nil)
	require.ErrorIs(t, err, noLib)
	require.Contains(t, err.Error(), "fakeacc")
	_, err = pg.DeviceRun("allreduce", allReduceOp(0))
	require.ErrorIs(t, err, noLib)
	require.Contains(t, err.Error(), "fakeacc")
	require.Empty(t, acc.opened())
	require.Zero(t, acc.ids)

	// Without an accelerator at all.
	net := transport.NewMemNetwork(1)
	bare, err := NewWithTransport(Config{Rank: 0, Size: 1, Group: "bare", Timeout: time.Second}, net.Transport(0))
	require.NoError(t, err)
	defer bare.Close()
	_, err = bare.DeviceID()
	require.ErrorIs(t, err, ErrInvalid)
	require.False(t, bare.HasDeviceComm(GroupComm))
}
