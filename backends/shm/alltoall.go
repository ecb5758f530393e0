package shm

import (
	"context"
	"fmt"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/transport"
)

// AllToAll sends ins[q] to local rank q and receives rank q's block for
// this rank into outs[q]. Blocks may differ in size; len(outs[q]) must equal
// len(ins_q[rank]) on rank q. A rank whose outs[q] has the wrong size gets
// an error wrapping transport.ErrSizeMismatch (that block is left alone,
// the others are delivered, and the arena stays usable). No outs[q] may
// overlap any ins[r], except outs[rank] being ins[rank].
//
// Protocol: every rank's data slot half holds a table of the sizes it
// sends, of their addresses and of the sizes it expects (3*Size u64,
// rounded up to a cache line) followed by Size regions of per bytes. (A
// collective with a fingerprint in its context checks the whole table:
// a pair of ranks that disagree on a block fails every rank with a
// transport.DesyncError, and the arena is broken.) Step s0 carries the tables and the first per bytes of every
// block; after every peer's step s0 each rank knows the largest block in
// the group and so the number of rounds, ceil(max/per). In round i every
// rank copies bytes [i*per, (i+1)*per) of each ins[q] into region q,
// publishes the step, and after every peer's step copies region rank of
// each peer's slot into outs[q]. The next round's copy-in overlaps the
// current copy-out, as in AllGather. When the largest block reaches
// DirectMin and the ranks can read each other's memory (direct.go), there
// are no rounds: each rank reads its blocks straight out of the senders'
// memory, then waits until every peer has read its own.
func (a *Arena) AllToAll(ctx context.Context, ins, outs [][]byte) error {
	const op = "alltoall"
	if len(ins) != a.size || len(outs) != a.size {
		return invalidf("%s: %d input and %d output buffers for %d local ranks", op, len(ins), len(outs), a.size)
	}
	for q, o := range outs {
		for r, in := range ins {
			if overlap(o, in) && !(q == a.rank && r == a.rank && same(o, in)) {
				return invalidf("%s: output %d overlaps input %d", op, q, r)
			}
		}
	}
	if len(outs[a.rank]) != len(ins[a.rank]) {
		return invalidf("%s: this rank's own block is %d bytes in and %d bytes out", op, len(ins[a.rank]), len(outs[a.rank]))
	}
	c, err := a.begin(ctx, op)
	if err != nil {
		return err
	}
	if a.size > 1 {
		err = a.allToAll(&c, ins, outs)
	}
	if !fatal(err) {
		copy(outs[a.rank], ins[a.rank])
	}
	return a.end(err)
}

