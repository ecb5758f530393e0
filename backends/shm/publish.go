package shm

import (
	"sync"
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
// So publish times its ordinary copies of probeMin bytes or more. After
// slowRun of them in a row ran below slowRate (a copy can be slow for other
// reasons, such as preemption, but not slowRun in a row), it times the next
// trialLen copies made non-temporal, and keeps non-temporal stores only if
// the fastest of those ran at least ntGain times as fast as the fastest of
// the slow ordinary ones: where ordinary copies are slow for a reason that
// non-temporal stores do not remove (memory bandwidth shared by many
// ranks), it goes back to ordinary stores and stops timing for backoff
// copies. On different dies the trial copies ran at 16-21 GB/s, against
// 2.7-5.5 GB/s for the slow ordinary ones. In non-temporal mode every
// probeEvery-th copy of probeMin bytes or more is an ordinary, timed one,
// and a fast one switches back.
const (
	publishMin = 16 << 10 // smallest copy made non-temporal
	probeMin   = 64 << 10 // smallest copy timed
	slowRate   = 6.0      // bytes per nanosecond (6 GB/s)
	slowRun    = 8
	trialLen   = 4
	ntGain     = 2.0
	backoff    = 4096
	probeEvery = 32
)

type storeMode int

const (
	modeOrdinary storeMode = iota
	modeTrial              // timing non-temporal copies
	modeNonTemporal
)

// copyKind is how publish makes one copy.
type copyKind int

const (
	kindPlain   copyKind = iota
	kindTimed            // ordinary stores, timed
	kindNT               // non-temporal stores
	kindTimedNT          // non-temporal stores, timed
)

// storeChooser is the choice between ordinary and non-temporal stores. Its
// lock is taken only for copies of publishMin bytes or more.
type storeChooser struct {
	mu       sync.Mutex
	mode     storeMode
	slow     int     // timed ordinary copies in a row below slowRate
	bestSlow float64 // the fastest of them, bytes per nanosecond
	trial    int     // timed non-temporal copies still to make
	bestNT   float64 // the fastest of those made, bytes per nanosecond
	skip     int     // copies still to make untimed after a failed trial
	count    int     // non-temporal copies of probeMin bytes or more, for probing
}

// pick says how to copy n bytes.
func (sc *storeChooser) pick(n int) copyKind {
	if !haveCopyNT || n < publishMin {
		return kindPlain
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch sc.mode {
	case modeNonTemporal:
		if n < probeMin {
			return kindNT
		}
		if sc.count++; sc.count%probeEvery == 0 {
			return kindTimed
		}
		return kindNT
	case modeTrial:
		if n < probeMin {
			return kindPlain
		}
		return kindTimedNT
	default:
		if n < probeMin {
			return kindPlain
		}
		if sc.skip > 0 {
			sc.skip--
			return kindPlain
		}
		return kindTimed
	}
}

// observe records one timed copy of n bytes, made as pick said, that
// took dt. Copies picked before the mode changed are ignored.
func (sc *storeChooser) observe(kind copyKind, n int, dt time.Duration) {
	rate := float64(n) / float64(max(dt, 1))
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch {
	case kind == kindTimed && sc.mode == modeOrdinary:
		if rate >= slowRate {
			sc.slow, sc.bestSlow = 0, 0
			return
		}
		sc.slow++
		sc.bestSlow = max(sc.bestSlow, rate)
		if sc.slow >= slowRun {
			sc.mode, sc.trial, sc.bestNT = modeTrial, trialLen, 0
		}
	case kind == kindTimed && sc.mode == modeNonTemporal:
		if rate >= slowRate {
			sc.mode, sc.slow, sc.bestSlow = modeOrdinary, 0, 0
		}
	case kind == kindTimedNT && sc.mode == modeTrial:
		sc.bestNT = max(sc.bestNT, rate)
		if sc.trial--; sc.trial > 0 {
			return
		}
		if sc.bestNT >= ntGain*sc.bestSlow {
			sc.mode = modeNonTemporal
		} else {
			sc.mode, sc.skip = modeOrdinary, backoff
		}
		sc.slow, sc.bestSlow = 0, 0
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
	kind := stores.pick(n)
	if forceNonTemporal {
		kind = kindNT
	}
	switch kind {
	case kindNT:
		copyNonTemporal(dst, src, n)
	case kindTimed, kindTimedNT:
		t0 := time.Now()
		if kind == kindTimed {
			copy(dst[:n], src)
		} else {
			copyNonTemporal(dst, src, n)
		}
		stores.observe(kind, n, time.Since(t0))
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
