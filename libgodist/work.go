package libgodist

import (
	"errors"
	"sync"
	"time"
)

// ErrNotReady is returned by Work.Wait when the work did not complete
// within the given time.
var ErrNotReady = errors.New("work not completed yet")

// Work is the handle of one queued operation. It completes exactly once.
type Work struct {
	Op  string
	Seq uint64

	done   chan struct{} // made by the first Done before completion; guarded by mu
	mu     sync.Mutex
	fired  bool
	err    error
	source int
	hooks  []func()
	// assist, if set, makes progress toward completion on the waiting
	// goroutine until the work completes or the given time passes (a zero
	// time polls once); it reports false when it cannot help.
	assist func(until time.Time) bool
	// expedite, if set, starts a deferred op now (see Opts.Deferrable).
	expedite func()
}

func newWork(op string, seq uint64) *Work {
	return &Work{Op: op, Seq: seq, source: -1}
}

// closedChan is the Done channel of works that completed before anyone
// asked for one.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done is closed when the work completes. The channel is made on the first
// call: most works complete before anyone asks (synchronous calls) and
// never need one.
func (w *Work) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done == nil {
		if w.fired {
			return closedChan
		}
		w.done = make(chan struct{})
	}
	return w.done
}

// Err is the outcome; valid once Done is closed.
func (w *Work) Err() error {
	<-w.Done()
	return w.err
}

// Source is the rank a receive got its message from (-1 otherwise).
func (w *Work) Source() int {
	<-w.Done()
	return w.source
}

// Wait waits up to d for completion and returns the outcome, or ErrNotReady.
// d <= 0 polls.
func (w *Work) Wait(d time.Duration) error {
	done := w.Done()
	select {
	case <-done:
		return w.err
	default:
	}
	if d <= 0 {
		if w.assist != nil && w.assist(time.Time{}) {
			select {
			case <-done:
				return w.err
			default:
			}
		}
		return ErrNotReady
	}
	if w.assist != nil {
		until := time.Now().Add(d)
		if w.assist(until) {
			select {
			case <-done:
				return w.err
			default:
			}
			d = time.Until(until)
			if d <= 0 {
				return ErrNotReady
			}
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return w.err
	case <-t.C:
		return ErrNotReady
	}
}

// Expedite starts the work now if the executor deferred it for a waiter
// (Opts.Deferrable): someone watches it instead of waiting.
func (w *Work) Expedite() {
	if w.expedite != nil {
		w.expedite()
	}
}

// OnDone registers f to run once the work completes (at once if it has).
// f runs on the completing goroutine and must not block.
func (w *Work) OnDone(f func()) {
	w.mu.Lock()
	if !w.fired {
		w.hooks = append(w.hooks, f)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	f()
}

func (w *Work) finish(err error, source int) {
	w.mu.Lock()
	if w.fired {
		w.mu.Unlock()
		return
	}
	w.fired = true
	w.err = err
	w.source = source
	hooks := w.hooks
	w.hooks = nil
	if w.done != nil {
		close(w.done)
	}
	w.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// Completed returns a finished Work (used for operations with nothing to do).
func completedWork(op string, seq uint64, err error) *Work {
	w := newWork(op, seq)
	w.finish(err, -1)
	return w
}
