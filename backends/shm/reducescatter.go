package shm

import "context"

// ReduceScatter reduces ins across the local ranks and leaves block rank of
// the result in out: out = ins_0[rank] (op) ins_1[rank] (op) ... combined
// in rank order with combine. len(ins) must be Size, every ins[q] len(out)
// bytes, a whole number of elemSize-byte elements; out must be identical to
// ins[rank] (in-place) or not overlap any ins[q]. Every rank must pass the
// same len(out) and elemSize (else every rank gets an error wrapping
// transport.ErrSizeMismatch and the arena stays usable).
//
// Protocol: the blocks move in pieces of per = ChunkSize/Size bytes (or
// whole, inline, when Size*len(out) <= InlineSize). In step i every rank
// copies piece i of each ins[q], q != rank, into region q of its step area
// and publishes the step; after every peer's step it copies the next
// pieces into its other slot half, then reduces region rank of every
// peer's area (and its own ins[rank]) in rank order into out and publishes
// D. One synchronization per piece; each rank reads only its own result.
func (a *Arena) ReduceScatter(ctx context.Context, ins [][]byte, out []byte, elemSize int, combine CombineFunc) error {
	const op = "reduce_scatter"
	if elemSize <= 0 || elemSize > maxElemSize || len(out)%elemSize != 0 {
		return invalidf("%s: output of %d bytes is not a whole number of %d-byte elements (1-%d)", op, len(out), elemSize, maxElemSize)
	}
	if combine == nil {
		return invalidf("%s: nil combine function", op)
	}
	if len(ins) != a.size {
		return invalidf("%s: %d input buffers for %d local ranks", op, len(ins), a.size)
	}
	alias := false
	for q, in := range ins {
		if len(in) != len(out) {
			return invalidf("%s: input %d has %d bytes, the output %d", op, q, len(in), len(out))
		}
		if overlap(in, out) {
			if q != a.rank || !same(in, out) {
				return invalidf("%s: the output overlaps input %d", op, q)
			}
			alias = true
		}
	}
	c, err := a.begin(ctx, op)
	if err != nil {
		return err
	}
	if a.size == 1 {
		copy(out, ins[0])
		return a.end(nil)
	}
	return a.end(a.reduceScatter(&c, ins, out, elemSize, combine, alias))
}

func (a *Arena) reduceScatter(c *opCtx, ins [][]byte, out []byte, es int, combine CombineFunc, alias bool) error {
	n, me, P := len(out), a.rank, a.size
	d := desc{kind: kindReduceScatter, arg: uint32(es), n: uint64(n)}
	inline := P*n <= InlineSize
	per, steps := n, 1
	if !inline {
		per = a.lay.chunk / P / es * es
		steps = chunks(n, per)
	}
	bounds := func(i int) (int, int) { return i * per, min(n, (i+1)*per) }
	region := func(q int, s uint64, l int) []byte { return a.area(q, s, P*per, inline)[me*per : me*per+l] }
	write := func(s uint64, i int) {
		lo, hi := bounds(i)
		dst := a.area(me, s, P*per, inline)
		for q := 0; q < P; q++ {
			switch {
			case q != me:
				publish(dst[q*per:q*per+hi-lo], ins[q][lo:hi])
			case alias: // read back only by this rank: keep it in cache
				copy(dst[q*per:q*per+hi-lo], ins[q][lo:hi])
			}
		}
	}
	s0 := a.step
	if err := a.waitFree(c, s0); err != nil {
		return err
	}
	write(s0, 0)
	a.pubA(s0, d)
	var cerr error
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
			write(s+1, i+1)
			a.pubA(s+1, d)
		}
		lo, hi := bounds(i)
		src := func(q int) []byte {
			if q == me && !alias {
				return ins[me][lo:hi]
			}
			return region(q, s, hi-lo)
		}
		if hi > lo && cerr == nil {
			acc := out[lo:hi]
			for q := 1; q < P; q++ {
				x := acc // fold x_q into the result so far, x0 (op) x1 to start
				if q == 1 {
					x = src(0)
				}
				if err := combine(acc, x, src(q)); err != nil {
					cerr = combineErr(c.op, err)
					break
				}
			}
		}
		a.pubD(s)
	}
	a.step = s0 + uint64(steps)
	return cerr
}
