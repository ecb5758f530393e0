package shm

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Copies into shared memory (publish) pick between ordinary and
// non-temporal stores by how fast ordinary stores are right now.
//
// An ordinary store to a line that a peer read last round must first take
// the line back from the peer's cache. Where the CPUs share a last-level
// cache that is cheap, and the data the store leaves in cache is what the
// peers read next. Where they share none (virtual CPUs the host has placed
// on different dies, which can change from one minute to the next) each
// take-back is a cross-die round trip, and ordinary copies into the arena
// ran at 2-4 GB/s instead of 10-20; non-temporal stores go to memory
// without reading the line first. Measured on a 2-CPU VM, 64 MiB
// all-reduce, ordinary against non-temporal stores:
//
//	ranks  CPUs share a cache  CPUs on different dies
//	2      10 ms / 12 ms       35 ms / 12 ms
//	4      18-21 / 25-34       60-64 / 25-30
//	8      41-45 / 59-70       120 / 59-70
//
// So publish times its ordinary copies of probeMin bytes or more and
// switches to non-temporal stores once slowRun of them in a row ran below
// slowRate (a copy can be slow for other reasons, such as preemption, but
// not slowRun in a row). In non-temporal mode every probeEvery-th such
// copy is an ordinary, timed one, and a fast one switches back.
const (
	publishMin = 16 << 10 // smallest copy made non-temporal
	probeMin   = 64 << 10 // smallest copy timed
	slowRate   = 6        // bytes per nanosecond (6 GB/s)
	slowRun    = 8
	probeEvery = 32
)

// storeChooser is the choice between ordinary and non-temporal stores.
type storeChooser struct {
	nt    atomic.Bool
	slow  atomic.Int32  // timed ordinary copies in a row below slowRate
	count atomic.Uint32 // eligible non-temporal copies, for probing
}

// pick says how to copy n bytes: non-temporally, or ordinarily and, if
// timed, reporting the time to observe.
func (sc *storeChooser) pick(n int) (nt, timed bool) {
	switch {
	case !haveCopyNT || n < publishMin:
		return false, false
	case !sc.nt.Load():
		return false, n >= probeMin
	case n < probeMin || sc.count.Add(1)%probeEvery != 0:
		return true, false
	default:
		return false, true
	}
}

// observe records one timed ordinary copy of n bytes that took dt.
func (sc *storeChooser) observe(n int, dt time.Duration) {
	if dt <= time.Duration(n/slowRate) {
		sc.slow.Store(0)
		sc.nt.Store(false)
		return
	}
	if sc.slow.Add(1) >= slowRun {
		sc.nt.Store(true)
	}
}

// forceNonTemporal, set only by tests, makes every publish of 64 bytes or
// more non-temporal, so that the collectives' small test chunks take that
// path.
var forceNonTemporal bool

// stores is the process-wide choice: the placement of CPUs it tracks is
// the host's, the same for every arena.
var stores storeChooser

// publish copies src into dst, a region of the arena that other ranks
// will read, and returns the number of bytes copied (as copy does).
func publish(dst, src []byte) int {
	n := min(len(dst), len(src))
	nt, timed := stores.pick(n)
	if forceNonTemporal {
		nt, timed = n >= 64, false
	}
	switch {
	case nt:
		copyNonTemporal(dst, src, n)
	case timed:
		t0 := time.Now()
		copy(dst[:n], src)
		stores.observe(n, time.Since(t0))
	default:
		copy(dst[:n], src)
	}
	return n
}

// copyNonTemporal copies the first n bytes of src into dst, with
// non-temporal stores for the 64-byte-aligned body of dst.
func copyNonTemporal(dst, src []byte, n int) {
	if n < 64 {
		copy(dst[:n], src)
		return
	}
	d := unsafe.Pointer(unsafe.SliceData(dst))
	head := int(-uintptr(d) & 63)
	copy(dst[:head], src[:head])
	body := (n - head) &^ 63
	copyNT(unsafe.Add(d, head), unsafe.Pointer(&src[head]), uintptr(body))
	copy(dst[head+body:n], src[head+body:n])
}
