package libgodist

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// opContext is the context an op runs under: the group's context with the
// op's deadline. context.WithTimeout would give every op a timer, a
// channel and about 500 bytes of garbage; ops that finish without blocking
// on Done (most small ones on shared memory, which poll Err) then made
// the garbage collector run every few thousand ops, and its cycles showed
// as bursts of slow ops. This one makes the timer and channel only when
// Done is first called.
//
// Err reports the deadline as soon as it has passed, before Done is
// closed; after cancel, Err is context.Canceled.
//
// A context with a task also warns its group when the deadline is near
// (share before it: the query of the peers' progress starts then,
// progress.go): the first Err from then on, or a timer that the first
// Done starts, calls pg.nearDeadline once. Neither costs anything on ops
// that finish early.
type opContext struct {
	parent   context.Context
	deadline time.Time
	share    time.Duration // how long before the deadline pg is warned
	pg       *ProcessGroup // warned share before the deadline, if set
	task     *task         // the collective (its call is the fingerprint), or nil
	warned   atomic.Bool   // pg was warned (or is no longer to be)

	mu       sync.Mutex
	inner    atomic.Pointer[innerCtx] // made by the first Done
	canceled atomic.Bool              // set under mu
}

type innerCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	warn   *time.Timer // calls warn share before the deadline, or nil
}

func newOpContext(parent context.Context, timeout time.Duration) *opContext {
	c := &opContext{}
	c.init(parent, time.Now(), timeout)
	return c
}

// init sets up a zero opContext (one embedded in a task, which saves an
// allocation per collective) whose deadline is timeout after now.
func (c *opContext) init(parent context.Context, now time.Time, timeout time.Duration) {
	c.parent, c.deadline = parent, now.Add(timeout)
}

// watch makes the context warn pg, share before its deadline, that t's
// deadline is near. Called before the context is used.
func (c *opContext) watch(pg *ProcessGroup, share time.Duration) {
	c.pg, c.share = pg, share
}

func (c *opContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Value answers transport.CallKey with the op's Call and looks other keys
// up in the group's context (context.Cause finds the group's cause there).
func (c *opContext) Value(key any) any {
	if _, ok := key.(transport.CallKey); ok && c.task != nil {
		return &c.task.call
	}
	return c.parent.Value(key)
}

func (c *opContext) Err() error {
	if in := c.inner.Load(); in != nil {
		if err := in.ctx.Err(); err != nil {
			return err
		}
	}
	if c.canceled.Load() {
		return context.Canceled
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if now := time.Now(); !now.Before(c.deadline.Add(-c.share)) {
		c.warn()
		if !now.Before(c.deadline) {
			return context.DeadlineExceeded
		}
	}
	return nil
}

// warn tells the group, once, that the op's deadline is near.
func (c *opContext) warn() {
	if c.pg != nil && !c.canceled.Load() && c.warned.CompareAndSwap(false, true) {
		c.pg.nearDeadline(c.task)
	}
}

func (c *opContext) Done() <-chan struct{} {
	if in := c.inner.Load(); in != nil {
		return in.ctx.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if in := c.inner.Load(); in != nil {
		return in.ctx.Done()
	}
	ctx, cancel := context.WithDeadline(c.parent, c.deadline)
	in := &innerCtx{ctx: ctx, cancel: cancel}
	if c.canceled.Load() {
		cancel()
	} else if c.pg != nil {
		in.warn = time.AfterFunc(time.Until(c.deadline)-c.share, c.warn)
	}
	c.inner.Store(in)
	return ctx.Done()
}

// cancel ends the context (idempotent): Done, if made, is closed and its
// timer stopped.
func (c *opContext) cancel() {
	c.mu.Lock()
	c.canceled.Store(true)
	in := c.inner.Load()
	c.mu.Unlock()
	if in != nil {
		in.cancel()
		if in.warn != nil {
			in.warn.Stop()
		}
	}
}
