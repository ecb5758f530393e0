package nccl

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/godist/godist/libgodist/backend"
)

// ErrAborted is wrapped by the errors of calls on an aborted or closed
// communicator.
var ErrAborted = errors.New("NCCL communicator aborted")

// noDeadline bounds a call whose context has none.
const noDeadline = 30 * time.Minute

// Comm is one non-blocking NCCL communicator on one device, with its own
// stream for asynchronous ops and a pool of CUDA events.
type Comm struct {
	dev int

	mu      sync.Mutex // held for every NCCL call on c: one thread in NCCL per communicator
	c       unsafe.Pointer
	own     unsafe.Pointer // the communicator's stream
	pre     unsafe.Pointer // orders own after a caller's stream (re-recorded by every async launch)
	scratch *C.gn_call     // C memory for a launch's calls
	nfit    int            // calls scratch holds
	stop    *C.int         // C memory: set by Abort, ends a launch's wait for NCCL calls in progress
	aborted bool
	closed  bool

	evMu sync.Mutex // guards evs and free
	evs  []unsafe.Pointer
	free []backend.Event
}

var _ backend.DeviceComm = (*Comm)(nil)

func timeoutMs(ctx context.Context) C.int64_t {
	d := noDeadline
	if t, ok := ctx.Deadline(); ok {
		d = time.Until(t)
	}
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return C.int64_t(d / time.Millisecond)
}

// NewComm joins the communicator of s (non-blocking, so it can be
// aborted), within ctx.
func NewComm(ctx context.Context, s backend.DeviceSetup) (*Comm, error) {
	if _, err := Load(); err != nil {
		return nil, err
	}
	if len(s.ID) != 128 {
		return nil, fmt.Errorf("%w: an NCCL unique id has 128 bytes, got %d", backend.ErrUnsupported, len(s.ID))
	}
	c := &Comm{dev: s.Device, stop: (*C.int)(C.calloc(1, C.size_t(unsafe.Sizeof(C.int(0)))))}
	var st C.gn_status
	if C.gn_comm_init(&c.c, &c.own, C.int(s.Device), C.int(s.Size), unsafe.Pointer(&s.ID[0]), C.int(s.Rank),
		timeoutMs(ctx), &st) != 0 {
		C.free(unsafe.Pointer(c.stop))
		return nil, statusError(&st, nil)
	}
	if C.gn_event_create(C.int(c.dev), &c.pre, &st) != 0 {
		err := statusError(&st, nil)
		c.Abort()
		_ = c.Close(ctx) // the stream
		return nil, err
	}
	return c, nil
}

// Device is the communicator's device ordinal.
func (c *Comm) Device() int { return c.dev }

func (c *Comm) event() (backend.Event, unsafe.Pointer, error) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	if n := len(c.free); n > 0 {
		ev := c.free[n-1]
		c.free = c.free[:n-1]
		return ev, c.evs[ev-1], nil
	}
	var p unsafe.Pointer
	var st C.gn_status
	if C.gn_event_create(C.int(c.dev), &p, &st) != 0 {
		return 0, nil, statusError(&st, nil)
	}
	c.evs = append(c.evs, p)
	return backend.Event(len(c.evs)), p, nil
}

func (c *Comm) ptr(ev backend.Event) (unsafe.Pointer, error) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	if ev < 1 || int(ev) > len(c.evs) {
		return nil, fmt.Errorf("nccl: unknown event %d", ev)
	}
	return c.evs[ev-1], nil
}

// Launch implements backend.DeviceComm.
func (c *Comm) Launch(ctx context.Context, stream uintptr, async bool, calls []backend.DeviceCall) (backend.Event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted || c.closed {
		return 0, ErrAborted
	}
	if len(calls) > c.nfit {
		C.free(unsafe.Pointer(c.scratch))
		n := max(len(calls), 4)
		c.scratch = (*C.gn_call)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.gn_call{}))))
		c.nfit = n
	}
	cs := unsafe.Slice(c.scratch, c.nfit)[:len(calls)]
	for i := range calls {
		if err := toC(&calls[i], &cs[i]); err != nil {
			return 0, err
		}
	}
	ev, end, err := c.event()
	if err != nil {
		return 0, err
	}
	var own unsafe.Pointer
	if async {
		own = c.own
	}
	var st C.gn_status
	if C.gn_launch(c.c, C.int(c.dev), C.uintptr_t(stream), own, c.pre, end, c.scratch, C.int(len(calls)),
		timeoutMs(ctx), c.stop, &st) != 0 {
		c.Release(ev)
		return 0, statusError(&st, c.c)
	}
	return ev, nil
}

// Done implements backend.DeviceComm.
func (c *Comm) Done(ev backend.Event) (bool, error) {
	p, err := c.ptr(ev)
	if err != nil {
		return false, err
	}
	var st C.gn_status
	switch C.gn_event_query(C.int(c.dev), p, &st) {
	case 1:
		return true, nil
	case 0:
		return false, nil
	}
	return false, statusError(&st, nil)
}

// Order implements backend.DeviceComm.
func (c *Comm) Order(stream uintptr, ev backend.Event) error {
	p, err := c.ptr(ev)
	if err != nil {
		return err
	}
	var st C.gn_status
	if C.gn_stream_wait(C.int(c.dev), C.uintptr_t(stream), p, &st) != 0 {
		return statusError(&st, nil)
	}
	return nil
}

// Release implements backend.DeviceComm.
func (c *Comm) Release(ev backend.Event) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	if ev >= 1 && int(ev) <= len(c.evs) {
		c.free = append(c.free, ev)
	}
}

// Err implements backend.DeviceComm. While a launch holds the
// communicator it reports nothing: the launch itself returns NCCL's error.
func (c *Comm) Err() error {
	if !c.mu.TryLock() {
		return nil
	}
	defer c.mu.Unlock()
	if c.aborted || c.closed {
		return nil
	}
	var st C.gn_status
	if C.gn_async_error(c.c, C.int(c.dev), &st) != 0 {
		return statusError(&st, c.c)
	}
	return nil
}

// Abort implements backend.DeviceComm: ncclCommAbort, never a destroy of
// a communicator that may hang. A launch waiting for NCCL calls in
// progress is told to stop first (no other thread may be in NCCL during
// the abort), so an abort never waits for a launch's deadline.
func (c *Comm) Abort() {
	atomic.StoreInt32((*int32)(unsafe.Pointer(c.stop)), 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted || c.closed {
		return
	}
	c.aborted = true
	var st C.gn_status
	C.gn_abort(c.c, C.int(c.dev), &st)
}

// Close implements backend.DeviceComm.
func (c *Comm) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	var st C.gn_status
	if !c.aborted && C.gn_destroy(c.c, C.int(c.dev), timeoutMs(ctx), &st) != 0 {
		err = statusError(&st, nil)
	}
	c.evMu.Lock()
	for _, p := range c.evs {
		C.gn_event_destroy(C.int(c.dev), p, &st)
	}
	c.evs, c.free = nil, nil
	c.evMu.Unlock()
	if c.pre != nil {
		C.gn_event_destroy(C.int(c.dev), c.pre, &st)
	}
	C.gn_stream_destroy(C.int(c.dev), c.own, &st)
	C.free(unsafe.Pointer(c.scratch))
	c.scratch, c.nfit = nil, 0
	// c.stop stays: an Abort may still read it. One int per communicator.
	return err
}
