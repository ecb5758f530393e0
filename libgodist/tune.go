package libgodist

// Tuning holds the sizes at which a group switches algorithms. Every rank
// of a group must hold the same values: they decide what goes on the wire
// and how messages are cut. A group takes DefaultTuning unless its Config
// names another (tests shrink the sizes so small inputs take every path).
type Tuning struct {
	// AllReduceRDMax is the largest all-reduce (bytes) done by recursive
	// doubling; larger ones take a ring.
	AllReduceRDMax int
	// RingSegment is the largest piece a ring step sends as one message.
	RingSegment int
	// RingDirectMax is the largest chunk (bytes) of a ring all-reduce run
	// on the caller's thread (allreduce_ring_direct.go) while the host's
	// ranks fit its cores; larger chunks take the pipelined ring.
	// RingDirectPairMax is the same for two ranks, where each phase of
	// the ring is a single exchange.
	RingDirectMax, RingDirectPairMax int
	// BroadcastTreeMin: with more than 2 ranks, broadcasts larger than
	// this take the pipelined tree (broadcast_pipelined.go).
	BroadcastTreeMin int
	// BroadcastSegment is the piece that tree forwards as one message
	// when some host's ranks outnumber its cores, BroadcastSpareSegment
	// when every rank has a core; 0 means the whole buffer.
	BroadcastSegment, BroadcastSpareSegment int
}

// DefaultTuning returns the sizes godist ships with, measured over
// loopback TCP on 2 and 16 cores (docs/algorithms.md).
func DefaultTuning() Tuning {
	return Tuning{
		AllReduceRDMax:        64 << 10,
		RingSegment:           4 << 20,
		RingDirectMax:         1 << 20,
		RingDirectPairMax:     4 << 20,
		BroadcastTreeMin:      4 << 20,
		BroadcastSegment:      0,
		BroadcastSpareSegment: 4 << 20,
	}
}

// segmentSize is RingSegment rounded down to whole elements of es bytes,
// never less than one element.
func (t *Tuning) segmentSize(es int) int {
	return max(t.RingSegment-t.RingSegment%es, es)
}

// allReduceAlgo is the algorithm an all-reduce of count elements of es
// bytes takes on n ranks without an offload; spare says whether this
// host's ranks fit its cores.
func (t *Tuning) allReduceAlgo(count, es, n int, spare bool) algo {
	switch {
	case count*es <= t.AllReduceRDMax || count < n:
		return algoRecursiveDoubling
	case t.ringDirect(count, es, n, spare):
		return algoRingDirect
	default:
		return algoRing
	}
}

// ringDirect reports whether a ring all-reduce runs allReduceRingDirect:
// when each chunk fits in one segment and, while the host's ranks fit its
// cores (spare), is at most RingDirectMax (RingDirectPairMax on two
// ranks). With more ranks than cores the pipelined ring's sender goroutine
// only adds hand-offs between threads: with one segment a step it has
// nothing to overlap, and the other ranks keep the cores busy anyway.
func (t *Tuning) ringDirect(count, es, n int, spare bool) bool {
	chunk := (count + n - 1) / n * es
	limit := t.RingDirectMax
	if n == 2 {
		limit = t.RingDirectPairMax
	}
	if !spare {
		limit = t.segmentSize(es)
	}
	return chunk <= limit && chunk <= t.segmentSize(es)
}

// broadcastAlgo is the algorithm a broadcast of nbytes takes on n ranks
// without an offload.
func (t *Tuning) broadcastAlgo(nbytes, n int) algo {
	if n > 2 && nbytes > t.BroadcastTreeMin {
		return algoTreePipelined
	}
	return algoTree
}

// broadcastSeg is the segment size of broadcastPipelined for a buffer of
// size bytes (at least 1, at most size unless size is 0). It depends only
// on what every rank agrees on (allSpare is computed from every rank's
// rendezvous record), since a child posts its receives in the same
// segments as its parent sends.
func (t *Tuning) broadcastSeg(size int, allSpare bool) int {
	seg := t.BroadcastSegment
	if allSpare {
		seg = t.BroadcastSpareSegment
	}
	if seg <= 0 || seg > size {
		seg = size
	}
	return max(seg, 1)
}

// algo names an algorithm a collective can take.
type algo int

const (
	algoRecursiveDoubling algo = iota // allreduce_rd.go
	algoRingDirect                    // allreduce_ring_direct.go
	algoRing                          // allreduce_ring.go (pipelined)
	algoTree                          // broadcast_tree.go
	algoTreePipelined                 // broadcast_pipelined.go
)
