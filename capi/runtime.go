package main

/*
#include <stdint.h>
*/
import "C"

import (
	"os"
	"runtime"
)

// spareProcs is how many Ps the library keeps beyond the CPUs (see init).
const spareProcs = 4

// init gives the Go runtime spare Ps when the host process did not choose
// GOMAXPROCS itself. godist's background goroutines (each group's
// shared-memory receiver and control loop) sleep in futex system calls for
// milliseconds, and a goroutine in a system call keeps its P; a caller's
// thread that returned to Python keeps its P too. With only NumCPU Ps none is
// ever idle, so the runtime's monitor thread takes Ps back from those
// sleepers again and again and keeps waking itself every 20 µs (measured:
// ~9,000 wake-ups a second per process, which on a machine with few cores
// take the CPU from the ranks and the training around them). With spare
// Ps it leaves them be and sleeps. The spare Ps cost nothing while idle.
func init() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(runtime.NumCPU() + spareProcs)
	}
}

// godist_gomaxprocs reports the Go runtime's GOMAXPROCS.
//
//export godist_gomaxprocs
func godist_gomaxprocs() C.int32_t { return C.int32_t(runtime.GOMAXPROCS(0)) }
