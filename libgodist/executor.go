package libgodist

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/glog"
	"github.com/godist/godist/libgodist/gosched"
	"github.com/godist/godist/libgodist/transport"
)

// executor runs a group's collectives one at a time, in issue order. Queued
// work is drained by a goroutine started when the queue becomes non-empty.
// Two shortcuts save thread hand-offs for small ops: a synchronous op
// (Opts.Inline) that finds nothing queued or running runs on the caller's
// goroutine, and a caller that waits for a queued op that has not started
// yet runs it (and the ops queued before it) itself (runQueued).
type executor struct {
	pg      *ProcessGroup
	mu      sync.Mutex
	idle    *sync.Cond // signalled when the executor may have become idle; guarded by mu
	queue   []*task    // guarded by mu
	running bool       // a drainer goroutine is active; guarded by mu
	busy    bool       // a task is running (on any goroutine); guarded by mu

	// waited: the last deferrable op was waited for within deferStart of
	// its submission, so the next one is left for its waiter too, until
	// timer (deferStart) or a watch starts it; cleared when the timer had
	// to start one. Guarded by mu.
	waited bool
	timer  *time.Timer
	armed  bool // timer is pending; guarded by mu
}

// deferStart bounds how long a deferred op waits for its waiter before
// the drainer starts it anyway (a Go timer below a millisecond may take a
// millisecond when the process is idle).
const deferStart = 500 * time.Microsecond

func (e *executor) init(pg *ProcessGroup) {
	e.pg = pg
	e.idle = sync.NewCond(&e.mu)
	e.waited = true
}

// submit queues a collective and returns its Work; with o.Inline it may run
// it before returning.
func (pg *ProcessGroup) submit(op string, o Opts, call transport.Call, run func(c *comm) error) *Work {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = pg.Timeout()
	}
	seq := pg.seq.Add(1)
	t := &task{work: Work{Op: op, Seq: seq, source: -1}, timeout: timeout, run: run, call: call, detail: o.Detail}
	w := &t.work
	t.w = w
	t.flight = pg.recordCall(seq, op, &t.call, timeout)
	if err := pg.usable(); err != nil && !pg.desyncPending() {
		t.flight.completed(&pg.flight, err)
		w.finish(err, -1)
		return w
	}
	t.call.Seq, t.call.Rank = seq, pg.cfg.Rank
	if o.Detail != "" {
		t.call.Detail = detailHash(o.Detail)
	}
	e := &pg.exec
	e.mu.Lock()
	if o.Inline && !e.busy && len(e.queue) == 0 {
		e.busy = true
		e.mu.Unlock()
		pg.runTask(t)
		e.mu.Lock()
		e.release()
		e.mu.Unlock()
		return w
	}
	e.queue = append(e.queue, t)
	w.assist = func(until time.Time) bool { return e.runQueued(t, until) }
	if o.Deferrable {
		t.at = time.Now()
	}
	if o.Deferrable && e.waited && !e.running && !e.busy {
		w.expedite = e.start
		// An armed timer keeps its deadline: ops issued back to back must
		// not push the first one's start further out.
		if e.timer == nil {
			e.timer = time.AfterFunc(deferStart, e.expire)
			e.armed = true
		} else if !e.armed {
			e.timer.Reset(deferStart)
			e.armed = true
		}
	} else {
		e.kick()
	}
	e.mu.Unlock()
	return w
}

// start starts a drainer for deferred tasks (one of them is watched).
func (e *executor) start() {
	e.mu.Lock()
	e.kick()
	e.mu.Unlock()
}

// expire starts a drainer for deferred tasks no one came for within
// deferStart; the next deferrable ones start at once.
func (e *executor) expire() {
	e.mu.Lock()
	e.armed = false
	if len(e.queue) > 0 && !e.running && !e.busy {
		e.waited = false
	}
	e.kick()
	e.mu.Unlock()
}

// kick starts a drainer if tasks wait and no one runs them. Called with
// e.mu held.
func (e *executor) kick() {
	if len(e.queue) > 0 && !e.running && !e.busy {
		e.running = true
		go e.drain()
	}
}

// release ends a task run by a goroutine other than the drainer: the
// drainer (started, or restarted here) takes the rest. Called with e.mu
// held.
func (e *executor) release() {
	e.busy = false
	e.kick()
	e.idle.Broadcast()
}

