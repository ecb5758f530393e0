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
	copy(a.bytes(a.lay.buf(me, s0), len(p0)), p0)
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
		if lo, hi := share(len(p), me); hi > lo {
			acc := p[lo:hi]
			if me != 0 {
				copy(acc, a.bytes(a.lay.buf(0, s)+lo, hi-lo))
			}
			for q := 1; q < P && cerr == nil; q++ {
				if err := combine(acc, a.bytes(a.lay.buf(q, s)+lo, hi-lo)); err != nil {
					cerr = combineErr(c.op, err)
				}
			}
			copy(a.bytes(a.lay.buf(me, s)+lo, hi-lo), acc)
		}
		a.pubR(s)
		if i+1 < steps {
			if err := a.waitFree(c, s+1); err != nil {
				return err
			}
			np := at(i + 1)
			copy(a.bytes(a.lay.buf(me, s+1), len(np)), np)
			a.pubA(s+1, d)
		}
		for k := 1; k < P; k++ {
			q := (me + k) % P
			if err := a.waitR(c, q, s); err != nil {
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
