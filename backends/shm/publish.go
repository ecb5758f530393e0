package shm

import (
	"sync"
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
// slow down several times over; non-temporal stores go to memory without
// reading the line first, but lose where the CPUs share a cache (the peers
// then read from memory what ordinary stores would have left in cache).
//
// So publish times its ordinary copies of probeMin bytes or more. After
// slowRun of them in a row ran below slowRate (a copy can be slow for other
// reasons, such as preemption, but not slowRun in a row), it times the next
// trialLen copies made non-temporal, and keeps non-temporal stores only if
// the fastest of those ran at least ntGain times as fast as the fastest of
// the slow ordinary ones: where ordinary copies are slow for a reason that
// non-temporal stores do not remove (memory bandwidth shared by many
// ranks), it goes back to ordinary stores and leaves its next backoff
// copies of probeMin bytes or more untimed. A slow run or a trial whose samples lie more than staleAfter apart
// starts over (the CPUs may have moved in between). In non-temporal mode
// every probeEvery-th copy of publishMin bytes or more is an ordinary,
// timed one, and a fast one switches back; every op that writes large
// pieces into the arena makes such copies, so a process never stays in
// that mode for want of probes.
//
// The trial sees only the writer's side; the cost of non-temporal stores
// falls on the readers, who then read from memory instead of a shared
// cache. Where CPUs share a cache, ordinary copies run fast and no trial
// starts; the probes switch back as soon as they do.
const (
	publishMin = 16 << 10 // smallest copy made non-temporal
	probeMin   = 64 << 10 // smallest copy timed
	slowRate   = 6.0      // bytes per nanosecond (6 GB/s)
	slowRun    = 8
	trialLen   = 4
	ntGain     = 2.0
	backoff    = 4096
	probeEvery = 32
	staleAfter = time.Second
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
	epoch    uint64    // bumped by every change of mode
	last     time.Time // when the last timed copy ended
	slow     int       // timed ordinary copies in a row below slowRate
	bestSlow float64   // the fastest of them, bytes per nanosecond
	trial    int       // timed non-temporal copies still to make
	bestNT   float64   // the fastest of those made, bytes per nanosecond
	skip     int       // copies still to make untimed after a failed trial
	count    int       // non-temporal copies of publishMin bytes or more, for probing
}

// pick says how to copy n bytes, at least publishMin, and the epoch to
// hand back to observe.
func (sc *storeChooser) pick(n int) (copyKind, uint64) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch {
	case sc.mode == modeNonTemporal:
		if sc.count++; sc.count%probeEvery == 0 {
			return kindTimed, sc.epoch
		}
		return kindNT, sc.epoch
	case n < probeMin:
		return kindPlain, sc.epoch
	case sc.mode == modeTrial:
		return kindTimedNT, sc.epoch
	case sc.skip > 0:
		sc.skip--
		return kindPlain, sc.epoch
	default:
		return kindTimed, sc.epoch
	}
}

// setMode changes the mode and starts a new epoch.
func (sc *storeChooser) setMode(m storeMode) {
	sc.mode = m
	sc.epoch++
	sc.slow, sc.bestSlow, sc.trial, sc.bestNT = 0, 0, 0, 0
}

// observe records one timed copy of n bytes, made as pick said in epoch,
// that took dt and ended at now. Copies picked in an earlier epoch are
// ignored.
func (sc *storeChooser) observe(kind copyKind, epoch uint64, n int, dt time.Duration, now time.Time) {
	rate := float64(n) / float64(max(dt, 1))
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if epoch != sc.epoch {
		return
	}
	stale := now.Sub(sc.last) > staleAfter
	sc.last = now
	switch {
	case kind == kindTimed && sc.mode == modeOrdinary:
		if rate >= slowRate || stale {
			sc.slow, sc.bestSlow = 0, 0
		}
		if rate >= slowRate {
			return
		}
		sc.slow++
		sc.bestSlow = max(sc.bestSlow, rate)
		if sc.slow >= slowRun {
			best := sc.bestSlow
			sc.setMode(modeTrial)
			sc.trial, sc.bestSlow = trialLen, best
		}
	case kind == kindTimed && sc.mode == modeNonTemporal:
		if rate >= slowRate {
			sc.setMode(modeOrdinary)
		}
	case kind == kindTimedNT && sc.mode == modeTrial:
		if stale {
			sc.setMode(modeOrdinary)
			return
		}
		sc.bestNT = max(sc.bestNT, rate)
		if sc.trial--; sc.trial > 0 {
			return
		}
		if sc.bestNT >= ntGain*sc.bestSlow {
			sc.setMode(modeNonTemporal)
		} else {
			sc.setMode(modeOrdinary)
			sc.skip = backoff
		}
	}
}

// forceNonTemporal, set only by tests, makes every publish of 64 bytes or
// more non-temporal, so that the collectives' small test chunks take that
// path.
var forceNonTemporal atomic.Bool

// stores is the process-wide choice: the placement of CPUs it tracks is
// the host's, the same for every arena.
var stores storeChooser

// nonTemporalNow reports whether publish is making its large copies
// non-temporal.
func nonTemporalNow() bool {
	if forceNonTemporal.Load() {
		return true
	}
	if !haveCopyNT {
		return false
	}
	stores.mu.Lock()
	defer stores.mu.Unlock()
	return stores.mode == modeNonTemporal
}

// publish copies src into dst, a region of the arena that other ranks
// will read, and returns the number of bytes copied (as copy does).
func publish(dst, src []byte) int {
	n := min(len(dst), len(src))
	if forceNonTemporal.Load() {
		copyNonTemporal(dst, src, n)
		return n
	}
	if !haveCopyNT || n < publishMin {
		return copy(dst, src)
	}
	kind, epoch := stores.pick(n)
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
		t1 := time.Now()
		stores.observe(kind, epoch, n, t1.Sub(t0), t1)
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
	dst, src = dst[:n], src[:n]
	d := unsafe.Pointer(unsafe.SliceData(dst))
	head := int(-uintptr(d) & 63)
	copy(dst[:head], src[:head])
	body := (n - head) &^ 63
	copyNT(unsafe.Add(d, head), unsafe.Pointer(&src[head]), uintptr(body))
	copy(dst[head+body:n], src[head+body:n])
}
