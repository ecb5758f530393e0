package libgodist

import (
	"context"
	"fmt"
	"sync"
)

// executor runs a group's collectives one at a time, in issue order. Queued
// work is drained by a goroutine started when the queue becomes non-empty;
// a synchronous op (Opts.Inline) that finds the executor idle runs on the
// caller's goroutine instead, which saves a hand-off for small ops.
type executor struct {
	pg      *ProcessGroup
	mu      sync.Mutex
	idle    *sync.Cond // signalled when running becomes false; guarded by mu
	queue   []*task    // guarded by mu
	running bool       // a task is running or a drainer is active; guarded by mu
}

func (e *executor) init(pg *ProcessGroup) {
	e.pg = pg
	e.idle = sync.NewCond(&e.mu)
}

// submit queues a collective and returns its Work; with o.Inline it may run
// it before returning.
func (pg *ProcessGroup) submit(op string, o Opts, run func(c *comm) error) *Work {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = pg.cfg.Timeout
	}
	seq := pg.seq.Add(1)
	w := newWork(op, seq)
	if err := pg.usable(); err != nil {
		w.finish(err, -1)
		return w
	}
	t := &task{w: w, timeout: timeout, run: run}
	e := &pg.exec
	e.mu.Lock()
	if o.Inline && !e.running && len(e.queue) == 0 {
		e.running = true
		e.mu.Unlock()
		pg.runTask(t)
		e.mu.Lock()
		e.running = false
		if len(e.queue) > 0 {
			e.running = true
			go e.drain()
		} else {
			e.idle.Broadcast()
		}
		e.mu.Unlock()
		return w
	}
	e.queue = append(e.queue, t)
	if !e.running {
		e.running = true
		go e.drain()
	}
	e.mu.Unlock()
	return w
}

// drain runs queued tasks until the queue is empty.
func (e *executor) drain() {
	for {
		e.mu.Lock()
		if len(e.queue) == 0 {
			e.running = false
			e.idle.Broadcast()
			e.mu.Unlock()
			return
		}
		t := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.mu.Unlock()
		e.pg.runTask(t)
	}
}

// waitIdle waits until nothing runs or is queued. Called after the group's
// context is canceled, so running tasks end promptly and queued ones fail
// fast (runTask checks usable first).
func (e *executor) waitIdle() {
	e.mu.Lock()
	for e.running || len(e.queue) > 0 {
		e.idle.Wait()
	}
	e.mu.Unlock()
}

func (pg *ProcessGroup) runTask(t *task) {
	pg.entered.Store(t.w.Seq)
	if err := pg.usable(); err != nil {
		t.w.finish(fmt.Errorf("godist: %s (seq %d): %w", t.w.Op, t.w.Seq, err), -1)
		return
	}
	ctx, cancel := context.WithTimeout(pg.ctx, t.timeout)
	c := &comm{tr: pg.tr, arena: pg.arena, ctx: ctx, seq: t.w.Seq, rank: pg.cfg.Rank, size: pg.cfg.Size}
	err := safeRun(t.run, c)
	cancel()
	if err != nil {
		err = pg.opError(t, err)
	}
	t.w.finish(err, -1)
}
