package main

/*
#include "godist.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// abiVersion is bumped on any incompatible change to the exported functions.
// python/godist/_lib.py refuses to load a library with another version.
const abiVersion = 14

//export godist_abi_version
func godist_abi_version() C.int32_t { return abiVersion }

// abiLayout is what godist_abi_layout reports: the size and field offsets
// of each struct of godist.h, in declaration order, with the lengths of
// the error's arrays, then the number of error causes and the value of
// GODIST_ASYNC.
func abiLayout() []int64 {
	var b C.godist_buf
	var c C.godist_op
	var e C.godist_error
	return []int64{
		int64(unsafe.Sizeof(b)), int64(unsafe.Offsetof(b.data)), int64(unsafe.Offsetof(b.nbytes)),
		int64(unsafe.Sizeof(c)), int64(unsafe.Offsetof(c.pg)), int64(unsafe.Offsetof(c.buf)),
		int64(unsafe.Offsetof(c.timeout_ms)), int64(unsafe.Offsetof(c.flags)), int64(unsafe.Offsetof(c.dtype)),
		int64(unsafe.Offsetof(c.reduce_op)), int64(unsafe.Offsetof(c.root)), int64(unsafe.Offsetof(c.peer)),
		int64(unsafe.Offsetof(c.wait_all)), int64(unsafe.Offsetof(c.tag)), int64(unsafe.Offsetof(c.factor)),
		int64(unsafe.Offsetof(c.out)), int64(unsafe.Offsetof(c.ins)), int64(unsafe.Offsetof(c.outs)),
		int64(unsafe.Offsetof(c.nins)), int64(unsafe.Offsetof(c.nouts)), int64(unsafe.Offsetof(c.work)),
		int64(unsafe.Offsetof(c.source)), int64(unsafe.Offsetof(c.errlen)), int64(unsafe.Offsetof(c.errbuf)),
		int64(unsafe.Offsetof(c.stream)), int64(unsafe.Offsetof(c.device)), int64(unsafe.Offsetof(c.op_code)),
		int64(unsafe.Offsetof(c.detail)),
		int64(unsafe.Sizeof(e)), int64(unsafe.Offsetof(e.status)), int64(unsafe.Offsetof(e.cause)),
		int64(unsafe.Offsetof(e.seq)), int64(unsafe.Offsetof(e.peer)), int64(unsafe.Offsetof(e.nmissing)),
		int64(unsafe.Offsetof(e.after_ms)), int64(unsafe.Offsetof(e.missing)), int64(unsafe.Offsetof(e.op)),
		int64(unsafe.Offsetof(e.group)), int64(len(e.missing)), int64(len(e.op)), int64(len(e.group)),
		numCauses, C.GODIST_ASYNC, C.GODIST_CUDA,
	}
}

// godist_abi_layout writes up to n numbers of abiLayout into out and
// returns how many there are. python/godist/_lib.py compares them with its
// ctypes declarations when it loads the library.
//
//export godist_abi_layout
func godist_abi_layout(out *C.int64_t, n C.int32_t) C.int32_t {
	l := abiLayout()
	if out != nil && n > 0 {
		copy(unsafe.Slice((*int64)(unsafe.Pointer(out)), int(n)), l)
	}
	return C.int32_t(len(l))
}

//export godist_live_handles
func godist_live_handles() C.int64_t { return C.int64_t(handles.count()) }

// godist_runtime_stats reports the number of goroutines and of live
// handles, for leak checks.
//
//export godist_runtime_stats
func godist_runtime_stats(goroutines, live *C.int64_t) {
	if goroutines != nil {
		*goroutines = C.int64_t(runtime.NumGoroutine())
	}
	if live != nil {
		*live = C.int64_t(handles.count())
	}
}
