package shm

import (
	"fmt"
	"sync/atomic"

	"github.com/godist/godist/libgodist/transport"
)

// Desync checks. A collective whose context carries a transport.Call (the
// engine's do) publishes the Call's stamp in every step block next to its
// descriptor, and a rank that matches a peer's block compares the stamps
// first: ranks that run different collectives, or the same one with another
// count, dtype, root or reduction, fail with a *transport.DesyncError
// (wrapped with ErrDesync, so the arena is broken) on every rank that reads
// the other's block. Point-to-point messages of collective tags carry the
// stamp after their ring header (stampFlag) into the mailbox, which checks
// it. And since a rank in an arena collective and one in a collective of
// point-to-point messages (reduce, gather, scatter) may wait for each other
// without either sending, each rank also publishes the collective it runs
// (SetCall) and a waiter in the arena compares its peer's with its own at
// every liveness check.

// callState is what SetCall keeps of the collectives this rank runs (the
// published copies in the arena are what other goroutines read).
type callState struct {
	cur      transport.Stamp // the running collective; only SetCall touches it
	prevHash atomic.Uint64   // stampHash of the one before
}

// stampHash is a non-zero digest of a stamped st (0 for none), without its
// detail hash (a rank without TORCH_DISTRIBUTED_DEBUG=DETAIL has none).
func stampHash(st transport.Stamp) uint64 {
	if st.Op == transport.OpNone {
		return 0
	}
	h := uint64(st.Op) | uint64(st.DType)<<8 | uint64(st.RedOp)<<16 | uint64(uint32(st.Root))<<32
	for _, w := range [...]uint64{st.Count, st.Seq, st.Send, st.Recv} {
		h = (h ^ w) * 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	return h | 1
}

// putStamp writes the running collective's stamp, and the hash of the one
// before, into the step block at off (zeros when it has none). Called with
// opMu held.
func (a *Arena) putStamp(off int) {
	var st transport.Stamp
	if a.opCall != nil {
		st = a.opCall.Stamp
	}
	*(*uint32)(a.ptr(off + bStOp)) = uint32(st.Op) | uint32(st.DType)<<8 | uint32(st.RedOp)<<16
	*(*int32)(a.ptr(off + bStRoot)) = st.Root
	*(*uint32)(a.ptr(off + bStDetail)) = st.Detail
	*(*uint64)(a.ptr(off + bStCount)) = st.Count
	*(*uint64)(a.ptr(off + bStSeq)) = st.Seq
	*(*uint64)(a.ptr(off + bStPrev)) = a.opPrev
}

// getStamp reads the stamp of the step block at off, and the hash of the
// collective before it.
func (a *Arena) getStamp(off int) (transport.Stamp, uint64) {
	w := *(*uint32)(a.ptr(off + bStOp))
	return transport.Stamp{Op: transport.OpCode(w), DType: uint8(w >> 8), RedOp: uint8(w >> 16),
		Root:   *(*int32)(a.ptr(off + bStRoot)),
		Detail: *(*uint32)(a.ptr(off + bStDetail)),
		Count:  *(*uint64)(a.ptr(off + bStCount)),
		Seq:    *(*uint64)(a.ptr(off + bStSeq))}, *(*uint64)(a.ptr(off + bStPrev))
}

// stampDiff returns the desync between the running collective and local
// rank q's, whose block has st and prev: different stamps, or the same
// with different collectives before (which may both have finished without
// noticing: two ranks that each took itself for a broadcast's root).
// Called with opMu held.
func (a *Arena) stampDiff(q int, st transport.Stamp, prev uint64) *transport.DesyncError {
	if a.opCall == nil || st.Op == transport.OpNone {
		return nil
	}
	if !st.Matches(a.opCall.Stamp) {
		return &transport.DesyncError{Rank: a.globalRank(a.rank), Peer: a.globalRank(q), Mine: a.opCall.Stamp, Theirs: st}
	}
	if prev == a.opPrev || prev == 0 || a.opPrev == 0 {
		return nil
	}
	mine, ok := a.peerCall(a.rank, 1)
	theirs, ok2 := a.peerCall(q, 1)
	if !ok || !ok2 || mine.Seq != theirs.Seq {
		return nil // the peer's published call changes only at its Track, before this collective
	}
	return &transport.DesyncError{Rank: a.globalRank(a.rank), Peer: a.globalRank(q), Mine: mine, Theirs: theirs}
}

// desyncErr is the error of op with local rank q for de.
func (a *Arena) desyncErr(op string, q int, de *transport.DesyncError) error {
	return &transport.PeerError{Op: op, Peer: a.globalRank(q), Err: fmt.Errorf("%w: %w", ErrDesync, de)}
}

// SetCall publishes c as the collective this rank runs from now on (the
// engine calls it through the router's Track before the collective
// starts), after the one it ran before: a peer that waits in the arena for
// this rank while running another collective at the same sequence number
// fails with a desync.
func (a *Arena) SetCall(c *transport.Call) {
	if a.enter("call") != nil {
		return
	}
	defer a.exit()
	st := c.Stamp
	st.Send, st.Recv = 0, 0
	prev := a.calls.cur
	a.calls.cur = st
	a.calls.prevHash.Store(stampHash(prev))
	off := a.ctl(a.rank) + ctlCall
	ver := a.u64(off)
	v := ver.Load()
	ver.Store(v + 1)
	var b [2 * transport.StampSize]byte
	st.Put(b[:])
	prev.Put(b[transport.StampSize:])
	copy(a.bytes(off+8, len(b)), b[:])
	ver.Store(v + 2)
}

// peerCall reads the collective local rank q published as running (i 0)
// or as the one before (i 1), if a consistent copy can be read.
func (a *Arena) peerCall(q, i int) (transport.Stamp, bool) {
	off := a.ctl(q) + ctlCall
	ver := a.u64(off)
	for try := 0; try < 100; try++ {
		v := ver.Load()
		if v == 0 {
			return transport.Stamp{}, false
		}
		if v&1 != 0 {
			continue
		}
		var b [transport.StampSize]byte
		copy(b[:], a.bytes(off+8+i*transport.StampSize, transport.StampSize))
		if ver.Load() == v {
			return transport.ParseStamp(b[:]), true
		}
	}
	return transport.Stamp{}, false
}

// crossCheck compares the collective local rank q published as running
// with this rank's of the same sequence number (the running one, or the
// one before).
func (a *Arena) crossCheck(op string, q int) error {
	st, ok := a.peerCall(q, 0)
	if !ok || st.Op == transport.OpNone {
		return nil
	}
	for i := range 2 {
		mine, ok := a.peerCall(a.rank, i)
		if ok && mine.Op != transport.OpNone && mine.Seq == st.Seq && !st.Matches(mine) {
			return a.desyncErr(op, q, &transport.DesyncError{Rank: a.globalRank(a.rank), Peer: a.globalRank(q), Mine: mine, Theirs: st})
		}
	}
	return nil
}
