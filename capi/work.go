package main

/*
#include "godist.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/godist/godist/libgodist"
)

// godist_work_wait waits up to timeout_ms (0 polls) for the work whose
// handle is in work. It returns statusNotReady, leaving the handle as it
// was, if the work has not completed. Else it collects the work: it frees
// the handle, stores the sender's rank of a receive in source (-1 for
// other ops) and returns the work's outcome. Exactly one caller collects a
// work: any other, and any later call, gets statusInvalid with cause
// "handle" (handles are never reused).
//
//export godist_work_wait
func godist_work_wait(c *C.godist_op) (rc C.int) {
	if c == nil {
		return statusInvalid
	}
	errbuf, errlen := c.errbuf, c.errlen
	defer recoverTo(&rc, errbuf, errlen)
	c.source = -1
	h := uint64(c.work)
	w, err := lookup[*libgodist.Work](h)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	if err := w.Wait(time.Duration(c.timeout_ms) * time.Millisecond); errors.Is(err, libgodist.ErrNotReady) {
		return statusNotReady
	}
	if !freeWork(h) {
		return finish(fmt.Errorf("%w %d: collected by another caller", errInvalidHandle, h), errbuf, errlen)
	}
	c.source = C.int32_t(w.Source())
	return finish(w.Err(), errbuf, errlen)
}

// freeWork releases work handle h (its completion-queue entry too) and
// reports whether this call did: of callers racing to free h, one wins.
func freeWork(h uint64) bool {
	if !handles.drop(h) {
		return false
	}
	completions.forget(h)
	return true
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

// completionQueue holds the handles of finished watched works until the
// Python completion thread collects them. Whoever collects a work first
// (godist_work_wait) owns its outcome: a handle pushed after a waiter
// collected it is found gone and skipped, so the queue needs no state of
// its own beyond which handles are watched.
type completionQueue struct {
	mu      sync.Mutex
	q       []C.uint64_t
	signal  chan struct{}
	watched sync.Map // uint64 -> struct{}: watched and not yet collected
}

var completions = completionQueue{signal: make(chan struct{}, 1)}

// watch pushes h when w completes, unless it has been collected by then.
func (c *completionQueue) watch(h uint64, w *libgodist.Work) {
	if _, dup := c.watched.LoadOrStore(h, struct{}{}); dup {
		return
	}
	w.OnDone(func() {
		if _, ok := c.watched.Load(h); ok {
			c.push(h)
		}
	})
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
