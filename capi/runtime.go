package main

/*
#include <stdint.h>
*/
import "C"

import (
	"os"
	"runtime"
	"sync/atomic"
	"time"
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

// lastYield is when a caller's thread last let the Go scheduler run
// (nanotime-like, from time.Now().UnixNano()).
var lastYield atomic.Int64

// yieldPeriod: see schedTick.
const yieldPeriod = 5 * time.Millisecond

// schedTick keeps a caller's P looking alive to the runtime's monitor
// thread. A thread calling in from C runs Go code without passing through
// the scheduler, so its P's scheduling tick never moves; once it has not
// moved for 10 ms the monitor treats the thread as a goroutine running too
// long and, since such a thread spends most of its time outside Go (in
// Python, or asleep in poll(2)), takes its P away. Each such take-back
// also resets the monitor to waking every 20 µs; with a few calls a
// millisecond it never backs off (measured: 18% of a rank's CPU in the
// monitor with 8 ranks on 2 cores). Passing through the scheduler every
// few milliseconds (runtime.Gosched) moves the tick at the cost of one
// hand-off.
func schedTick() {
	now := time.Now().UnixNano()
	last := lastYield.Load()
	if now-last < int64(yieldPeriod) || !lastYield.CompareAndSwap(last, now) {
		return
	}
	runtime.Gosched()
}
