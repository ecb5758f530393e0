// Package gosched keeps goroutines that never park looking alive to the Go
// runtime's monitor thread (sysmon).
//
// A thread that calls in from C (Python's, through the C ABI) runs Go code
// without passing through the scheduler, and so does a goroutine whose
// waits are system calls (poll(2), futex) rather than channel waits: its
// P's scheduling tick never moves. Once the tick has not moved for 10 ms
// the monitor treats the goroutine as one running too long. If it is in a
// system call at that moment (or, for a caller, back in C) the monitor
// takes its P away, and every such take-back sets the monitor waking every
// 20 µs again; if it is running Go code the monitor preempts it, which for
// a caller's thread-locked goroutine is a hand-off to another thread and
// back. With such goroutines in every process the monitor never backs off:
// measured with 8 ranks on 2 cores, 18% of a rank's CPU in the monitor and
// 1.5 of its wake-ups per round trip of a TCP ping-pong.
//
// Passing through the scheduler (runtime.Gosched) at most every Period
// moves the tick for the cost of one hand-off, and the monitor sleeps.
// Tick does so for the callers' threads, at every op's entry; a long wait
// loop or a background loop keeps a Ticker of its own.
package gosched

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Period is the longest time between two passes through the scheduler
// while calls or waits keep coming. A caller's op that starts just before
// a Tick is due and then waits passes at most 2*Period after the previous
// pass: within the monitor's 10 ms.
const Period = 4 * time.Millisecond

var (
	epoch = time.Now()
	last  atomic.Int64 // nanoseconds since epoch of the last caller's pass
)

func now() int64 { return int64(time.Since(epoch)) }

// Tick passes the calling thread through the Go scheduler if no caller has
// in the last Period. It costs one atomic load otherwise. Meant for the
// threads that call in from C, at every op's entry and across their waits
// (tcp.Transport.HelpGroup), where a Ticker of each wait would start over
// with every call.
func Tick() {
	t := now()
	prev := last.Load()
	if t-prev < int64(Period) || !last.CompareAndSwap(prev, t) {
		return
	}
	runtime.Gosched()
}

// Ticker passes one goroutine through the scheduler every Period from its
// first Tick. The zero value is ready; one goroutine uses it.
type Ticker struct{ next time.Time }

// Tick passes through the scheduler if Period has gone by since the
// previous pass (or, the first time, since this call). now is the time
// the caller's loop has just read: no clock read of its own.
func (k *Ticker) Tick(now time.Time) {
	switch {
	case k.next.IsZero():
		k.next = now.Add(Period)
	case !now.Before(k.next):
		k.next = now.Add(Period)
		runtime.Gosched()
	}
}
