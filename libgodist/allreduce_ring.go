package libgodist

import (
	"github.com/godist/godist/libgodist/scratch"
	"github.com/godist/godist/libgodist/transport"
)

// chunks splits count elements of size es into n balanced chunks and
// returns chunk i of buf (i taken modulo n).
type chunks struct {
	buf   []byte
	n     int
	count int
	es    int
}

func (ch chunks) bounds(i int) (int, int) {
	i = ((i % ch.n) + ch.n) % ch.n
	lo := i * ch.count / ch.n
	hi := (i + 1) * ch.count / ch.n
	return lo * ch.es, hi * ch.es
}

func (ch chunks) at(i int) []byte {
	lo, hi := ch.bounds(i)
	return ch.buf[lo:hi]
}

func (ch chunks) max() int { return (ch.count + ch.n - 1) / ch.n * ch.es }

// allReduceRing is a ring reduce-scatter followed by a ring allgather. The
// buffer is cut into P chunks. In reduce-scatter step k rank r sends chunk
// r-k to its right neighbour and adds chunk r-k-1 from its left one; after
// P-1 steps rank r holds the full reduction of chunk r+1. The allgather
// then passes the finished chunks around the ring: in its step k rank r
// receives chunk r-k and forwards it in step k+1.
//
// Pipelined (pipeline.go): chunks travel in segments, sent in order by a
// sender goroutine; each received segment is reduced, then queued for the
// next step at once, so reduction and forwarding overlap the transfer and
// a step need not wait for the whole previous chunk. The receives of step
// k+1 are posted while step k is consumed (two scratch chunks alternate).
//
// Steps: 2(P-1); bytes sent per rank: 2(P-1)/P of the buffer. Each chunk's
// final value is computed once, by one rank, and copied: every rank ends
// with the same bits.
func allReduceRing(c *comm, buf []byte, s reduceSpec) error {
	n, r := c.size, c.rank
	es := s.dt.Size()
	ch := chunks{buf: buf, n: n, count: len(buf) / es, es: es}
	seg := segmentSize(es)
	steps := 2 * (n - 1)
	sq := newSendQueue(c, (r+1)%n, steps*((ch.max()+seg-1)/seg))
	err := ringAllReduceSteps(c, ch, s, seg, sq)
	if err != nil {
		sq.drop()
	}
	if e := sq.finish(); err == nil {
		err = e
	}
	return err
}

func ringAllReduceSteps(c *comm, ch chunks, s reduceSpec, seg int, sq *sendQueue) error {
	n, r := c.size, c.rank
	left := (r - 1 + n) % n
	steps := 2 * (n - 1)
	tmp := [2][]byte{scratch.Get(ch.max()), scratch.Get(ch.max())}
	// dst is where step k's data ends up: the chunk reduced into
	// (reduce-scatter) or filled (allgather).
	dst := func(k int) [][]byte {
		if k < n-1 {
			return segments(ch.at(r-k-1), seg)
		}
		return segments(ch.at(r-(k-(n-1))), seg)
	}
	post := func(k int) []*transport.Recv {
		var rs []*transport.Recv
		if k < n-1 {
			t := tmp[k%2]
			for _, d := range dst(k) {
				rs = append(rs, c.post(left, uint16(k), t[:len(d)]))
				t = t[len(d):]
			}
			return rs
		}
		for _, d := range dst(k) {
			rs = append(rs, c.post(left, uint16(k), d))
		}
		return rs
	}
	own := segments(ch.at(r), seg)
	for _, b := range own {
		sq.push(0, b)
	}
	// With a core per rank and several segments a step, a goroutine of
	// its own reduces (ring_reducer.go) while this one reads on.
	var rr *ringReducer
	reduced := -1 // the last step rr has finished
	if c.spare && len(own) > 1 && n > 1 {
		rr = newRingReducer(s, sq, n-1, len(own)+1)
		defer rr.finish()
	}
	pending := post(0)
	for k := 0; k < steps; k++ {
		if rr != nil && k >= 1 && k+1 < n-1 {
			// Step k+1 receives into the scratch chunk step k-1 filled.
			if err := rr.waitStep(c.ctx, k-1, &reduced); err != nil {
				cancelAll(pending, err)
				return err
			}
		}
		var next []*transport.Recv
		if k+1 < steps {
			next = post(k + 1)
		}
		ds, t := dst(k), tmp[k%2]
		for j, rv := range pending {
			if err := c.wait(rv); err != nil {
				cancelAll(pending[j+1:], err)
				cancelAll(next, err)
				return err
			}
			d := ds[j]
			switch {
			case k < n-1 && rr != nil:
				rr.add(k, d, t[:len(d)], k+1 < steps)
				t = t[len(d):]
				continue
			case k < n-1:
				if err := s.combine(d, t[:len(d)]); err != nil {
					cancelAll(pending[j+1:], err)
					cancelAll(next, err)
					return err
				}
				t = t[len(d):]
			}
			if k+1 < steps {
				sq.push(uint16(k+1), d)
			}
		}
		if k < n-1 && rr != nil {
			rr.endStep(k)
		}
		pending = next
	}
	if rr != nil {
		if err := rr.finish(); err != nil {
			return err
		}
	}
	// Recycled only on success: after a failure a cancelled receive is
	// settled, but keep it simple and let the collector have them.
	scratch.Put(tmp[0])
	scratch.Put(tmp[1])
	return nil
}
