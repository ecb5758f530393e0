package libgodist

import "github.com/godist/godist/libgodist/transport"

// allReduceRingDirect is the ring of allreduce_ring.go (reduce-scatter, then
// allgather; same chunks, same order of additions) with one whole chunk a
// step, sent from the caller's thread: each step sends to the right
// neighbour and then waits for the left one's chunk. While the caller is
// in its send, its peer's reader goroutine takes the incoming chunk, so
// the two directions still overlap.
//
// Every receive is posted as early as its buffer allows: the
// reduce-scatter's at the start, folding into their chunks as the bytes
// land (see allReduceRing), and allgather step k's into chunk r-k as soon
// as reduce-scatter step k has sent it. A left neighbour that runs steps
// ahead (ranks that share cores are descheduled anywhere) then sends into
// the final place, not into an unexpected-message buffer that the later
// receive copies out of.
//
// Steps: 2(P-1); bytes sent per rank: 2(P-1)/P of the buffer. Each chunk's
// final value is computed once, by one rank, and copied: every rank ends
// with the same bits.
func allReduceRingDirect(c *comm, buf []byte, s reduceSpec) (err error) {
	n, r := c.size, c.rank
	if n == 1 {
		return nil
	}
	es := s.dt.Size()
	ch := chunks{buf: buf, n: n, count: len(buf) / es, es: es}
	right, left := (r+1)%n, (r-1+n)%n
	rs := make([]*transport.Recv, 2*(n-1)) // by step
	defer func() {
		if err != nil {
			cancelAll(rs, err)
		}
	}()
	// The reduce-scatter's receives fold into their chunks as they land,
	// all posted now (chunk r-k-1 is sent only in step k+1).
	for k := 0; k < n-1; k++ {
		rs[k] = c.postFold(left, uint16(k), ch.at(r-k-1), s)
	}
	// Reduce-scatter step k: send chunk r-k, add the left neighbour's
	// chunk r-k-1 into ours. Afterwards rank r holds chunk r+1 in full.
	for k := 0; k < n-1; k++ {
		if err := c.send(right, uint16(k), ch.at(r-k)); err != nil {
			return err
		}
		// Chunk r-k is done with: allgather step k fills it.
		rs[n-1+k] = c.post(left, uint16(n-1+k), ch.at(r-k))
		if err := c.wait(rs[k]); err != nil {
			return err
		}
	}
	// Allgather step k: forward chunk r+1-k, receive chunk r-k in place.
	for k := 0; k < n-1; k++ {
		if err := c.send(right, uint16(n-1+k), ch.at(r+1-k)); err != nil {
			return err
		}
		if err := c.wait(rs[n-1+k]); err != nil {
			return err
		}
	}
	return nil
}
