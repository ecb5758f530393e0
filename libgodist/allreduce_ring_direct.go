package libgodist

import (
	"github.com/godist/godist/libgodist/scratch"
	"github.com/godist/godist/libgodist/transport"
)

// ringDirectMax is the largest chunk (bytes) of an all-reduce that
// allReduceRingDirect runs; larger ones take the pipelined ring. A variable
// so tests can move it.
//
// Small chunks: the pipelined ring (allreduce_ring.go) hands each step's
// data to a sender goroutine, and with one segment a step it has nothing to
// overlap, so the hand-offs only add latency. With a core per rank (16
// cores, loopback) a 2 MiB all-reduce took 0.77-0.80 / 1.37-1.40 /
// 1.97-1.98 ms run directly at 2 / 4 / 8 ranks, against 1.22-1.27 /
// 1.66-1.76 / 3.37-3.59 ms pipelined (gloo: 1.0-1.2 / 1.6-1.8 / 2.5-2.8
// ms). Larger chunks: at 8 MiB the direct ring was ahead at 2 ranks (4 MiB
// chunks; 3.3-3.5 against 3.7-3.9 ms), behind at 4 (2 MiB chunks; 5.4
// against 4.3-4.7 ms) and even at 8 (1 MiB chunks); at 64 MiB it lost at
// 2, 4 and 8 ranks (38 against 31-32 ms, 48 against 33-35, 64 against
// 54-60). On 2 cores the two tied from 2 to 64 MiB at 2, 4 and 8 ranks.
var ringDirectMax = 1 << 20

// ringDirectPairMax is ringDirectMax for two ranks, where each phase of the
// ring is a single exchange: the pipelined ring's hand-offs then buy nothing
// up to a whole segment. Measured with the rings posting their receives
// ahead, over TCP, alternating with gloo: 8 MiB at 2 ranks (4 MiB chunks)
// took 2.8-3.1 ms direct against 3.4-4.1 ms pipelined on 16 cores (gloo
// 3.3-3.8), and 3.0-3.3 against 3.4-4.0 ms on 2 cores (6 MiB: 2.1-2.2
// against 2.4-3.0 ms), at less CPU. With 4 MiB chunks at 4 or 8 ranks the
// direct ring lost on 16 cores (16 MiB at 4 ranks: 9.2-12.2 ms against
// 7.0-8.8), and from 16 MiB at 2 ranks the two tied on 2 cores.
var ringDirectPairMax = 4 << 20

// ringDirect reports whether allReduce runs allReduceRingDirect for count
// elements of es bytes on n ranks: when each chunk fits in one segment and,
// while the host's ranks fit its cores (spare), is at most ringDirectMax
// (ringDirectPairMax on two ranks).
//
// With more ranks than cores the pipelined ring's sender goroutine only
// adds hand-offs between threads: with one segment a step it has nothing
// to overlap, and the other ranks keep the cores busy anyway. 4 ranks on
// 2 cores (Intel guest), 8 MiB (2 MiB chunks) over TCP: 11.0-12.6 ms per
// op direct against 12.2-14.7 pipelined, 16 voluntary context switches
// per op and rank against 30-32 (gloo 13.9 ms); 8 ranks, 32 MiB (4 MiB
// chunks): 117-130 against 135-148 ms (gloo 132).
func ringDirect(count, es, n int, spare bool) bool {
	chunk := (count + n - 1) / n * es
	limit := ringDirectMax
	if n == 2 {
		limit = ringDirectPairMax
	}
	if !spare {
		limit = segmentSize(es)
	}
	return chunk <= limit && chunk <= segmentSize(es)
}

// directAheadMax bounds the scratch (bytes) of the reduce-scatter receives
// allReduceRingDirect posts ahead of their step.
const directAheadMax = 8 << 20

// allReduceRingDirect is the ring of allreduce_ring.go (reduce-scatter, then
// allgather; same chunks, same order of additions) with one whole chunk a
// step, sent from the caller's thread: each step sends to the right
// neighbour and then waits for the left one's chunk. While the caller is
// in its send, its peer's reader goroutine takes the incoming chunk, so
// the two directions still overlap.
//
// Every receive is posted as early as its buffer allows: the
// reduce-scatter's at the start, folding into their chunks as the bytes
// land (see allReduceRing; without ringFold into scratch chunks of their
// own, up to directAheadMax bytes ahead), and allgather
// step k's into chunk r-k as soon as reduce-scatter step k has sent it. A
// left neighbour that runs steps ahead (ranks that share cores are
// descheduled anywhere) then sends into the final place, not into an
// unexpected-message buffer that the later receive copies out of. Posting
// each step's receive only when the step began, 8 MiB at 8 ranks on 2
// cores spent ~5% of its CPU in those copies (Mailbox.Post's memmove);
// posted ahead, loops alternating with gloo went from x0.98-x1.05 to
// x1.06-x1.26 of its speed, and godist's CPU per op from 0.98-1.02 of
// gloo's to 0.79-0.91.
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
	// The reduce-scatter's receives: with ringFold each folds into its
	// chunk as it lands, all posted now (chunk r-k-1 is sent only in step
	// k+1); else they land in scratch chunks, ahead steps of them.
	var in func(k int) []byte // reduce-scatter step k's scratch chunk
	ahead := n - 1
	if ringFold {
		for k := 0; k < n-1; k++ {
			rs[k] = c.postFold(left, uint16(k), ch.at(r-k-1), s)
		}
	} else {
		m := ch.max()
		ahead = min(n-1, max(1, directAheadMax/max(m, 1)))
		tmp := scratch.Get(ahead * m)
		defer func() {
			if err == nil { // after a failure, let the collector have it
				scratch.Put(tmp)
			}
		}()
		in = func(k int) []byte {
			o := k % ahead * m
			return tmp[o : o+len(ch.at(r-k-1))]
		}
		for k := 0; k < ahead; k++ {
			rs[k] = c.post(left, uint16(k), in(k))
		}
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
		if in == nil {
			continue // folded in as it arrived
		}
		if err := s.combine(ch.at(r-k-1), in(k)); err != nil {
			return err
		}
		if k+ahead < n-1 {
			rs[k+ahead] = c.post(left, uint16(k+ahead), in(k+ahead))
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
