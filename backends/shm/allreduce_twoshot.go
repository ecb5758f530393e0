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
// The reduction accumulates in the owner's slot (hot in cache, unless the
// copy-in was non-temporal: see publish), relying on
// combine being bitwise commutative (see CombineFunc): ranks 0 and 1 start
// from their own contribution, already in place, since s0 (op) s1 equals
// s1 (op) s0; the others first copy s0 over theirs and fold their own in
// from their buffer at their turn.
//
// Per step each rank publishes A (chunk copied in), R (share reduced) and
// D (copy-out done). Copy-in of chunk i+1 into the other slot half happens
// between publishing R and waiting for the peers' R of chunk i, so it
// overlaps the slower ranks' reductions.
//
// Memory traffic per rank and chunk of C bytes: C copied in, C read and
// C/Size written by the reduction, C copied out.
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
	p0 := at(0)
	publish(a.bytes(a.lay.buf(me, s0), len(p0)), p0)
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
			if err := a.reduceShare(a.bytes(a.lay.buf(me, s)+lo, hi-lo), p[lo:hi], s, lo, combine); err != nil {
				cerr = combineErr(c.op, err)
			}
		}
		a.pubR(s)
		if i+1 < steps {
			if err := a.waitFree(c, s+1); err != nil {
				return err
			}
			np := at(i + 1)
			publish(a.bytes(a.lay.buf(me, s+1), len(np)), np)
			a.pubA(s+1, d)
		}
		for k := 0; k < P; k++ {
			q := (me + k) % P
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

// reduceShare reduces the share at offset lo of every rank's slot half of
// step s into acc, this rank's own slot share, in rank order; own is this
// rank's contribution in its buffer (untouched). It returns the first
// error of combine.
func (a *Arena) reduceShare(acc, own []byte, s uint64, lo int, combine CombineFunc) error {
	me, n := a.rank, len(acc)
	src := func(q int) []byte {
		if q == me {
			return own
		}
		return a.bytes(a.lay.buf(q, s)+lo, n)
	}
	first := 2
	switch me {
	case 0:
		if err := combine(acc, src(1)); err != nil {
			return err
		}
	case 1:
		if err := combine(acc, src(0)); err != nil { // s1 (op) s0 == s0 (op) s1
			return err
		}
	default:
		// An ordinary copy, not publish: combine reads acc back at once.
		copy(acc, src(0))
		first = 1
	}
	for q := first; q < a.size; q++ {
		if err := combine(acc, src(q)); err != nil {
			return err
		}
	}
	return nil
}
