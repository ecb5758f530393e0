package libgodist

import "github.com/godist/godist/libgodist/transport"

// allToAllPairwise sends ins[j] to rank j, which stores it in outs[rank]. Blocks may
// differ in size (all_to_all_single with uneven splits); a block's size must
// match on both sides. All receives are posted first, then the sends go out
// in pairwise order (step k: to rank+k), so no two ranks hit one peer at once.
//
// Steps: P-1; bytes sent per rank: everything but its own block.
func allToAllPairwise(c *comm, ins, outs [][]byte) error {
	n, r := c.size, c.rank
	rs := make([]*transport.Recv, 0, n-1)
	for k := 1; k < n; k++ {
		from := mod(r-k, n)
		rs = append(rs, c.post(from, 0, outs[from]))
	}
	copy(outs[r], ins[r])
	for k := 1; k < n; k++ {
		to := (r + k) % n
		if err := c.send(to, 0, ins[to]); err != nil {
			cancelAll(rs, err)
			return err
		}
	}
	return c.waitAll(rs)
}
