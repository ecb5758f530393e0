package main

/*
#include <stdint.h>
*/
import "C"

import "runtime"

// abiVersion is bumped on any incompatible change to the exported functions.
// python/godist/_lib.py refuses to load a library with another version.
const abiVersion = 5

//export godist_abi_version
func godist_abi_version() C.int32_t { return abiVersion }

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
