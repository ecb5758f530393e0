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
// a step need not wait for the whole previous chunk.
//
// Every receive is posted at the start. The reduce-scatter's fold into
// their chunk as the bytes land (transport.Fold): chunk r-k-1 holds only
// this rank's contribution until step k's segments fold in, and is sent
// only in step k+1. The reader moves the bytes through a window that stays
// in cache, so they never go to memory on their own: against receiving
// into scratch chunks and adding them after (the form kept behind
// ringFold, with up to ringScratchMax bytes of scratch; beyond, a step's
// receive is posted once the step that last used its scratch chunk is
// reduced), two benchmark runs over TCP on the Intel guest (2 cores,
// alternating) gave 64 MiB at 4 ranks x1.10-x1.14 of gloo's speed against
// x0.94-x1.03, at 8 ranks x1.04-x1.09 against x0.98-x0.99, and the DDP
// step at 2 ranks x1.17-x1.18 against x0.97-x1.03, at 5-15% less CPU.
// The allgather's receives go straight into the buffer. Posting the
// allgather's that early is safe: the finished chunk
// r-k that arrives in its step k was reduced downstream of this rank's own
// contribution to it, so this rank's sends of that chunk were already
// received. A left neighbour that runs steps ahead (ranks that share
// cores are descheduled anywhere) then sends into place, not into an
// unexpected-message buffer that the later receive copies out of. Posting
// each step's receive one step ahead only, a 64 MiB all-reduce over TCP
// with 8 ranks on 2 cores (Intel guest) took 285-292 ms per op and 19-20
// ms of user CPU per rank; posted at the start, 237-259 ms and 13-15 ms
// (gloo 231-234 ms, 14 ms). In a DDP step with 4 ranks over TCP the copies
// out of unexpected messages went from 2.2% of all CPU samples to 1.2%
// (most of the rest are the next bucket's first messages, which arrive
// before that all-reduce starts).
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
	// With ringFold the reduce-scatter's receives fold into their chunks
	// as they land; else they land in scratch chunks, win steps of them.
	fold := ringFold
	win := n - 1
	var tmp [][]byte
	if !fold {
		win = ringWindow(n-1, ch.max())
		tmp = make([][]byte, win)
		for i := range tmp {
			tmp[i] = scratch.Get(ch.max())
		}
	}
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
		switch {
		case k < n-1 && fold:
			for _, d := range dst(k) {
				rs = append(rs, c.postFold(left, uint16(k), d, s))
			}
		case k < n-1:
			t := tmp[k%win]
			for _, d := range dst(k) {
				rs = append(rs, c.post(left, uint16(k), t[:len(d)]))
				t = t[len(d):]
			}
		default:
			for _, d := range dst(k) {
				rs = append(rs, c.post(left, uint16(k), d))
			}
		}
		return rs
	}
	posted := make([][]*transport.Recv, steps)
	next := 0 // the first step not posted yet
	cancelFrom := func(k, j int, err error) {
		cancelAll(posted[k][j:], err)
		for i := k + 1; i < next; i++ {
			cancelAll(posted[i], err)
		}
	}
	own := segments(ch.at(r), seg)
	for _, b := range own {
		sq.push(0, b)
	}
	// With a core per rank and several segments a step, a goroutine of
	// its own reduces (ring_reducer.go) while this one reads on.
	var rr *ringReducer
	reduced := -1 // the last step rr has finished
	if !fold && c.spare && len(own) > 1 && n > 1 {
		rr = newRingReducer(s, sq, n-1, len(own)+1)
		defer rr.finish()
	}
	for k := 0; k < steps; k++ {
		// Receives are posted ahead (see allReduceRing), all of them at
		// k == 0 while the scratch allows. A reduce-scatter step reuses
		// the scratch chunk of the step win before it; the allgather
		// steps receive into the buffer.
		for next < steps && (next <= k+win-1 || next >= n-1) {
			if rr != nil && next < n-1 && next-win > reduced {
				if next > k+1 {
					break // not needed yet: post it when its chunk is free
				}
				if err := rr.waitStep(c.ctx, next-win, &reduced); err != nil {
					cancelFrom(k, 0, err)
					return err
				}
			}
			posted[next] = post(next)
			next++
		}
		ds := dst(k)
		var t []byte
		if k < n-1 && !fold {
			t = tmp[k%win]
		}
		for j, rv := range posted[k] {
			if err := c.wait(rv); err != nil {
				cancelFrom(k, j+1, err)
				return err
			}
			d := ds[j]
			switch {
			case k < n-1 && fold: // folded in as it arrived
			case k < n-1 && rr != nil:
				rr.add(k, d, t[:len(d)], k+1 < steps)
				t = t[len(d):]
				continue
			case k < n-1:
				if err := s.combine(d, t[:len(d)]); err != nil {
					cancelFrom(k, j+1, err)
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
	}
	if rr != nil {
		if err := rr.finish(); err != nil {
			return err
		}
	}
	// Recycled only on success: after a failure a cancelled receive is
	// settled, but keep it simple and let the collector have them.
	for _, t := range tmp {
		scratch.Put(t)
	}
	return nil
}

// ringFold makes the rings' reduce-scatter receives fold into their
// chunks as they land (transport.Fold); false receives them into scratch
// and reduces after, on a goroutine of its own while cores are spare
// (ring_reducer.go). A variable so tests run both forms.
var ringFold = true

// ringScratchMax bounds the scratch chunks (bytes) a ring all-reduce posts
// its reduce-scatter receives into. A variable so tests can make it small.
var ringScratchMax = 64 << 20

// ringWindow is how many reduce-scatter steps of rs (each receiving a
// chunk of at most chunk bytes into scratch) are posted ahead: all of
// them while their scratch stays within ringScratchMax, at least 2.
func ringWindow(rs, chunk int) int {
	w := rs
	if chunk > 0 {
		w = min(w, ringScratchMax/chunk)
	}
	return max(1, min(rs, max(w, 2)))
}
