package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	s store.Store
}

func newEntry(s store.Store) *storeEntry { return &storeEntry{s: s} }

// fail turns an error of the entry's store into a *storeError.
func (e *storeEntry) fail(err error) error { return storeFail(err, store.OnTCP(e.s)) }

// storeFail turns a store error into a *storeError with torch's wording
// (store.TorchMessage); tcp says the keys went on the wire of a TCPStore.
func storeFail(err error, tcp bool) error {
	if err == nil {
		return nil
	}
	return &storeError{msg: store.TorchMessage(err, tcp), cause: err}
}

// invalidArg is a bad argument from C.
func invalidArg(format string, args ...any) error {
	return &storeError{msg: "godist: " + fmt.Sprintf(format, args...), cause: store.ErrInvalid}
}

// timeout is a call's timeout_ms as store.CallContext reads it (< 0:
// the store's own).
func timeout(ms C.int64_t) time.Duration { return time.Duration(ms) * time.Millisecond }

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
