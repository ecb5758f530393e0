package shm

import (
	"context"
	"errors"
	"fmt"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
)

// CombineFunc sets dst[i] = a[i] (op) b[i] over raw element bytes (equal
// lengths, a whole number of elements); dst may be exactly a or exactly b.
// For example
//
//	func(dst, a, b []byte) error { return reduce.Combine3(op, dtype, dst, a, b) }
//
// The arena combines contributions in rank order, ((x0 op x1) op x2) ...,
// so combine must be deterministic (same bytes in, same bytes out) and
// commutative bit for bit (combine(d, a, b) and combine(d, b, a) write the
// same bytes: the arena may start from x1 and fold x0 in) but need not be
// associative. Every reduce.Combine3 kernel qualifies. The slices may be
// in the caller's memory or in the arena. An error it returns is returned
// by the collective (wrapped) after the protocol has finished, so the
// arena stays usable.
type CombineFunc = backend.Combine

// opKind names a collective in step blocks, so that ranks can tell a peer
// running something else.
type opKind uint32

const (
	kindBarrier opKind = iota + 1
	kindAllReduce
	kindBroadcast
	kindAllGather
	kindReduceScatter
	kindAllToAll
)

var kindNames = [...]string{"?", "barrier", "allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall"}

func (k opKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("op#%d", uint32(k))
}

// desc is what a rank publishes about its operation with every step: its
// kind, one argument (element size, or root) and its size in bytes.
type desc struct {
	kind opKind
	arg  uint32
	n    uint64
	st   transport.Stamp // a peer's: its collective's fingerprint (waitA)
	prev uint64          // a peer's: the hash of its collective before
}

func (d desc) String() string {
	switch d.kind {
	case kindBroadcast:
		return fmt.Sprintf("%s of %d bytes from root %d", d.kind, d.n, d.arg)
	case kindAllReduce, kindReduceScatter:
		return fmt.Sprintf("%s of %d bytes (element size %d)", d.kind, d.n, d.arg)
	case kindAllGather:
		return fmt.Sprintf("%s of %d bytes", d.kind, d.n)
	}
	return d.kind.String()
}

// begin starts a collective: it holds a.life shared and a.opMu until end.
func (a *Arena) begin(ctx context.Context, op string) (opCtx, error) {
	if err := a.enter(op); err != nil {
		return opCtx{}, err
	}
	a.opMu.Lock()
	if a.broken != nil {
		err := fmt.Errorf("shm: %s: %w: %w", op, ErrBroken, a.broken)
		a.opMu.Unlock()
		a.exit()
		return opCtx{}, err
	}
	a.opCall = transport.CallOf(ctx)
	a.opPrev = 0
	if a.opCall != nil {
		a.opPrev = a.calls.prevHash.Load()
	}
	a.opName = op
	c := newOpCtx(ctx, op)
	c.first = a.step
	return c, nil
}

// end finishes a collective begun with begin. A fatal error breaks the
// arena; one caused by a lost peer also marks this rank failed so that
// peers waiting for it fail at once, naming the lost rank.
func (a *Arena) end(err error) error {
	if a.poison != nil {
		// A peer gave up on this collective (or a later one) and poisoned
		// a word this rank published (agree.go).
		if err == nil && a.poisonFails {
			err = a.poison
		}
		if a.broken == nil {
			a.broken = a.poison
		}
		a.poison, a.poisonFails = nil, false
	}
	if fatal(err) {
		a.broken = err
		var pe *transport.PeerError
		if errors.As(err, &pe) {
			if q, ok := a.LocalRank(pe.Peer); ok && q != a.rank {
				switch {
				case errors.Is(err, transport.ErrConnLost):
					a.markFailed(q, causeLost)
				case errors.Is(err, transport.ErrPeerGone):
					a.markFailed(q, causeGone)
				}
			}
		}
	}
	a.opCall = nil
	a.opMu.Unlock()
	a.exit()
	return err
}

// pubA publishes this rank's step block for step s: its descriptor, then
// (release) its sequence word. The payload must already be in place.
func (a *Arena) pubA(s uint64, d desc) {
	off := a.lay.blk(a.rank, s)
	*(*uint32)(a.ptr(off + bKind)) = uint32(d.kind)
	*(*uint32)(a.ptr(off + bArg)) = d.arg
	*(*uint64)(a.ptr(off + bN)) = d.n
	a.putStamp(off)
	a.publish(off+bSeq, s)
	if a.sleepers(a.rank, sleepBlk0+int(s&1)).Load() != 0 {
		futexWake(a.low(off + bSeq))
	}
}