func (a *Arena) allToAll(c *opCtx, ins, outs [][]byte) error {
	me, P := a.rank, a.size
	d := desc{kind: kindAllToAll}
	tbl := alignUp(24*P, lineSize)
	per := (a.lay.chunk - tbl) / P
	if per >= lineSize {
		per = per / lineSize * lineSize
	}
	write := func(s uint64, i int) {
		base := a.lay.buf(me, s)
		for q := 0; q < P; q++ {
			if i == 0 {
				*(*uint64)(a.ptr(base + 8*q)) = uint64(len(ins[q]))
				*(*uint64)(a.ptr(base + 8*(P+q))) = addrOf(ins[q])
				*(*uint64)(a.ptr(base + 8*(2*P+q))) = uint64(len(outs[q]))
			}
			if lo := i * per; q != me && lo < len(ins[q]) {
				hi := min(len(ins[q]), lo+per)
				publish(a.bytes(base+tbl+q*per, hi-lo), ins[q][lo:hi])
			}
		}
	}
	s0 := a.step
	if err := a.waitFree(c, s0); err != nil {
		return err
	}
	write(s0, 0)
	a.pubA(s0, d)
	if err := a.gatherA(c, s0, d, false); err != nil {
		return err // only a desync can differ here
	}
	if de := a.allToAllDiff(s0); de != nil {
		return &transport.PeerError{Op: c.op, Peer: de.Peer, Err: fmt.Errorf("%w: %w", ErrDesync, de)}
	}
	maxBlk := 0
	for q, in := range ins {
		if q != me {
			maxBlk = max(maxBlk, len(in))
		}
	}
	var mismatch error
	skip := a.scratch[:0]
	for q := 0; q < P; q++ {
		skip = append(skip, false)
		if q == me {
			continue
		}
		base := a.lay.buf(q, s0)
		for r := 0; r < P; r++ {
			v := *(*uint64)(a.ptr(base + 8*r))
			if r == q || v > 1<<56 {
				continue
			}
			maxBlk = max(maxBlk, int(v))
			if r == me && v != uint64(len(outs[q])) {
				skip[q] = true
				if mismatch == nil {
					mismatch = &transport.PeerError{Op: c.op, Peer: a.globalRank(q), Err: fmt.Errorf("%w: local rank %d sends %d bytes, this rank expects %d",
						transport.ErrSizeMismatch, q, v, len(outs[q]))}
				}
			}
		}
	}
	a.scratch = skip
	if algo.ShmAllToAll(maxBlk, a.size, a.lay.direct, a.direct) == algo.ShmDirectCopy {
		// Single copy: read each block straight out of its sender's
		// memory, at the address in the sender's table.
		for k := 1; k < P; k++ {
			q := (me + k) % P
			if skip[q] || len(outs[q]) == 0 {
				continue
			}
			addr := *(*uint64)(a.ptr(a.lay.buf(q, s0) + 8*(P+me)))
			if err := a.readPeer(c, q, addr, outs[q]); err != nil {
				return err
			}
		}
		if err := a.finishDirect(c, s0); err != nil {
			return err
		}
		return mismatch
	}
	rounds := chunks(maxBlk, per)
	for i := 0; i < rounds; i++ {
		s := s0 + uint64(i)
		if i > 0 {
			if err := a.gatherA(c, s, d, false); err != nil {
				return err
			}
		}
		if i+1 < rounds {
			if err := a.waitFree(c, s+1); err != nil {
				return err
			}
			write(s+1, i+1)
			a.pubA(s+1, d)
		}
		for k := 1; k < P; k++ {
			q := (me + k) % P
			if lo := i * per; !skip[q] && lo < len(outs[q]) {
				hi := min(len(outs[q]), lo+per)
				copy(outs[q][lo:hi], a.bytes(a.lay.buf(q, s)+tbl+me*per, hi-lo))
			}
		}
		a.pubD(s)
	}
	a.step = s0 + uint64(rounds)
	return mismatch
}

// allToAllDiff checks the tables of step s0 of a collective with a
// fingerprint: the first pair (in the same order on every rank) whose
// sender's block size differs from what the receiver expects is a desync.
// Called with opMu held.
func (a *Arena) allToAllDiff(s0 uint64) *transport.DesyncError {
	if a.opCall == nil {
		return nil
	}
	P := a.size
	at := func(q, i int) uint64 { return *(*uint64)(a.ptr(a.lay.buf(q, s0) + 8*i)) }
	e := uint64(1)
	if b := a.opCall.Blocks; b != nil {
		e = uint64(max(b.Elem, 1))
	}
	for q := 0; q < P; q++ {
		for r := 0; r < P; r++ {
			if q == r || at(q, r) == at(r, 2*P+q) {
				continue
			}
			mine, theirs := a.opCall.Stamp, a.opCall.Stamp
			mine.Send, mine.Recv = at(r, q)/e, at(r, 2*P+q)/e
			theirs.Send, theirs.Recv = at(q, r)/e, at(q, 2*P+r)/e
			return &transport.DesyncError{Rank: a.globalRank(r), Peer: a.globalRank(q), Mine: mine, Theirs: theirs}
		}
	}
	return nil
}
