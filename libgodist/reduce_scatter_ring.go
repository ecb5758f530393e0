package libgodist

import "github.com/godist/godist/libgodist/scratch"

// reduceScatterRing leaves in out on rank r the reduction over all ranks
// of ins[r], for P > 1, before AVG's division (the caller's). The partial sum of block c starts at rank c+1 and travels right,
// each rank adding its own block c, until it reaches rank c, which adds its
// own and writes out. Inputs are never modified.
//
// Steps: P-1; bytes sent per rank: (P-1) blocks.
func reduceScatterRing(c *comm, ins [][]byte, out []byte, s reduceSpec) (err error) {
	n, r := c.size, c.rank
	right, left := (r+1)%n, (r-1+n)%n
	a, b := scratch.Get(len(out)), scratch.Get(len(out))
	defer func() {
		if err == nil { // after a failure, let the collector have them
			scratch.Put(a)
			scratch.Put(b)
		}
	}()
	// Step k receives into bufs[k%2] and step k+1 forwards it. Step k+1's
	// receive is posted once step k's send is done (its buffer was sent
	// there), before step k's data is waited for: a left neighbour a step
	// ahead sends into place rather than into an unexpected-message buffer.
	bufs := [2][]byte{a, b}
	send := ins[mod(r-1, n)]
	next := c.post(left, 0, bufs[0])
	for k := 0; k < n-1; k++ {
		cur, got := next, bufs[k%2]
		next = nil
		if err := c.send(right, 0, send); err != nil {
			cur.Cancel(err)
			return err
		}
		if k+1 < n-1 {
			next = c.post(left, 0, bufs[(k+1)%2])
		}
		if err := c.wait(cur); err != nil {
			if next != nil {
				next.Cancel(err)
			}
			return err
		}
		if k == n-2 {
			if err := s.combine3(out, got, ins[r]); err != nil {
				return err
			}
			break
		}
		if err := s.combine(got, ins[mod(r-k-2, n)]); err != nil {
			if next != nil {
				next.Cancel(err)
			}
			return err
		}
		send = got
	}
	return nil
}
