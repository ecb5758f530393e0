package libgodist

// broadcastTreeMin: with more than 2 ranks, buffers larger than this go
// through the tree of broadcast_pipelined.go, which sends to all of a
// rank's children at once, each once it has posted its receive. Below it
// the plain tree here was as fast (2 MiB at 8 ranks over sockets).
// A variable so tests can make it small.
var broadcastTreeMin = 4 << 20

// broadcastSegment is the piece that tree forwards as one message when
// the host's ranks outnumber its cores; 0 means the whole buffer. Over
// loopback sockets with 3, 4 and 8 ranks on 2 cores, whole buffers did
// better than 4 MiB segments from 32 MiB up (each segment costs every rank
// wake-ups and thread hand-offs, and a rank's children already overlap
// with the other ranks' copies) and no worse at 8 MiB. A variable so tests
// can make it small.
var broadcastSegment = 0

// broadcastSpareSegment is that piece when every rank has a core
// (comm.allSpare): then a rank forwarding one segment while it receives the
// next keeps cores busy that would otherwise wait. With 8 ranks on 16
// cores a 64 MiB broadcast took 24-25 ms in 4 MiB segments against 37-40
// ms whole (gloo: 51-58 ms); with 4 ranks 20-22 against 36-38 ms (gloo:
// 38-40 ms). A variable so tests can make it small.
var broadcastSpareSegment = 4 << 20

// broadcast sends root's buf to every rank along a binomial tree: in the
// numbering relative to the root, rank v receives from v minus its lowest
// set bit and then sends to v+2^j for each lower power of two.
//
// Steps: ceil(log2 P); the root sends the whole buffer ceil(log2 P) times.
func broadcast(c *comm, buf []byte, root int) error {
	if c.arena != nil {
		return c.arena.Broadcast(c.ctx, buf, root)
	}
	n := c.size
	if n > 2 && len(buf) > broadcastTreeMin {
		return broadcastPipelined(c, buf, root, broadcastSeg(c, len(buf)))
	}
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

// broadcastSeg is the segment size of broadcastPipelined for a buffer of
// size bytes (at least 1, at most size unless size is 0). It depends only
// on what every rank agrees on, since a child posts its receives in the
// same segments as its parent sends.
func broadcastSeg(c *comm, size int) int {
	seg := broadcastSegment
	if c.allSpare {
		seg = broadcastSpareSegment
	}
	if seg <= 0 || seg > size {
		seg = size
	}
	return max(seg, 1)
}
