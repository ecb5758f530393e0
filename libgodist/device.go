package libgodist

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
)

// The device path: collectives on device memory (CUDA tensors), carried
// by the group's Accelerator (NCCL). The accelerator enqueues them on
// device streams and never blocks; this file keeps what godist adds on
// top: which communicator an op takes, its sequence number, and a
// watchdog that completes each op's Work when its end event has passed,
// and fails it (aborting the communicator) when its deadline passes first
// or the communicator reports an asynchronous error.

// DeviceOp describes one device op.
type DeviceOp struct {
	Device  int     // the device ordinal of the op's tensors
	Stream  uintptr // the caller's current stream on Device
	Async   bool    // run on the communicator's stream after Stream's work so far
	Peer    int     // point-to-point ops: the peer's group rank (its pair's communicator); -1 for collectives
	Calls   []backend.DeviceCall
	Timeout time.Duration // <= 0: the group's
}

// GroupComm is the Peer of DeviceOpen for the whole group's communicator.
const GroupComm = -1

// watchdogTick is how often the watchdog looks at the ops in flight;
// errTick how often it asks the communicators for asynchronous errors.
const (
	watchdogTick = time.Millisecond
	errTick      = 100 * time.Millisecond
)

type deviceComm struct {
	c      backend.DeviceComm
	device int
	peer   int // GroupComm, or the peer of a two-rank communicator
	rank   int // this rank in the communicator
}

// groupRank maps a group rank to this communicator's rank.
func (d *deviceComm) groupRank(r int) int {
	if d.peer == GroupComm {
		return r
	}
	if r == d.peer {
		return 1 - d.rank
	}
	return d.rank
}

type deviceOp struct {
	w        *Work
	comm     *deviceComm
	deadline time.Time
	timeout  time.Duration
	flight   flightRef

	mu  sync.Mutex // guards ev against Release during Order
	ev  backend.Event
	out bool // ev released
}

