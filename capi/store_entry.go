package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/godist/godist/store"
)

// The store handles' entries, the errors that cross the ABI and the
// argument helpers of store.go.

func init() {
	// storeError deliberately has no Unwrap: the generic timeout rule in
	// pg.go (registered first) must not claim store timeouts, which are
	// statusStore (DistStoreError), not statusTimeout.
	registerCode(statusClosed, storeCause(func(err error) bool { return errors.Is(err, store.ErrClosed) }))
	registerCode(statusInvalid, storeCause(func(err error) bool { return errors.Is(err, store.ErrInvalid) }))
	registerCode(statusUnsupported, storeCause(func(err error) bool { return errors.Is(err, store.ErrNotSupported) }))
	// Timeouts, ErrNotFound, ErrProtocol, ErrConnLost, OS errors: statusStore.
	registerCode(statusStore, storeCause(func(error) bool { return true }))
}

// storeError is a store failure as it crosses the ABI: msg is what Python
// shows (torch's wording for timeouts), cause the store's error, which the
// codes registered in init classify.
type storeError struct {
	msg   string
	cause error
}

func (e *storeError) Error() string { return e.msg }

// storeCause adapts a test on a store error's cause to registerCode.
func storeCause(match func(error) bool) func(error) bool {
	return func(err error) bool {
		var se *storeError
		return errors.As(err, &se) && match(se.cause)
	}
}

// storeEntry is what a store handle refers to.
type storeEntry struct {
	s    store.Store
	base store.Store // first store below s that is not a PrefixStore (s itself if none)
}

func newEntry(s store.Store) *storeEntry {
	e := &storeEntry{s: s, base: s}
	if p, ok := s.(*store.PrefixStore); ok {
		e.base = p.UnderlyingNonPrefix()
	}
	return e
}

// isTCP reports whether the entry talks to a TCPStore server.
func (e *storeEntry) isTCP() bool {
	_, ok := e.base.(*store.TCPStore)
	return ok
}

// fail turns an error of the entry's store into a *storeError.
func (e *storeEntry) fail(err error) error { return storeFail(err, e.isTCP()) }

// storeFail turns a store error into a *storeError with torch's wording;
// tcp says the keys went on the wire of a TCPStore (with a "/" prefix).
func storeFail(err error, tcp bool) error {
	if err == nil {
		return nil
	}
	wirePrefix := ""
	if tcp {
		wirePrefix = "/"
	}
	return &storeError{msg: storeMessage(err, wirePrefix), cause: err}
}

// storeMessage renders err like torch does.
func storeMessage(err error, wirePrefix string) string {
	var te *store.TimeoutError
	if !errors.As(err, &te) {
		return err.Error()
	}
	ms := te.After.Round(time.Millisecond).Milliseconds()
	switch te.Op {
	case "wait_for_workers":
		return fmt.Sprintf("Timed out after %d seconds waiting for clients. %s. (wait_for_workers timeout)",
			int64(te.After.Round(time.Second)/time.Second), te.Detail)
	case "connect":
		return fmt.Sprintf("The client socket has timed out after %dms while trying to connect. (connect timeout: %s)", ms, te.Detail)
	}
	op := te.Op
	switch op {
	case "get", "wait", "multi_get", "queue_pop": // torch: a WAIT that timed out
		op = "wait"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s timeout after %dms", op, ms)
	if len(te.Keys) > 0 {
		b.WriteString(", keys: ")
		for i, k := range te.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(wirePrefix)
			b.WriteString(k)
		}
	}
	if te.Detail != "" {
		b.WriteString(" (")
		b.WriteString(te.Detail)
		b.WriteString(")")
	}
	return b.String()
}

// invalidArg is a bad argument from C.
func invalidArg(format string, args ...any) error {
	return &storeError{msg: "godist: " + fmt.Sprintf(format, args...), cause: store.ErrInvalid}
}

// farFuture stands for "no limit" in a per-call deadline.
const farFuture = 100 * 365 * 24 * time.Hour

