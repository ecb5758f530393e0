package main

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist"
)

// godist_work_wait waits up to timeout_ms (0 polls) for a work to complete.
// It returns statusNotReady if it has not, else the work's outcome; *source
// receives the sender's rank for a receive (-1 otherwise). The handle stays
// valid until godist_work_free.
//
//export godist_work_wait
func godist_work_wait(h C.uint64_t, timeoutMs C.int64_t, source *C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	w, done, err := waitWork(uint64(h), int64(timeoutMs))
	if !done {
		return statusNotReady
	}
	if w != nil && source != nil {
		*source = C.int32_t(w.Source())
	}
	return finish(err, errbuf, errlen)
}

// waitWork waits up to timeoutMs for work h; done is false while it runs.
// An unknown handle is done with the lookup's error and no work.
func waitWork(h uint64, timeoutMs int64) (w *libgodist.Work, done bool, err error) {
	w, err = lookup[*libgodist.Work](h)
	if err != nil {
		return nil, true, err
	}
	err = w.Wait(time.Duration(timeoutMs) * time.Millisecond)
	if errors.Is(err, libgodist.ErrNotReady) {
		return w, false, nil
	}
	return w, true, err
}

// freeWork releases work handle h (its completion-queue entry too).
func freeWork(h uint64) {
	handles.drop(h)
	completions.forget(h)
}

// godist_work_free releases a work handle; it returns statusInvalid for an
// unknown handle.
//
//export godist_work_free
func godist_work_free(h C.uint64_t) (rc C.int) {
	defer recoverTo(&rc, nil, 0)
	if _, err := lookup[*libgodist.Work](uint64(h)); err != nil {
		return statusInvalid
	}
	freeWork(uint64(h))
	return statusOK
}

// godist_work_watch has an asynchronous work (GODIST_ASYNC) pushed to the
// completion queue when it completes (at once if it has); it returns
// statusInvalid for an unknown handle. Watching twice is harmless.
//
//export godist_work_watch
func godist_work_watch(h C.uint64_t) (rc C.int) {
	defer recoverTo(&rc, nil, 0)
	w, err := lookup[*libgodist.Work](uint64(h))
	if err != nil {
		return statusInvalid
	}
	completions.watch(uint64(h), w)
	w.Expedite()
	return statusOK
}

// godist_work_claim takes a watched work away from the
// completion queue, for a caller that waits for it itself: it returns
// statusOK if the handle will never be pushed, statusNotReady if it was
// pushed already (godist_wait_any reports or has reported it), and
// statusInvalid for an unknown handle. A work that was never watched counts
// as claimed.
//
//export godist_work_claim
func godist_work_claim(h C.uint64_t) (rc C.int) {
	defer recoverTo(&rc, nil, 0)
	if _, err := lookup[*libgodist.Work](uint64(h)); err != nil {
		return statusInvalid
	}
	if completions.claim(uint64(h)) {
		return statusOK
	}
	return statusNotReady
}

// godist_wait_any waits up to timeout_ms for completed watched works,
// writes up to max of their handles to out and their number to *n.
//
//export godist_wait_any
func godist_wait_any(timeoutMs C.int64_t, out *C.uint64_t, max C.int32_t, n *C.int32_t) (rc C.int) {
	defer recoverTo(&rc, nil, 0)
	if out == nil || n == nil || max <= 0 {
		return statusInvalid
	}
	got := completions.pop(time.Duration(timeoutMs)*time.Millisecond, int(max))
	dst := unsafeSlice(out, int(max))
	copy(dst, got)
	*n = C.int32_t(len(got))
	return statusOK
}

// completionQueue holds the handles of finished works until the Python
// completion thread collects them.
type completionQueue struct {
	mu     sync.Mutex
	q      []C.uint64_t
	signal chan struct{}
	// watched maps a watched handle to its state: one of
	// notePending, noteClaimed (a waiter took it; never pushed) or
	// notePushed.
	watched sync.Map // uint64 -> *atomic.Int32
}

const (
	notePending int32 = iota
	noteClaimed
	notePushed
)

var completions = completionQueue{signal: make(chan struct{}, 1)}

// watch pushes h when w completes unless a waiter claims it first.
func (c *completionQueue) watch(h uint64, w *libgodist.Work) {
	st := new(atomic.Int32)
	if _, dup := c.watched.LoadOrStore(h, st); dup {
		return
	}
	w.OnDone(func() {
		if st.CompareAndSwap(notePending, notePushed) {
			c.push(h)
		}
	})
}

// claim reports whether h is now sure never to be pushed.
func (c *completionQueue) claim(h uint64) bool {
	v, ok := c.watched.Load(h)
	if !ok {
		return true
	}
	st := v.(*atomic.Int32)
	return st.CompareAndSwap(notePending, noteClaimed) || st.Load() == noteClaimed
}

func (c *completionQueue) forget(h uint64) { c.watched.Delete(h) }

func (c *completionQueue) push(h uint64) {
	c.mu.Lock()
	c.q = append(c.q, C.uint64_t(h))
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

func (c *completionQueue) pop(d time.Duration, max int) []C.uint64_t {
	deadline := time.Now().Add(d)
	for {
		c.mu.Lock()
		if len(c.q) > 0 {
			k := min(max, len(c.q))
			out := append([]C.uint64_t(nil), c.q[:k]...)
			c.q = c.q[k:]
			c.mu.Unlock()
			return out
		}
		c.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-c.signal:
		case <-t.C:
		}
		t.Stop()
	}
}
