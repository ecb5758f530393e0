package main

/*
#include <stdint.h>
*/
import "C"

// abiVersion is bumped on any incompatible change to the exported functions.
// python/godist/_lib.py refuses to load a library with another version.
const abiVersion = 1

//export godist_abi_version
func godist_abi_version() C.int32_t { return abiVersion }

//export godist_live_handles
func godist_live_handles() C.int64_t { return C.int64_t(handles.count()) }