// pub stores v into this rank's counter at field (ctlD or ctlR).
func (a *Arena) pub(field, sleepIdx int, v uint64) {
	off := a.ctl(a.rank) + field
	a.publish(off, v)
	if a.sleepers(a.rank, sleepIdx).Load() != 0 {
		futexWake(a.low(off))
	}
}

// pubD records that this rank has consumed everything of steps <= s.
func (a *Arena) pubD(s uint64) { a.pub(ctlD, sleepD, s) }

// pubR records that this rank's reduced share of step s is published.
func (a *Arena) pubR(s uint64) { a.pub(ctlR, sleepR, s) }

// waitA waits for local rank q's step block of step s and returns its
// descriptor.
func (a *Arena) waitA(c *opCtx, q int, s uint64) (desc, error) {
	off := a.lay.blk(q, s)
	v, err := a.await(c, q, off+bSeq, sleepBlk0+int(s&1), s)
	if err != nil {
		return desc{}, err
	}
	if v != s {
		return desc{}, &transport.PeerError{Op: c.op, Peer: a.globalRank(q),
			Err: fmt.Errorf("%w: local rank %d published step %d where this rank expects step %d", ErrDesync, q, v, s)}
	}
	d := desc{kind: opKind(*(*uint32)(a.ptr(off + bKind))), arg: *(*uint32)(a.ptr(off + bArg)),
		n: *(*uint64)(a.ptr(off + bN))}
	d.st, d.prev = a.getStamp(off)
	return d, nil
}

// waitR waits until local rank q has published its reduced share of step s.
func (a *Arena) waitR(c *opCtx, q int, s uint64) error {
	_, err := a.await(c, q, a.ctl(q)+ctlR, sleepR, s)
	return err
}

// waitFree waits until this rank may overwrite its step block and data
// slot half of step s: every peer has consumed step s-2, which used them
// last.
func (a *Arena) waitFree(c *opCtx, s uint64) error {
	if s < 3 {
		return nil
	}
	need := s - 2
	for q := 0; q < a.size; q++ {
		if q == a.rank || a.seenD[q] >= need {
			continue
		}
		v, err := a.await(c, q, a.ctl(q)+ctlD, sleepD, need)
		if err != nil {
			return err
		}
		a.seenD[q] = v
	}
	return nil
}

// match compares a peer's descriptor with this rank's. Different
// fingerprints (desync.go), kinds or roots are a desync; a different size
// alone is an ErrSizeMismatch that every rank detects at the same step
// (first says whether this is the operation's first step; later it can
// only be a desync).
func (a *Arena) match(c *opCtx, q int, got, want desc, first bool) error {
	if de := a.stampDiff(q, got.st, got.prev); de != nil {
		return a.desyncErr(c.op, q, de)
	}
	got.st, got.prev = want.st, want.prev
	if got == want {
		return nil
	}
	err := fmt.Errorf("local rank %d runs %v, this rank %v", q, got, want)
	if got.kind != want.kind || want.kind == kindBroadcast && got.arg != want.arg || !first {
		return &transport.PeerError{Op: c.op, Peer: a.globalRank(q), Err: fmt.Errorf("%w: %w", ErrDesync, err)}
	}
	return &transport.PeerError{Op: c.op, Peer: a.globalRank(q), Err: fmt.Errorf("%w: %w", transport.ErrSizeMismatch, err)}
}

// gatherA waits for every peer's step block of step s and matches its
// descriptor. It returns a fatal error at once, and otherwise the first
// size mismatch after having seen every peer.
func (a *Arena) gatherA(c *opCtx, s uint64, want desc, first bool) error {
	var mismatch error
	for q := 0; q < a.size; q++ {
		if q == a.rank {
			continue
		}
		got, err := a.waitA(c, q, s)
		if err == nil {
			err = a.match(c, q, got, want, first)
		}
		if fatal(err) {
			return err
		}
		if err != nil && mismatch == nil {
			mismatch = err
		}
	}
	return mismatch
}

// chunks returns the number of steps that move n bytes per rank in pieces
// of size piece (at least one step, so empty operations still meet).
func chunks(n, piece int) int { return max(1, (n+piece-1)/piece) }

// combineErr wraps an error of the caller's combine function.
func combineErr(op string, err error) error {
	return fmt.Errorf("shm: %s: %w: %w", op, errCombine, err)
}
