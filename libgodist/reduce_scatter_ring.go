package libgodist

import "github.com/godist/godist/libgodist/scratch"

// reduceScatter leaves on rank r the reduction over all ranks of ins[r].
// Ring: the partial sum of block c starts at rank c+1 and travels right,
// each rank adding its own block c, until it reaches rank c, which adds its
// own and writes out. Inputs are never modified.
//
// Steps: P-1; bytes sent per rank: (P-1) blocks.
func reduceScatter(c *comm, ins [][]byte, out []byte, s reduceSpec) (err error) {
	n, r := c.size, c.rank
	if s.op == opPremulSum {
		scaled := make([][]byte, n)
		for i, b := range ins {
			scaled[i] = append([]byte(nil), b...)
			if err := s.pre(scaled[i]); err != nil {
				return err
			}
		}
		ins = scaled
	}
	if n == 1 {
		copy(out, ins[0])
		return s.post(out, 1)
	}
	if c.arena != nil {
		if err := c.arena.ReduceScatter(c.ctx, ins, out, s.dt.Size(), s.combine); err != nil {
			return err
		}
		return s.post(out, n)
	}
	right, left := (r+1)%n, (r-1+n)%n
	a, b := scratch.Get(len(out)), scratch.Get(len(out))
	defer func() {
		if err == nil { // after a failure, let the collector have them
			scratch.Put(a)
			scratch.Put(b)
		}
	}()
	send := ins[mod(r-1, n)]
	for k := 0; k < n-1; k++ {
		if err := c.sendRecv(right, send, left, a, 0); err != nil {
			return err
		}
		if k == n-2 {
			if err := combine3(s, out, a, ins[r]); err != nil {
				return err
			}
			break
		}
		if err := s.combine(a, ins[mod(r-k-2, n)]); err != nil {
			return err
		}
		send = a
		a, b = b, a
	}
	return s.post(out, n)
}
