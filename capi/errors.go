package main

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"unsafe"
)

// Status codes returned by every exported function. python/godist/_errors.py
// holds the same table.
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
// of errors (collectives.go, store.go), in registration order.
var errorCodes []errorCode

func registerCode(code int, match func(error) bool) {
	errorCodes = append(errorCodes, errorCode{match: match, code: code})
}

// writeErr copies msg, truncated and NUL-terminated, into the caller's buffer.
func writeErr(buf *C.char, n C.int32_t, msg string) {
	if buf == nil || n <= 0 {
		return
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(dst[:len(dst)-1], msg)
	dst[k] = 0
}

// finish turns err into a status code and writes its message.
func finish(err error, buf *C.char, n C.int32_t) C.int {
	if err == nil {
		return statusOK
	}
	writeErr(buf, n, err.Error())
	return codeOf(err)
}

// recoverTo converts a panic into statusInternal with the panic value and
// stack in the error buffer. Use as: defer recoverTo(&rc, err, errlen).
func recoverTo(rc *C.int, buf *C.char, n C.int32_t) {
	if r := recover(); r != nil {
		*rc = statusInternal
		writeErr(buf, n, fmt.Sprintf("godist: internal error (panic): %v\n%s", r, debug.Stack()))
	}
}
