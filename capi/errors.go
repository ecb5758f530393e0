package main

/*
#include "godist.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"
	"unsafe"

	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/store"
)

// Status codes returned by every exported function. python/godist/_errors.py
// holds the same table, which _lib.py checks against statusNames (through
// godist_facts) when it loads the library.
const (
	statusOK          = 0
	statusInvalid     = 1  // bad argument or handle -> ValueError
	statusTimeout     = 2  // a deadline passed -> GodistTimeoutError
	statusPeer        = 3  // a peer failed or the group broke -> GodistError
	statusClosed      = 4  // the object was closed or aborted
	statusUnsupported = 5  // operation/dtype combination not defined
	statusInternal    = 6  // a recovered panic: a bug in godist
	statusNotReady    = 7  // a bounded wait ended before completion
	statusStore       = 8  // a store operation failed -> DistStoreError
	statusForked      = 9  // reserved for the Python side (forked child)
	statusType        = 10 // wrong type of tensor/argument -> TypeError
)

// statusNames are the status codes by the names python/godist/_errors.py
// gives them.
var statusNames = map[string]int{
	"OK": statusOK, "INVALID": statusInvalid, "TIMEOUT": statusTimeout, "PEER": statusPeer, "CLOSED": statusClosed,
	"UNSUPPORTED": statusUnsupported, "INTERNAL": statusInternal, "NOT_READY": statusNotReady, "STORE": statusStore,
	"FORKED": statusForked, "TYPE": statusType,
}

// Causes: what went wrong, finer than the status code (godist_error.cause).
// python/godist/_errors.py holds the same table (CAUSES, by index), which
// _lib.py checks against causeNames when it loads the library.
const (
	causeNone         = 0
	causeInvalid      = 1  // a bad argument
	causeTimeout      = 2  // a deadline passed
	causePeerLeft     = 3  // a peer shut its group down
	causeConnLost     = 4  // the connection to a peer broke (process died, network failed)
	causeClosed       = 5  // the object was closed or aborted
	causeBroken       = 6  // the group refuses work after an earlier failure
	causeSizeMismatch = 7  // a peer sent a message of another size
	causeNotArrived   = 8  // a monitored barrier's ranks did not arrive
	causeHandle       = 9  // an unknown or stale handle
	causeStore        = 10 // a store operation failed
	causeInternal     = 11 // a recovered panic: a bug in godist
	causeUnsupported  = 12 // an op or dtype the object does not support
	causeDesync       = 13 // ranks called different collectives (or the same with other arguments)
	numCauses         = 14
)

// causeNames are the causes by code, as GodistError.cause names them.
var causeNames = [numCauses]string{
	causeNone: "", causeInvalid: "invalid", causeTimeout: "timeout", causePeerLeft: "peer_left",
	causeConnLost: "conn_lost", causeClosed: "closed", causeBroken: "broken", causeSizeMismatch: "size_mismatch",
	causeNotArrived: "not_arrived", causeHandle: "handle", causeStore: "store", causeInternal: "internal",
	causeUnsupported: "unsupported", causeDesync: "desync",
}

// errInvalidHandle is returned for a handle that is not in the table.
var errInvalidHandle = errors.New("godist: invalid or stale handle")

// statusCoder is implemented by errors that know their status code.
type statusCoder interface{ Status() int }

// codeOf maps an error to its status code. Packages export sentinels and
// typed errors; this is the one place they are turned into codes.
func codeOf(err error) C.int {
	if err == nil {
		return statusOK
	}
	var sc statusCoder
	if errors.As(err, &sc) {
		return C.int(sc.Status())
	}
	for _, m := range errorCodes {
		if m.match(err) {
			return C.int(m.code)
		}
	}
	if errors.Is(err, errInvalidHandle) {
		return statusInvalid
	}
	return statusPeer
}

type errorCode struct {
	match func(error) bool
	code  int
}

// errorCodes is filled by init functions of the files that own each family
// of errors (pg.go, store.go), in registration order.
var errorCodes []errorCode

func registerCode(code int, match func(error) bool) {
	errorCodes = append(errorCodes, errorCode{match: match, code: code})
}

// causeOf says what went wrong, for godist_error.cause.
func causeOf(err error, status C.int) int32 {
	var t interface{ Timeout() bool }
	switch {
	case status == statusInternal:
		return causeInternal
	case errors.Is(err, errInvalidHandle):
		return causeHandle
	case errors.Is(err, libgodist.ErrBroken):
		return causeBroken
	case errors.Is(err, libgodist.ErrDesync):
		return causeDesync
	case errors.As(err, &t) && t.Timeout():
		return causeTimeout
	case errors.Is(err, transport.ErrPeerGone):
		return causePeerLeft
	case errors.Is(err, transport.ErrConnLost):
		return causeConnLost
	case errors.Is(err, transport.ErrSizeMismatch):
		return causeSizeMismatch
	case errors.Is(err, libgodist.ErrNotArrived):
		return causeNotArrived
	case errors.Is(err, libgodist.ErrClosed), errors.Is(err, transport.ErrClosed), errors.Is(err, store.ErrClosed):
		return causeClosed
	case status == statusStore:
		return causeStore
	case status == statusUnsupported:
		return causeUnsupported
	case status == statusInvalid, status == statusType:
		return causeInvalid
	}
	return causeNone
}

// errorSize is sizeof(godist_error): the message starts there.
const errorSize = int(unsafe.Sizeof(C.godist_error{}))

// writeErr fills the caller's error buffer (godist_error, then the
// message) for a call that returns status. err may be nil with a message
// of its own (a recovered panic).
func writeErr(buf *C.char, n C.int32_t, status C.int, err error, msg string) {
	if buf == nil || int(n) <= errorSize {
		return
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	e := (*C.godist_error)(unsafe.Pointer(buf))
	*e = C.godist_error{status: C.int32_t(status), cause: C.int32_t(causeOf(err, status)), seq: -1, peer: -1}
	var oe *libgodist.OpError
	var pe *transport.PeerError
	switch {
	case errors.As(err, &oe):
		e.seq = C.int64_t(oe.Seq)
		e.peer = C.int32_t(oe.Peer)
		e.after_ms = C.int64_t(oe.After / time.Millisecond)
		e.nmissing = C.int32_t(len(oe.Missing))
		for i, r := range oe.Missing[:min(len(oe.Missing), len(e.missing))] {
			e.missing[i] = C.int32_t(r)
		}
		putCString(unsafe.Slice((*byte)(unsafe.Pointer(&e.op[0])), len(e.op)), oe.Op)
		putCString(unsafe.Slice((*byte)(unsafe.Pointer(&e.group[0])), len(e.group)), oe.Group)
	case errors.As(err, &pe):
		e.peer = C.int32_t(pe.Peer)
	}
	// Connection setup errors of the fabric name the peer at fault or the
	// ranks that never connected.
	var pr interface{ PeerRank() int }
	if errors.As(err, &pr) && e.peer < 0 {
		e.peer = C.int32_t(pr.PeerRank())
	}
	var mr interface{ MissingRanks() []int }
	if errors.As(err, &mr) && e.nmissing == 0 {
		m := mr.MissingRanks()
		e.nmissing = C.int32_t(len(m))
		for i, r := range m[:min(len(m), len(e.missing))] {
			e.missing[i] = C.int32_t(r)
		}
	}
	putCString(dst[errorSize:], msg)
}

// putCString copies s into dst, truncated and NUL-terminated.
func putCString(dst []byte, s string) {
	if len(dst) == 0 {
		return
	}
	k := copy(dst[:len(dst)-1], s)
	dst[k] = 0
}

// finish turns err into a status code and fills the error buffer.
func finish(err error, buf *C.char, n C.int32_t) C.int {
	if err == nil {
		return statusOK
	}
	rc := codeOf(err)
	writeErr(buf, n, rc, err, err.Error())
	return rc
}

// recoverTo converts a panic into statusInternal with the panic value and
// stack in the error buffer. Use as: defer recoverTo(&rc, err, errlen).
func recoverTo(rc *C.int, buf *C.char, n C.int32_t) {
	if r := recover(); r != nil {
		*rc = statusInternal
		writeErr(buf, n, statusInternal, nil, fmt.Sprintf("godist: internal error (panic): %v\n%s", r, debug.Stack()))
	}
}
