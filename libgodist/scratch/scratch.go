// Package scratch recycles the temporary byte buffers of collectives and
// of messages that arrive before their receive is posted. A large
// collective would otherwise allocate megabytes per call: the garbage
// collector then runs every few ops, and fresh memory costs page faults
// and zeroing on every reuse.
//
// Buffers come back with arbitrary contents: a caller overwrites what it
// reads. A buffer must not be used after Put.
package scratch

import (
	"math/bits"
	"sync"
)

const (
	minShift = 12 // below 4 KiB: allocate, it is cheap
	maxShift = 30 // above 1 GiB: allocate, do not keep
)

var pools [maxShift + 1]sync.Pool

// class is the pool index of a buffer of capacity c, or -1.
func class(c int) int {
	if c < 1<<minShift || c > 1<<maxShift {
		return -1
	}
	return bits.Len(uint(c - 1))
}

// Get returns a buffer of length n (capacity rounded up to a power of two).
func Get(n int) []byte {
	k := class(n)
	if k < 0 {
		return make([]byte, n)
	}
	if p, ok := pools[k].Get().(*[]byte); ok {
		return (*p)[:n]
	}
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
	b = b[:c]
	pools[k].Put(&b)
}