type devicePath struct {
	pg  *ProcessGroup
	acc backend.Accelerator

	mu      sync.Mutex
	comms   map[int]*deviceComm // by peer (GroupComm for the group's)
	ops     map[*Work]*deviceOp // in flight
	order   []*deviceOp         // in flight, in issue order
	seq     uint64
	broken  error
	closed  bool
	started bool
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// NewWithDevice is NewWithTransport with acc carrying the group's device
// memory (tests that run several ranks of a group in one process).
func NewWithDevice(cfg Config, tr transport.Transport, acc backend.Accelerator) (*ProcessGroup, error) {
	pg, err := NewWithTransport(cfg, tr)
	if err == nil {
		pg.attachDevice(acc)
	}
	return pg, err
}

func (pg *ProcessGroup) attachDevice(acc backend.Accelerator) {
	pg.dev = &devicePath{pg: pg, acc: acc, comms: map[int]*deviceComm{}, ops: map[*Work]*deviceOp{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func (pg *ProcessGroup) device() (*devicePath, error) {
	if pg.dev == nil || pg.dev.acc == nil {
		return nil, invalidf("group %q has no device path", pg.cfg.Group)
	}
	if err := pg.dev.acc.Load(); err != nil {
		return nil, fmt.Errorf("godist: group %q: %s: %w", pg.cfg.Group, pg.dev.acc.Name(), err)
	}
	return pg.dev, nil
}

// DeviceID returns the id a new communicator's leading rank hands out.
func (pg *ProcessGroup) DeviceID() ([]byte, error) {
	d, err := pg.device()
	if err != nil {
		return nil, err
	}
	return d.acc.UniqueID()
}

// DeviceOpen joins a communicator on device: the whole group's (peer
// GroupComm; every rank calls it) or the one this rank shares with peer
// (both call it; the lower rank's id is used). A communicator that exists
// already is kept.
func (pg *ProcessGroup) DeviceOpen(device, peer int, id []byte) error {
	d, err := pg.device()
	if err != nil {
		return err
	}
	if err := pg.usable(); err != nil {
		return err
	}
	if peer != GroupComm && (peer < 0 || peer >= pg.cfg.Size || peer == pg.cfg.Rank) {
		return invalidf("peer %d is not another rank of a group of %d", peer, pg.cfg.Size)
	}
	d.mu.Lock()
	if err := d.usable(); err != nil {
		d.mu.Unlock()
		return err
	}
	if c, ok := d.comms[peer]; ok {
		d.mu.Unlock()
		if c.device != device {
			return invalidf("group %q already uses cuda:%d on this rank, not cuda:%d", pg.cfg.Group, c.device, device)
		}
		return nil
	}
	d.mu.Unlock()
	s := backend.DeviceSetup{Device: device, Rank: pg.cfg.Rank, Size: pg.cfg.Size, ID: id}
	if peer != GroupComm {
		s.Size, s.Rank = 2, 0
		if pg.cfg.Rank > peer {
			s.Rank = 1
		}
	}
	ctx, cancel := context.WithTimeout(pg.ctx, pg.Timeout())
	defer cancel()
	c, err := d.acc.Open(ctx, s)
	if err != nil {
		return fmt.Errorf("godist: group %q: opening the %s communicator on cuda:%d (rank %d of %d): %w",
			pg.cfg.Group, d.acc.Name(), device, s.Rank, s.Size, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		c.Abort()
		_ = c.Close(context.Background())
		return err
	}
	if have, ok := d.comms[peer]; ok { // opened meanwhile by another caller: keep the first
		c.Abort()
		_ = c.Close(context.Background())
		if have.device != device {
			return invalidf("group %q already uses cuda:%d on this rank, not cuda:%d", pg.cfg.Group, have.device, device)
		}
		return nil
	}
	d.comms[peer] = &deviceComm{c: c, device: device, peer: peer, rank: s.Rank}
	return nil
}

// HasDeviceComm reports whether a communicator for peer (or GroupComm)
// exists.
func (pg *ProcessGroup) HasDeviceComm(peer int) bool {
	if pg.dev == nil {
		return false
	}
	pg.dev.mu.Lock()
	defer pg.dev.mu.Unlock()
	_, ok := pg.dev.comms[peer]
	return ok
}

// usable says why the path takes no new ops; d.mu held.
func (d *devicePath) usable() error {
	if d.closed {
		return fmt.Errorf("godist: group %q: %w", d.pg.cfg.Group, ErrClosed)
	}
	if d.broken != nil {
		return fmt.Errorf("godist: group %q: %w: %v", d.pg.cfg.Group, ErrBroken, d.broken)
	}
	return nil
}

// comm picks the communicator of an op on device with peer; d.mu held.
// Point-to-point ops take the communicator of their pair of ranks even
// when the group has one, as ProcessGroupNCCL does: on one communicator a
// send issued before a collective on one rank and after it on the other
// would wait for each other until the timeout.
func (d *devicePath) comm(device, peer int) (*deviceComm, error) {
	c, ok := d.comms[peer]
	if !ok {
		return nil, invalidf("group %q has no communicator on cuda:%d for this op yet", d.pg.cfg.Group, device)
	}
	if c.device != device {
		return nil, invalidf("group %q uses cuda:%d on this rank; the op's tensors are on cuda:%d",
			d.pg.cfg.Group, c.device, device)
	}
	return c, nil
}

// DeviceRun enqueues op and returns its Work, which completes when the
// device has run it.
func (pg *ProcessGroup) DeviceRun(name string, op DeviceOp) (*Work, error) {
	d, err := pg.device()
	if err != nil {
		return nil, err
	}
	if err := pg.usable(); err != nil {
		return nil, err
	}
	timeout := op.Timeout
	if timeout <= 0 {
		timeout = pg.Timeout()
	}
	d.mu.Lock()
	if err := d.usable(); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	c, err := d.comm(op.Device, op.Peer)
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	d.seq++
	seq := d.seq
	d.mu.Unlock()
	ref := pg.recordDevice(name, op.Calls, timeout)
	for i := range op.Calls {
		op.Calls[i].Root = c.groupRank(op.Calls[i].Root)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(pg.ctx, timeout)
	ev, err := c.c.Launch(ctx, op.Stream, op.Async, op.Calls)
	cancel()
	w := newWork(name, seq)
	if err != nil {
		if errors.Is(err, backend.ErrUnsupported) {
			return nil, invalidf("%s (seq %d) in group %q failed: %v", name, seq, pg.cfg.Group, err)
		}
		oe := &OpError{Op: name, Seq: seq, Group: pg.cfg.Group, Peer: -1, Err: err}
		var te interface{ Timeout() bool }
		if errors.As(err, &te) && te.Timeout() {
			oe.After, oe.Err = timeout, errLaunchTimeout{err}
		}
		ref.completed(&pg.flight, oe)
		d.fail(c, oe)
		return nil, oe
	}
	o := &deviceOp{w: w, comm: c, ev: ev, deadline: start.Add(timeout), timeout: timeout, flight: ref}
	d.mu.Lock()
	if d.closed {
		// The group closed while Launch ran: closeDevice has taken the
		// ops in flight already and its watchdog has ended (or never
		// started), so no one would complete this one.
		err := d.usable()
		d.mu.Unlock()
		c.c.Release(ev)
		ref.completed(&pg.flight, err)
		return nil, err
	}
	d.ops[w] = o
	d.order = append(d.order, o)
	if !d.started {
		d.started = true
		go d.watch()
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return w, nil
}

// DeviceOrder makes stream wait for w's device work (at once if it has
// completed) and returns w's error if it has failed.
func (pg *ProcessGroup) DeviceOrder(w *Work, stream uintptr) error {
	if pg.dev == nil {
		return invalidf("group %q has no device path", pg.cfg.Group)
	}
	pg.dev.mu.Lock()
	o := pg.dev.ops[w]
	pg.dev.mu.Unlock()
	if o == nil {
		return w.Err() // completed: its outcome
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.out {
		return w.Err()
	}
	return o.comm.c.Order(stream, o.ev)
}

// release completes o with err and returns its event.
func (d *devicePath) release(o *deviceOp, err error) {
	o.mu.Lock()
	if !o.out {
		o.out = true
		o.comm.c.Release(o.ev)
	}
	o.mu.Unlock()
	d.mu.Lock()
	delete(d.ops, o.w)
	d.mu.Unlock()
	o.flight.completed(&d.pg.flight, err)
	o.w.finish(err, -1)
}

// fail breaks the path with err: c is aborted, and every op in flight on
// it fails with err (an *OpError, of the op that failed).
func (d *devicePath) fail(c *deviceComm, err *OpError) {
	d.mu.Lock()
	if d.broken == nil {
		d.broken = err
	}
	var left, failed []*deviceOp
	for _, o := range d.order {
		if o.comm == c {
			failed = append(failed, o)
		} else {
			left = append(left, o)
		}
	}
	d.order = left
	d.mu.Unlock()
	c.c.Abort()
	for _, o := range failed {
		oe := *err
		if o.w.Seq != err.Seq {
			oe = OpError{Op: o.w.Op, Seq: o.w.Seq, Group: err.Group, Peer: -1,
				Err: fmt.Errorf("%s (seq %d) failed before it: %w", err.Op, err.Seq, err.Err)}
		}
		d.release(o, &oe)
	}
}

// errDeviceTimeout is the Err of an op whose device work outlived its
// deadline; it is a transport timeout, so OpError.Timeout reports it.
type errDeviceTimeout struct{ dev int }

func (e errDeviceTimeout) Error() string {
	return fmt.Sprintf("its work on cuda:%d did not finish (a rank that never joined, or a hung peer); "+
		"the communicator was aborted", e.dev)
}
func (e errDeviceTimeout) Unwrap() error { return transport.ErrTimeout }

// errLaunchTimeout is the Err of an op whose enqueueing outlived its
// deadline (a non-blocking NCCL call that stayed in progress: a peer that
// never joined); like errDeviceTimeout, OpError.Timeout reports it.
type errLaunchTimeout struct{ err error }

func (e errLaunchTimeout) Error() string   { return e.err.Error() }
func (e errLaunchTimeout) Unwrap() []error { return []error{e.err, transport.ErrTimeout} }

// watch is the watchdog: it polls the ops in flight until the path
// closes.
func (d *devicePath) watch() {
	defer close(d.done)
	tick := time.NewTicker(watchdogTick)
	defer tick.Stop()
	lastErrCheck := time.Now()
	for {
		d.mu.Lock()
		idle := len(d.order) == 0
		d.mu.Unlock()
		if idle {
			select {
			case <-d.stop:
				return
			case <-d.wake:
			}
		} else {
			select {
			case <-d.stop:
				return
			case <-tick.C:
			}
		}
		d.poll()
		if now := time.Now(); now.Sub(lastErrCheck) >= errTick {
			lastErrCheck = now
			d.checkComms()
		}
	}
}

// poll completes the ops whose end events have passed and fails those
// past their deadlines.
func (d *devicePath) poll() {
	d.mu.Lock()
	pending := append([]*deviceOp(nil), d.order...)
	d.mu.Unlock()
	var done []*deviceOp
	now := time.Now()
	for _, o := range pending {
		ok, err := o.comm.c.Done(o.ev)
		switch {
		case err != nil:
			d.fail(o.comm, &OpError{Op: o.w.Op, Seq: o.w.Seq, Group: d.pg.cfg.Group, Peer: -1, Err: err})
			return
		case ok:
			done = append(done, o)
		case now.After(o.deadline):
			d.fail(o.comm, &OpError{Op: o.w.Op, Seq: o.w.Seq, Group: d.pg.cfg.Group, Peer: -1,
				After: o.timeout, Err: errDeviceTimeout{dev: o.comm.device}})
			return
		}
	}
	if len(done) == 0 {
		return
	}
	d.mu.Lock()
	keep := d.order[:0]
	for _, o := range d.order {
		if !contains(done, o) {
			keep = append(keep, o)
		}
	}
	d.order = keep
	d.mu.Unlock()
	for _, o := range done {
		d.release(o, nil)
	}
}

func contains(os []*deviceOp, o *deviceOp) bool {
	for _, x := range os {
		if x == o {
			return true
		}
	}
	return false
}

// checkComms fails the communicators that report an asynchronous error.
func (d *devicePath) checkComms() {
	d.mu.Lock()
	comms := make([]*deviceComm, 0, len(d.comms))
	for _, c := range d.comms {
		comms = append(comms, c)
	}
	var first *deviceOp
	if len(d.order) > 0 {
		first = d.order[0]
	}
	d.mu.Unlock()
	for _, c := range comms {
		if err := c.c.Err(); err != nil {
			oe := &OpError{Op: "nccl", Group: d.pg.cfg.Group, Peer: -1, Err: err}
			if first != nil && first.comm == c {
				oe.Op, oe.Seq = first.w.Op, first.w.Seq
			}
			d.fail(c, oe)
		}
	}
}

// closeDevice ends the path with the group: gracefully (the ops in flight
// get until their deadlines, at most closeWait, then the communicators are
// destroyed) or, with abortErr, at once.
func (pg *ProcessGroup) closeDevice(abortErr error) {
	d := pg.dev
	if d == nil {
		return
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	started := d.started
	comms := d.comms
	d.comms = map[int]*deviceComm{}
	d.mu.Unlock()
	if abortErr == nil && started {
		until := time.Now().Add(closeWait)
		for time.Now().Before(until) {
			d.mu.Lock()
			n := len(d.order)
			d.mu.Unlock()
			if n == 0 {
				break
			}
			time.Sleep(watchdogTick)
		}
	}
	if started {
		close(d.stop)
		<-d.done
	}
	for _, c := range comms {
		if abortErr != nil {
			c.c.Abort()
		}
	}
	d.mu.Lock()
	left := d.order
	d.order = nil
	d.mu.Unlock()
	for _, o := range left {
		err := abortErr
		if err == nil {
			err = fmt.Errorf("godist: group %q: %w before its device work finished", pg.cfg.Group, ErrClosed)
			o.comm.c.Abort()
		}
		d.release(o, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	for _, c := range comms {
		_ = c.c.Close(ctx)
	}
}

// closeWait bounds how long closing a group waits for its device work.
const closeWait = 10 * time.Second
