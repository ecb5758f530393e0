package shm

import "context"

// AllGather copies every local rank's in into outs[rank] on every rank.
// len(outs) must be Size and every outs[q] len(in) bytes; in must be
// identical to outs[rank] (in-place) or not overlap any outs[q]. Every rank
// must pass the same len(in) (else every rank gets an error wrapping
// transport.ErrSizeMismatch and the arena stays usable).
//
// Protocol: per chunk of in (inline up to InlineSize bytes), every rank
// copies it into its step area and publishes the step, waits for every
// peer's step, copies the next chunk into its other slot half, then copies
// each peer's chunk out and publishes D. One synchronization per chunk.
func (a *Arena) AllGather(ctx context.Context, in []byte, outs [][]byte) error {
	const op = "allgather"
	if len(outs) != a.size {
		return invalidf("%s: %d output buffers for %d local ranks", op, len(outs), a.size)
	}
	for q, o := range outs {
		if len(o) != len(in) {
			return invalidf("%s: output %d has %d bytes, the input %d", op, q, len(o), len(in))
		}
		if q != a.rank && overlap(o, in) {
			return invalidf("%s: output %d overlaps the input", op, q)
		}
	}
	c, err := a.begin(ctx, op)
	if err != nil {
		return err
	}
	if a.size > 1 {
		err = a.allGather(&c, in, outs)
	}
	if err == nil {
		copy(outs[a.rank], in)
	}
	return a.end(err)
}

func (a *Arena) allGather(c *opCtx, in []byte, outs [][]byte) error {
	n, me, P, piece := len(in), a.rank, a.size, a.lay.chunk
	d := desc{kind: kindAllGather, n: uint64(n)}
	inline := n <= InlineSize
	steps := 1
	if !inline {
		steps = chunks(n, piece)
	}
	bounds := func(i int) (int, int) { return i * piece, min(n, (i+1)*piece) }
	s0 := a.step
	if err := a.waitFree(c, s0); err != nil {
		return err
	}
	lo, hi := bounds(0)
	publish(a.area(me, s0, hi-lo, inline), in[lo:hi])
	a.pubA(s0, d)
	for i := 0; i < steps; i++ {
		s := s0 + uint64(i)
		if err := a.gatherA(c, s, d, i == 0); err != nil {
			if fatal(err) {
				return err
			}
			a.pubD(s)
			a.step = s + 1
			return err
		}
		if i+1 < steps {
			if err := a.waitFree(c, s+1); err != nil {
				return err
			}
			lo, hi := bounds(i + 1)
			publish(a.area(me, s+1, hi-lo, inline), in[lo:hi])
			a.pubA(s+1, d)
		}
		lo, hi := bounds(i)
		for k := 1; k < P; k++ {
			q := (me + k) % P
			copy(outs[q][lo:hi], a.area(q, s, hi-lo, inline))
		}
		a.pubD(s)
	}
	a.step = s0 + uint64(steps)
	return nil
}