// drain runs queued tasks until the queue is empty, or until it finds a
// waiter running them (runQueued), which hands the rest back when done.
func (e *executor) drain() {
	var tick gosched.Ticker // see libgodist/gosched
	for {
		tick.Tick(time.Now())
		e.mu.Lock()
		if len(e.queue) == 0 || e.busy {
			e.running = false
			e.idle.Broadcast()
			e.mu.Unlock()
			return
		}
		t := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.busy = true
		e.mu.Unlock()
		e.pg.runTask(t)
		e.mu.Lock()
		e.busy = false
		e.mu.Unlock()
	}
}

// runQueued runs t on the calling (waiting) goroutine if it has not
// started and nothing runs now: t and the tasks queued before it, in
// order. It reports whether it did; a poll (zero until) never does.
func (e *executor) runQueued(t *task, until time.Time) bool {
	if until.IsZero() {
		return false
	}
	e.mu.Lock()
	i := slices.Index(e.queue, t)
	if e.busy || i < 0 {
		if !t.at.IsZero() && time.Since(t.at) < deferStart {
			e.waited = true // its waiter came in time: defer the next one
		}
		e.mu.Unlock()
		return false
	}
	var runBuf [4]*task
	run := append(runBuf[:0], e.queue[:i+1]...)
	clear(e.queue[:i+1])
	e.queue = e.queue[i+1:]
	e.busy = true
	e.waited = true
	if e.armed && len(e.queue) == 0 {
		// Nothing deferred is left for the timer to start.
		e.timer.Stop()
		e.armed = false
	}
	e.mu.Unlock()
	for _, q := range run {
		e.pg.runTask(q)
	}
	e.mu.Lock()
	e.release()
	e.mu.Unlock()
	return true
}

// waitIdle waits until nothing runs or is queued. Called after the group's
// context is canceled, so running tasks end promptly and queued ones fail
// fast (runTask checks usable first).
func (e *executor) waitIdle() {
	e.mu.Lock()
	e.kick() // deferred tasks too
	for e.running || e.busy || len(e.queue) > 0 {
		e.idle.Wait()
	}
	e.mu.Unlock()
}

func (pg *ProcessGroup) runTask(t *task) {
	pg.entered.Store(t.w.Seq)
	t.started = time.Now()
	t.flight.started(&pg.flight, t.started)
	ctx := &t.ctx
	ctx.init(pg.ctx, t.started, t.timeout)
	ctx.task = t
	if pg.cfg.Size > 1 {
		ctx.watch(pg, queryShare(t.timeout))
	}
	// Stored before the group's state is checked: a desync learned of
	// meanwhile either is seen here or cancels ctx (desynced).
	pg.running.Store(t)
	err := pg.refusal(t.w.Op, t.w.Seq)
	if err == nil {
		if err = pg.abandonedAt(t.w.Op, t.w.Seq); err != nil {
			err = pg.opError(t, err) // breaks the group
		}
	}
	if err != nil {
		ctx.cancel()
		pg.running.CompareAndSwap(t, nil)
		var oe *OpError
		if !errors.As(err, &oe) {
			err = fmt.Errorf("godist: %s (seq %d): %w", t.w.Op, t.w.Seq, err)
		}
		t.flight.completed(&pg.flight, err)
		t.w.finish(err, -1)
		return
	}
	debug := glog.Enabled(glog.Debug)
	if debug {
		pg.traceStart(t)
	}
	// A split child's first collectives wait for its arena to open.
	if err = pg.awaitOpening(ctx); err == nil {
		if de := pg.track(t); de != nil {
			err = &transport.PeerError{Op: "recv", Peer: de.Peer, Err: de}
		} else {
			t.comm = comm{tr: pg.tr, offload: pg.offload, tune: &pg.tune, ctx: ctx, seq: t.w.Seq, rank: pg.cfg.Rank, size: pg.cfg.Size, spare: pg.spare, allSpare: pg.allSpare}
			err = safeRun(t.run, &t.comm)
			if err == nil {
				// A peer that gave up on this collective may have sent its
				// contribution first: fail as it did (agree.go).
				err = pg.abandonedAt(t.w.Op, t.w.Seq)
			}
		}
	}
	ctx.cancel()
	if err != nil {
		err = pg.opError(t, err)
	}
	if debug {
		pg.traceEnd(t, err)
	}
	pg.running.CompareAndSwap(t, nil)
	t.flight.completed(&pg.flight, err)
	t.w.finish(err, -1)
	pg.lastDone.Store(t)
}
