package algo

// Algo names an algorithm a collective can take. Each lives in one file,
// named beside it.
type Algo int

const (
	// The engine's, over the transport (libgodist).
	RecursiveDoubling    Algo = iota + 1 // allreduce_rd.go
	RingDirect                           // allreduce_ring_direct.go
	Ring                                 // allreduce_ring.go (pipelined)
	Tree                                 // broadcast_tree.go
	TreePipelined                        // broadcast_pipelined.go
	AllGatherRing                        // allgather_ring.go
	ReduceScatterRing                    // reduce_scatter_ring.go
	AllToAllPairwise                     // alltoall_pairwise.go
	BarrierDissemination                 // barrier_dissemination.go

	// The shared-memory arena's (backends/shm).
	ShmOneShot     // allreduce_oneshot.go
	ShmTwoShot     // allreduce_twoshot.go
	ShmBroadcast   // broadcast.go: chunks through the root's slots
	ShmSharedCopy  // broadcast_shared.go: both ranks copy from the root's memory
	ShmSlots       // allgather.go, reducescatter.go, alltoall.go: chunks through every rank's slots
	ShmDirectCopy  // alltoall.go: each rank reads its blocks from the senders' memory
	ShmFlagBarrier // barrier.go

	// The hierarchical offload's (backends/hier).
	HierSharded // host stage, L shards across hosts in parallel, host stage
	HierLeaders // host stage, the hosts' lowest ranks, host stage
	CrossSmall  // cross.go: whole buffers exchanged among hosts, one round
	CrossRing   // cross.go: a ring among hosts
)

var names = map[Algo]string{
	RecursiveDoubling: "recursive doubling", RingDirect: "ring (direct)", Ring: "ring (pipelined)",
	Tree: "binomial tree", TreePipelined: "pipelined tree", AllGatherRing: "ring", ReduceScatterRing: "ring",
	AllToAllPairwise: "pairwise exchange", BarrierDissemination: "dissemination",
	ShmOneShot: "one-shot", ShmTwoShot: "two-shot", ShmBroadcast: "chunked copy", ShmSharedCopy: "shared single copy",
	ShmSlots: "chunked copy", ShmDirectCopy: "single copy", ShmFlagBarrier: "flags",
	HierSharded: "sharded across hosts", HierLeaders: "through the hosts' lowest ranks",
	CrossSmall: "one exchange among hosts", CrossRing: "ring among hosts",
}

// String names the algorithm as the INFO log line and godist.topology()
// write it.
func (a Algo) String() string {
	if n, ok := names[a]; ok {
		return n
	}
	return "unknown"
}

// The engine, over the transport: used when the group has no offload, or
// the offload declines the op.

// AllReduce is the algorithm an all-reduce of count elements of es bytes
// takes on n ranks; spare says whether this host's ranks fit its cores.
// Recursive doubling moves the whole buffer log2(n) times at the lowest
// latency; the ring moves 2(n-1)/n of it.
func (t *Table) AllReduce(count, es, n int, spare bool) Algo {
	switch {
	case count*es <= t.AllReduceRDMax || count < n:
		return RecursiveDoubling
	case t.ringDirect(count, es, n, spare):
		return RingDirect
	default:
		return Ring
	}
}

// ringDirect: a ring all-reduce runs on the caller's thread when each
// chunk fits one segment and, while the host's ranks fit its cores, is at
// most RingDirectMax (RingDirectPairMax on two ranks). With more ranks
// than cores the pipelined ring's sender goroutine only adds hand-offs:
// with one segment a step it has nothing to overlap.
func (t *Table) ringDirect(count, es, n int, spare bool) bool {
	chunk := (count + n - 1) / n * es
	limit := t.RingDirectMax
	if n == 2 {
		limit = t.RingDirectPairMax
	}
	if !spare {
		limit = t.SegmentSize(es)
	}
	return chunk <= limit && chunk <= t.SegmentSize(es)
}

// SegmentSize is RingSegment rounded down to whole elements of es bytes,
// never less than one element.
func (t *Table) SegmentSize(es int) int {
	return max(t.RingSegment-t.RingSegment%es, es)
}

