package libgodist

// allGather places every rank's in into outs[rank] on every rank, passing
// blocks around a ring: in step k rank r forwards block r-k to its right
// neighbour and receives block r-k-1 from its left one.
//
// Steps: P-1; bytes sent per rank: (P-1) blocks.
func allGather(c *comm, in []byte, outs [][]byte) error {
	if c.arena != nil {
		return c.arena.AllGather(c.ctx, in, outs)
	}
	n, r := c.size, c.rank
	copy(outs[r], in)
	right, left := (r+1)%n, (r-1+n)%n
	for k := 0; k < n-1; k++ {
		if err := c.sendRecv(right, outs[mod(r-k, n)], left, outs[mod(r-k-1, n)], 0); err != nil {
			return err
		}
	}
	return nil
}

func mod(a, n int) int { return ((a % n) + n) % n }
