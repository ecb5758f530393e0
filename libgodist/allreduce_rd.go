package libgodist

import "github.com/godist/godist/libgodist/scratch"

// allReduceRD is recursive doubling with the usual fold for group sizes that
// are not a power of two. With p the largest power of two <= P and
// rem = P - p: among the first 2*rem ranks each even rank hands its buffer
// to the odd rank above it and sits out; the remaining p ranks exchange
// whole buffers with partners at distance 1, 2, 4, ... (in the folded
// numbering), reducing after each exchange; finally each odd rank returns
// the result to its even partner.
//
// Steps: log2(p) + 2 (fold), bytes per rank per step: the whole buffer.
func allReduceRD(c *comm, buf []byte, s reduceSpec) (err error) {
	n, r := c.size, c.rank
	p := 1
	for p*2 <= n {
		p *= 2
	}
	rem := n - p
	tmp := scratch.Get(len(buf))
	defer func() {
		if err == nil { // after a failure, let the collector have it
			scratch.Put(tmp)
		}
	}()
	var vr int
	switch {
	case r < 2*rem && r%2 == 0:
		if err := c.send(r+1, 0, buf); err != nil {
			return err
		}
		return c.recv(r+1, 1, buf)
	case r < 2*rem:
		if err := c.recv(r-1, 0, tmp); err != nil {
			return err
		}
		if err := s.combine(buf, tmp); err != nil {
			return err
		}
		vr = r / 2
	default:
		vr = r - rem
	}
	for mask := 1; mask < p; mask <<= 1 {
		vp := vr ^ mask
		peer := vp + rem
		if vp < rem {
			peer = vp*2 + 1
		}
		if err := c.sendRecv(peer, buf, peer, tmp, 2); err != nil {
			return err
		}
		if err := s.combine(buf, tmp); err != nil {
			return err
		}
	}
	if r < 2*rem {
		return c.send(r-1, 1, buf)
	}
	return nil
}
