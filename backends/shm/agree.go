package shm

import (
	"fmt"
	"sync/atomic"

	"github.com/godist/godist/libgodist/transport"
)

// Agreement on outcomes. A collective must succeed on every local rank or
// fail on every one. A rank that gives up on a collective (its deadline
// passed, its group is aborted or closed, a peer failed) may have
// published its contribution already; a peer that comes to the collective
// later would find it and complete the collective that this rank reported
// failed.
//
// Every word a rank waits for in a collective (a peer's step block
// sequence word, its D and R counters) is written by one owner, and the
// owner's publish is a compare-and-swap (publish), where it was a store:
// no dearer, both are one locked instruction. A rank that gives up while
// waiting for a word of the collective it runs first poisons the word
// (giveUp: a compare-and-swap from the value it saw to poisonBit, its
// local rank and the step it waited for). The compare-and-swap on that one
// word decides which came first:
//
//   - the owner's publish: the giving-up rank finds the value it waited
//     for and does not give up (it completes, a little late);
//   - the poison: the owner's publish fails, so its collective fails (its
//     result is not returned), and no rank ever sees the word published
//     for that step, so no rank completes the collective either: every
//     rank of a collective reads every peer's words of each step it
//     waits at (all-reduce, all-gather, reduce-scatter, all-to-all,
//     barrier), and a broadcast's non-roots wait only for the root, whose
//     publish then fails. Readers treat a poisoned word as never
//     published: they time out as they would have (naming the ranks that
//     never joined), or fail earlier for another reason.
//
// A rank giving up while waiting for a word of an earlier collective (the
// D counters waitFree reads at a collective's first step) poisons
// nothing: it has published nothing of this collective, and the earlier
// one completed on this rank. A publish that finds a poison set for a
// later step than its own (the owner is behind) keeps its collective's
// outcome, and breaks the arena for the next.
//
// Success costs nothing more: a load of the publisher's own word before
// its compare-and-swap, and a second comparison on the value a waiter
// already loaded. Not covered: a broadcast root returns once it has
// published (gloo's does too), so a non-root that gives up cannot undo
// the root's success.

// poisonBit marks a poisoned word; a poisoned word holds poisonBit, the
// giving-up rank's local rank (shifted by poisonRankShift) and the step it
// waited for. Steps stay below 2^48.
const (
	poisonBit       = 1 << 63
	poisonRankShift = 48
	poisonStepMask  = 1<<poisonRankShift - 1
)

// publish stores v into this rank's word at off, unless a peer has
// poisoned it (the failure is recorded for end). Called with a.opMu held.
func (a *Arena) publish(off int, v uint64) {
	w := a.u64(off)
	if old := w.Load(); old < poisonBit && w.CompareAndSwap(old, v) {
		return
	}
	a.poisoned(w.Load(), v)
}

// poisoned records that this rank's publish of step v found poison p.
// Called with a.opMu held.
func (a *Arena) poisoned(p, v uint64) {
	q, step := int(p>>poisonRankShift&(1<<15-1)), p&poisonStepMask
	err := &transport.PeerError{Op: a.opName, Peer: a.globalRank(q),
		Err: fmt.Errorf("%w: %w: local rank %d gave up on it at step %d", transport.ErrAbandoned, transport.ErrPeerGone, q, step)}
	if a.poison == nil {
		a.poison = err
	}
	a.poisonFails = a.poisonFails || v >= step
}

// giveUp ends a wait for w (at off, owned by a peer) to reach target
// that failed with err: it poisons the word, unless the word was published
// meanwhile (the wait then succeeds) or target is a step of an earlier
// collective. It returns what await returns.
func (a *Arena) giveUp(c *opCtx, w *atomic.Uint64, off int, target uint64, err error) (uint64, error) {
	for {
		cur := w.Load()
		if cur >= target && cur < poisonBit {
			return cur, nil
		}
		if cur >= poisonBit || c.first == 0 || target < c.first {
			return cur, err
		}
		if w.CompareAndSwap(cur, poisonBit|uint64(a.rank)<<poisonRankShift|target&poisonStepMask) {
			futexWake(a.low(off))
			return cur, err
		}
	}
}
