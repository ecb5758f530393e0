package libgodist

import "github.com/godist/godist/libgodist/scratch"

// reduceTo reduces every rank's buf into root's buf along a binomial tree
// (the mirror image of broadcast). Non-root buffers are left unchanged.
//
// Steps: ceil(log2 P); each rank sends its partial result once.
func reduceTo(c *comm, buf []byte, root int, s reduceSpec) (err error) {
	n := c.size
	vr := (c.rank - root + n) % n
	acc := buf
	if c.rank != root {
		acc = append([]byte(nil), buf...)
	}
	if err := s.pre(acc); err != nil {
		return err
	}
	var tmp []byte
	defer func() {
		if err == nil && tmp != nil {
			scratch.Put(tmp)
		}
	}()
	for mask := 1; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			return c.send((vr-mask+root)%n, 0, acc)
		}
		if vr+mask < n {
			if tmp == nil {
				tmp = scratch.Get(len(buf))
			}
			if err := c.recv((vr+mask+root)%n, 0, tmp); err != nil {
				return err
			}
			if err := s.combine(acc, tmp); err != nil {
				return err
			}
		}
	}
	return s.post(acc, n)
}
