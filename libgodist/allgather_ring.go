package libgodist

import "github.com/godist/godist/libgodist/transport"

// allGatherRing places every rank's in into outs[rank] on every rank, passing
// blocks around a ring: in step k rank r forwards block r-k to its right
// neighbour and receives block r-k-1 from its left one.
//
// Every receive is posted up front, each into its final block (block r-k-1
// is first read when step k+1 forwards it): a left neighbour that runs
// steps ahead sends straight into place, not into an unexpected-message
// buffer that a later receive would copy out of.
//
// Steps: P-1; bytes sent per rank: (P-1) blocks.
func allGatherRing(c *comm, in []byte, outs [][]byte) error {
	n, r := c.size, c.rank
	copy(outs[r], in)
	right, left := (r+1)%n, (r-1+n)%n
	rs := make([]*transport.Recv, n-1)
	for k := range rs {
		rs[k] = c.post(left, 0, outs[mod(r-k-1, n)])
	}
	for k := 0; k < n-1; k++ {
		if err := c.send(right, 0, outs[mod(r-k, n)]); err != nil {
			cancelAll(rs, err)
			return err
		}
		if err := c.wait(rs[k]); err != nil {
			cancelAll(rs, err)
			return err
		}
	}
	return nil
}

func mod(a, n int) int { return ((a % n) + n) % n }