// Broadcast is the algorithm a broadcast of nbytes takes on n ranks.
func (t *Table) Broadcast(nbytes, n int) Algo {
	if n > 2 && nbytes > t.BroadcastTreeMin {
		return TreePipelined
	}
	return Tree
}

// TreeSegment is the pipelined tree's segment for a broadcast of size
// bytes (at least 1, at most size unless size is 0). It depends only on
// what every rank agrees on (allSpare comes from every rank's rendezvous
// record), since a child posts its receives in the segments its parent
// sends.
func (t *Table) TreeSegment(size int, allSpare bool) int {
	seg := t.BroadcastSegment
	if allSpare {
		seg = t.BroadcastSpareSegment
	}
	if seg <= 0 || seg > size {
		seg = size
	}
	return max(seg, 1)
}

// The shared-memory arena of one host's ranks. Its limits are the
// arena's (written by the rank that creates it): oneShot is
// ShmOneShot(size) and direct ShmDirect() as the arena holds them, and
// canRead says whether the ranks can read each other's memory.

// ShmAllReduce is the arena's all-reduce of nbytes: one-shot (every rank
// reduces every rank's slot, one synchronization) up to oneShot, two-shot
// (each rank reduces 1/size of each chunk, then all gather) above.
// (Single copy loses here: reading a peer's memory runs at a quarter of
// memmove's speed, and an all-reduce reads the buffer twice.)
func ShmAllReduce(nbytes, oneShot int) Algo {
	if nbytes <= oneShot {
		return ShmOneShot
	}
	return ShmTwoShot
}

// ShmBroadcast is the arena's broadcast of nbytes on size local ranks:
// on two ranks that can read each other's memory, from
// ShmSharedBroadcastMin (and the single-copy threshold), both ranks copy
// half of the buffer from the root's memory; otherwise chunks go through
// the root's slots.
func (t *Table) ShmBroadcast(nbytes, size, direct int, canRead bool) Algo {
	if size == 2 && nbytes >= t.ShmSharedBroadcastMin && ShmAllToAll(nbytes, size, direct, canRead) == ShmDirectCopy {
		return ShmSharedCopy
	}
	return ShmBroadcast
}

// ShmAllToAll is the arena's all-to-all whose largest block is maxBlock
// bytes: single copy from the threshold on when the ranks can read each
// other's memory, chunks through every rank's slots otherwise.
func ShmAllToAll(maxBlock, size, direct int, canRead bool) Algo {
	if canRead && size > 1 && direct >= 0 && maxBlock >= direct {
		return ShmDirectCopy
	}
	return ShmSlots
}

// The hierarchical offload, for groups with several ranks on some of
// several hosts: L is this host's number of ranks, even says whether
// every host has the same number.

// HierAllReduce is the algorithm of an all-reduce of count elements of es
// bytes: from HierShardMin in an even group, L shards cross hosts in
// parallel (each host sends 2(H-1)/H of the buffer in all); otherwise the
// host's lowest rank alone crosses, which saves the host stages' extra
// synchronization.
func (t *Table) HierAllReduce(count, es, L int, even bool) Algo {
	if even && L > 1 && count*es >= t.HierShardMin && count >= L {
		return HierSharded
	}
	return HierLeaders
}

// HierBroadcast is the algorithm of a broadcast of nbytes, split the same
// way as HierAllReduce.
func (t *Table) HierBroadcast(nbytes, L int, even bool) Algo {
	if even && L > 1 && nbytes >= t.HierShardMin {
		return HierSharded
	}
	return HierLeaders
}

// HierCross is the all-reduce among members (one rank per host) of count
// elements of es bytes: whole buffers in one round, each member reducing
// in host order, up to HierCrossSmallMax (or with fewer elements than
// members); a ring above.
func (t *Table) HierCross(count, es, members int) Algo {
	if count*es <= t.HierCrossSmallMax || count < members {
		return CrossSmall
	}
	return CrossRing
}
