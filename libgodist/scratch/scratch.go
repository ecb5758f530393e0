// Package scratch recycles the temporary byte buffers of collectives and
// of messages that arrive before their receive is posted. A large
// collective would otherwise allocate megabytes per call: the garbage
// collector then runs every few ops, and fresh memory costs page faults
// and zeroing on every reuse.
//
// The free lists are plain stacks shared by every goroutine, not a
// sync.Pool: a sync.Pool keeps the last buffer put on a P in that P's
// private slot, which no other P can take, so a caller that lands on
// another P the next time (as a thread calling in from C does) misses it
// and allocates anew. In a 64 MiB TCP all_reduce at 4 ranks that was 3 MB
// of freshly faulted memory per op and 6% of the CPU in page clearing.
//
// What the lists keep is bounded: classBytes bytes per size class (at
// least minPerClass and at most maxPerClass buffers), maxKept bytes in
// all, and a buffer not taken again within idleDrop of being given back is
// dropped at the next Get or Put (for the garbage collector).
//
// Buffers come back with arbitrary contents: a caller overwrites what it
// reads. A buffer must not be used after Put.
package scratch

import (
	"math/bits"
	"sync"
	"time"
)

const (
	minShift = 12 // below 4 KiB: allocate, it is cheap
	maxShift = 30 // above 1 GiB: allocate, do not keep

	classBytes  = 256 << 20       // bytes kept per size class
	minPerClass = 4               // buffers kept per class, at least
	maxPerClass = 256             // and at most
	maxKept     = 1 << 30         // bytes kept in all
	idleDrop    = 2 * time.Minute // a buffer idle this long is dropped
)

type entry struct {
	b    []byte    // full capacity, a power of two
	idle time.Time // when it was given back
}

// now is the clock (tests move it).
var now = time.Now

var (
	mu      sync.Mutex
	classes [maxShift + 1][]entry // stacks: the most recently given back last
	kept    int                   // bytes in classes
	trimmed time.Time             // last trim
)

// class is the size class of a buffer of capacity c, or -1.
func class(c int) int {
	if c < 1<<minShift || c > 1<<maxShift {
		return -1
	}
	return bits.Len(uint(c - 1))
}

// perClass is how many buffers class k keeps.
func perClass(k int) int {
	return min(max(classBytes>>k, minPerClass), maxPerClass)
}

// Get returns a buffer of length n (capacity rounded up to a power of two).
func Get(n int) []byte {
	k := class(n)
	if k < 0 {
		return make([]byte, n)
	}
	mu.Lock()
	trimLocked(now())
	if s := classes[k]; len(s) > 0 {
		b := s[len(s)-1].b
		s[len(s)-1] = entry{}
		classes[k] = s[:len(s)-1]
		kept -= len(b)
		mu.Unlock()
		return b[:n]
	}
	mu.Unlock()
	return make([]byte, n, 1<<k)
}

// Put gives b back for reuse. Buffers not made by Get are accepted when
// their capacity is a power of two in range, and dropped otherwise.
func Put(b []byte) {
	c := cap(b)
	k := class(c)
	if k < 0 || c != 1<<k {
		return
	}
	t := now()
	mu.Lock()
	defer mu.Unlock()
	trimLocked(t)
	if len(classes[k]) >= perClass(k) || kept+c > maxKept {
		return
	}
	classes[k] = append(classes[k], entry{b: b[:c], idle: t})
	kept += c
}

// trimLocked drops buffers idle for idleDrop, checking at most once a
// second. Called with mu held.
func trimLocked(t time.Time) {
	if t.Sub(trimmed) < time.Second {
		return
	}
	trimmed = t
	for k, s := range classes {
		i := 0
		for i < len(s) && t.Sub(s[i].idle) >= idleDrop { // oldest first
			kept -= len(s[i].b)
			i++
		}
		if i > 0 {
			classes[k] = append(s[:0], s[i:]...)
			clear(s[len(s)-i:])
		}
	}
}

// keptBytes reports the bytes the free lists hold now.
func keptBytes() int {
	mu.Lock()
	defer mu.Unlock()
	return kept
}