// opCtx returns the context of one call with the timeout convention above.
func (e *storeEntry) opCtx(timeoutMs C.int64_t) (context.Context, context.CancelFunc) {
	switch {
	case timeoutMs < 0:
		return context.Background(), func() {}
	case timeoutMs == 0 && !e.isTCP():
		return context.WithTimeout(context.Background(), farFuture)
	default:
		return context.WithTimeout(context.Background(), time.Duration(timeoutMs)*time.Millisecond)
	}
}

// waitCtx is opCtx for a call that waits for keys (get, wait, multi_get,
// blocking queue_pop). An explicit 0 on a TCPStore fails at once unless the
// keys exist (a context that has already expired would fail even then).
func (e *storeEntry) waitCtx(timeoutMs C.int64_t, op string, keys []string) (context.Context, context.CancelFunc, error) {
	if timeoutMs == 0 && e.isTCP() {
		ok, err := e.s.Check(context.Background(), keys)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, &store.TimeoutError{Op: op, Keys: keys}
		}
		timeoutMs = -1
	}
	ctx, cancel := e.opCtx(timeoutMs)
	return ctx, cancel, nil
}

// requested makes a timeout error of a call with an explicit timeout report
// that timeout (the store measures what was left when it started waiting).
func requested(err error, timeoutMs C.int64_t) error {
	var te *store.TimeoutError
	if timeoutMs >= 0 && errors.As(err, &te) {
		te.After = time.Duration(timeoutMs) * time.Millisecond
	}
	return err
}

func storeOf(h C.uint64_t) (*storeEntry, error) {
	return lookup[*storeEntry](uint64(h))
}

// bytesAt views n bytes at p (C memory owned by the caller).
func bytesAt(p unsafe.Pointer, n C.int64_t, what string) ([]byte, error) {
	switch {
	case n < 0 || n > maxBytes:
		return nil, invalidArg("%s: invalid length %d", what, n)
	case n == 0:
		return []byte{}, nil
	case p == nil:
		return nil, invalidArg("%s: NULL pointer with length %d", what, n)
	}
	return unsafe.Slice((*byte)(p), int(n)), nil
}

func keyAt(p unsafe.Pointer, n C.int64_t) (string, error) {
	b, err := bytesAt(p, n, "key")
	return string(b), err
}

// putBytes hands b to C in malloc'd memory (see the comment at the top).
func putBytes(b []byte, out *unsafe.Pointer, outlen *C.int64_t) error {
	if out == nil || outlen == nil {
		return invalidArg("NULL out or outlen")
	}
	*out, *outlen = nil, 0
	if len(b) > 0 {
		*out = C.CBytes(b)
		*outlen = C.int64_t(len(b))
	}
	return nil
}

// putList packs items as (int64 length, bytes) records in malloc'd memory.
func putList(items [][]byte, out *unsafe.Pointer, outlen *C.int64_t) error {
	if out == nil || outlen == nil {
		return invalidArg("NULL out or outlen")
	}
	*out, *outlen = nil, 0
	total := 0
	for _, it := range items {
		total += 8 + len(it)
	}
	if total == 0 {
		return nil
	}
	p := C.malloc(C.size_t(total))
	dst := unsafe.Slice((*byte)(p), total)
	off := 0
	for _, it := range items {
		binary.LittleEndian.PutUint64(dst[off:], uint64(len(it)))
		off += 8
		off += copy(dst[off:], it)
	}
	*out, *outlen = p, C.int64_t(total)
	return nil
}

// withStore runs f on the store behind h and reports its error.
func withStore(h C.uint64_t, errbuf *C.char, errlen C.int32_t, f func(e *storeEntry) error) C.int {
	e, err := storeOf(h)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	return finish(e.fail(f(e)), errbuf, errlen)
}

func putHandle(s store.Store, out *C.uint64_t) {
	*out = C.uint64_t(handles.put(newEntry(s)))
}
