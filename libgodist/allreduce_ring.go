package libgodist

import (
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
// a step need not wait for the whole previous chunk.
//
// Every receive is posted at the start. The reduce-scatter's fold into
// their chunk as the bytes land (transport.Fold): chunk r-k-1 holds only
// this rank's contribution until step k's segments fold in, and is sent
// only in step k+1. The reader moves the bytes through a window that stays
// in cache, so they never go to memory on their own. The allgather's
// receives go straight into the buffer. Posting those early is safe: the
// finished chunk r-k that arrives in its step k was reduced downstream of
// this rank's own contribution to it, so this rank's sends of that chunk
// were already received. A left neighbour that runs steps ahead (ranks
// that share cores are descheduled anywhere) then sends into place, not
// into an unexpected-message buffer that the later receive copies out of.
//
// Steps: 2(P-1); bytes sent per rank: 2(P-1)/P of the buffer. Each chunk's
// final value is computed once, by one rank, and copied: every rank ends
// with the same bits.
func allReduceRing(c *comm, buf []byte, s reduceSpec) error {
	n, r := c.size, c.rank
	es := s.dt.Size()
	ch := chunks{buf: buf, n: n, count: len(buf) / es, es: es}
	seg := c.tune.SegmentSize(es)
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
	// Step k's receives: folding into the chunk it reduces
	// (reduce-scatter), or straight into the chunk it fills (allgather).
	posted := make([][]*transport.Recv, steps)
	dst := make([][][]byte, steps) // where each of step k's segments lands
	for k := range posted {
		if k < n-1 {
			dst[k] = segments(ch.at(r-k-1), seg)
			for _, d := range dst[k] {
				posted[k] = append(posted[k], c.postFold(left, uint16(k), d, s))
			}
			continue
		}
		dst[k] = segments(ch.at(r-(k-(n-1))), seg)
		for _, d := range dst[k] {
			posted[k] = append(posted[k], c.post(left, uint16(k), d))
		}
	}
	cancelFrom := func(k, j int, err error) {
		cancelAll(posted[k][j:], err)
		for i := k + 1; i < steps; i++ {
			cancelAll(posted[i], err)
		}
	}
	for _, b := range segments(ch.at(r), seg) {
		sq.push(0, b)
	}
	for k := 0; k < steps; k++ {
		for j, rv := range posted[k] {
			if err := c.wait(rv); err != nil {
				cancelFrom(k, j+1, err)
				return err
			}
			if k+1 < steps {
				sq.push(uint16(k+1), dst[k][j])
			}
		}
	}
	return nil
}
