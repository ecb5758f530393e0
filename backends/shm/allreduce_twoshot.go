package shm

// allReduceTwoShot is the bandwidth algorithm: a reduce-scatter through
// the slots followed by an all-gather copy-out, one chunk of the buffer
// per step. In step i every rank holds chunk i of its buffer in its slot
// half i%2; rank r owns share r of the chunk (a balanced split in whole
// elements), reduces that share of all Size slots in rank order and
// writes the result back into its own slot; then every rank copies each
// owner's share out. Each share's final bytes are computed once, by its
// owner, so all ranks end bitwise identical.
//
// The reduction accumulates in the owner's slot share (hot in cache),
// in rank order. Its first combine writes x0 (op) x1 there in one pass,
// reading the owner's own contribution from its buffer; where the copy-in
// already put it there (ranks 0 and 1, see copyIn) it folds the other one
// in instead, relying on combine being bitwise commutative (see
// CombineFunc): s1 (op) s0 equals s0 (op) s1. The rest fold in at their
// turn. The peers never read a rank's own share of its slot before it
// holds the result.
//
// Two ranks reduce in their own buffer instead, where their contribution
// already is: each folds the other's slot share into its buffer share and
// publishes the result in its slot share (its buffer lines are its own, so
// the reduction's stores take no line back from the peer's cache), and
// copies out only the peer's share. That drops a copy of the share in and
// one out. With
// more ranks the owner needs its contribution at its turn in rank order,
// after x0 and x1, and the slot accumulation stays.
//
// Per step each rank publishes A (chunk copied in), R (share reduced) and
// D (copy-out done). Copy-in of chunk i+1 into the other slot half happens
// between publishing R and waiting for the peers' R of chunk i, so it
// overlaps the slower ranks' reductions.
//
// Memory traffic per rank and chunk of C bytes: C - C/Size copied in (C
// with non-temporal stores), C read and C/Size written by the reduction,
// C copied out. Two ranks: C/2 in, C read and C/2 written by the
// reduction, C/2 published, C/2 out.
func (a *Arena) allReduceTwoShot(c *opCtx, buf []byte, d desc, combine CombineFunc) error {
	es, P, me := int(d.arg), a.size, a.rank
	piece := a.lay.chunk / es * es
	n := len(buf)
	steps := chunks(n, piece)
	s0 := a.step
	at := func(i int) []byte {
		lo := i * piece
		return buf[lo:min(n, lo+piece)]
	}
	share := func(l, q int) (int, int) {
		cnt := l / es
		return q * cnt / P * es, (q + 1) * cnt / P * es
	}
	if err := a.waitFree(c, s0); err != nil {
		return err
	}
	inBuf := P == 2    // reduce in the buffer (see above)
	ownIn := [2]bool{} // per slot half: the copy-in included this rank's share
	ownIn[s0%2] = a.copyIn(s0, at(0), share, inBuf)
	a.pubA(s0, d)
	var cerr error
	for i := 0; i < steps; i++ {
		s := s0 + uint64(i)
		p := at(i)
		if err := a.gatherA(c, s, d, i == 0); err != nil {
			if fatal(err) {
				return err
			}
			// A size mismatch: every rank sees it at the first step.
			a.pubD(s)
			a.step = s + 1
			return err
		}
		if lo, hi := share(len(p), me); hi > lo && cerr == nil {
			var err error
			if inBuf {
				err = a.reduceInBuf(p[lo:hi], s, lo, combine)
			} else {
				err = a.reduceShare(a.bytes(a.lay.buf(me, s)+lo, hi-lo), p[lo:hi], ownIn[s%2], s, lo, combine)
			}
			if err != nil {
				cerr = combineErr(c.op, err)
			}
		}
		a.pubR(s)
		if i+1 < steps {
			if err := a.waitFree(c, s+1); err != nil {
				return err
			}
			ownIn[(s+1)%2] = a.copyIn(s+1, at(i+1), share, inBuf)
			a.pubA(s+1, d)
		}
		for k := 0; k < P; k++ {
			q := (me + k) % P
			if q == me && inBuf {
				continue
			}
			if err := a.waitR(c, q, s); err != nil { // returns at once for q == me
				return err
			}
			lo, hi := share(len(p), q)
			copy(p[lo:hi], a.bytes(a.lay.buf(q, s)+lo, hi-lo))
		}
		a.pubD(s)
	}
	a.step = s0 + uint64(steps)
	return cerr
}

// copyIn publishes chunk p of step s into this rank's slot half. Only the
// peers read the slot outside this rank's share, and in it the reduction
// accumulates, its first combine reading this rank's contribution from the
// buffer: with ordinary stores the copy-in leaves the share out (copying it
// there ahead of the reduction cost 7-10% of a 64 MiB all-reduce of 2
// ranks, ~3% of 4). It reports whether it included the share:
// it does when publish makes non-temporal copies (CPUs on different dies),
// as the reduction would then wait for a non-temporal copy of its own
// (10-15% slower) or take the lines its peers last read with ordinary
// stores. With inBuf (two ranks) the share is never needed there.
func (a *Arena) copyIn(s uint64, p []byte, share func(l, q int) (int, int), inBuf bool) bool {
	slot := a.bytes(a.lay.buf(a.rank, s), len(p))
	if !inBuf && nonTemporalNow() {
		publish(slot, p)
		return true
	}
	lo, hi := share(len(p), a.rank)
	publish(slot[:lo], p[:lo])
	publish(slot[hi:], p[hi:])
	return false
}

// reduceInBuf is reduceShare for two ranks: it folds the peer's slot share
// at offset lo of step s into own, this rank's share of its buffer, and
// publishes the result in its own slot share.
func (a *Arena) reduceInBuf(own []byte, s uint64, lo int, combine CombineFunc) error {
	err := combine(own, own, a.bytes(a.lay.buf(1-a.rank, s)+lo, len(own))) // x1 (op) x0 == x0 (op) x1
	publish(a.bytes(a.lay.buf(a.rank, s)+lo, len(own)), own)
	return err
}

// reduceShare reduces the share at offset lo of every rank's slot half of
// step s into acc, this rank's own slot share, in rank order; own is this
// rank's contribution in its buffer (untouched), which the copy-in put in
// acc too if ownIn. It returns the first error of combine.
func (a *Arena) reduceShare(acc, own []byte, ownIn bool, s uint64, lo int, combine CombineFunc) error {
	me, n := a.rank, len(acc)
	src := func(q int) []byte {
		if q == me {
			return own
		}
		return a.bytes(a.lay.buf(q, s)+lo, n)
	}
	// x0 (op) x1 straight into acc, unless acc already holds this rank's
	// contribution (ranks 0 and 1 after a copy-in that included it).
	var err error
	if me < 2 && ownIn {
		err = combine(acc, acc, src(1-me)) // s1 (op) s0 == s0 (op) s1
	} else {
		err = combine(acc, src(0), src(1))
	}
	if err != nil {
		return err
	}
	for q := 2; q < a.size; q++ {
		if err := combine(acc, acc, src(q)); err != nil {
			return err
		}
	}
	return nil
}
