package libgodist

// broadcastTree sends root's buf to every rank along a binomial tree: in the
// numbering relative to the root, rank v receives from v minus its lowest
// set bit and then sends to v+2^j for each lower power of two.
//
// Steps: ceil(log2 P); the root sends the whole buffer ceil(log2 P) times.
func broadcastTree(c *comm, buf []byte, root int) error {
	n := c.size
	vr := (c.rank - root + n) % n
	mask := 1
	for mask < n {
		if vr&mask != 0 {
			if err := c.recv((vr-mask+root)%n, 0, buf); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < n {
			if err := c.send((vr+mask+root)%n, 0, buf); err != nil {
				return err
			}
		}
	}
	return nil
}
