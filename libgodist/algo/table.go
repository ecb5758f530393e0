// Package algo answers, in one place, which algorithm a collective takes
// for its op, size, element size and topology: the engine's algorithms
// over the transport (libgodist), the shared-memory arena's
// (backends/shm) and the hierarchical offload's (backends/hier) all ask
// a Table here instead of carrying thresholds of their own. A reader who
// wants to know what runs reads choose.go top to bottom; one who wants to
// change a threshold changes the Table.
//
// Every rank of a group must use the same Table: the choices decide what
// goes on the wire and how buffers are cut. The shared-memory arena's
// limits are also written into the arena by the rank that creates it, so
// the ranks of one host cannot disagree about them.
package algo

// Table holds the sizes (bytes) at which collectives switch algorithms.
// Default is what godist ships with; tests shrink the sizes so that small
// inputs take every path.
type Table struct {
	// The engine's algorithms over the transport (libgodist).

	// AllReduceRDMax is the largest all-reduce done by recursive
	// doubling; larger ones take a ring.
	AllReduceRDMax int
	// RingSegment is the largest piece a ring step sends as one message.
	RingSegment int
	// RingDirectMax is the largest chunk of a ring all-reduce run on the
	// caller's thread while the host's ranks fit its cores; larger chunks
	// take the pipelined ring. RingDirectPairMax is the same for two
	// ranks, where each phase of the ring is a single exchange.
	RingDirectMax, RingDirectPairMax int
	// BroadcastTreeMin: with more than two ranks, broadcasts larger than
	// this take the pipelined tree.
	BroadcastTreeMin int
	// BroadcastSegment is the piece the pipelined tree forwards as one
	// message when some host's ranks outnumber its cores,
	// BroadcastSpareSegment when every rank has a core; 0 means the
	// whole buffer.
	BroadcastSegment, BroadcastSpareSegment int

	// The shared-memory arena of one host's ranks (backends/shm).

	// ShmOneShotMax is the largest all-reduce done one-shot; 0 means
	// ShmOneShotDefault(local ranks), a negative value never.
	ShmOneShotMax int
	// ShmDirectMin is the smallest block moved by single copy (a rank
	// reading its peers' memory) by all_to_all, and by broadcast on two
	// ranks from ShmSharedBroadcastMin; 0 or less, never.
	ShmDirectMin int
	// ShmSharedBroadcastMin is the smallest broadcast on two ranks moved
	// by single copy, the receiver and the root each copying half.
	ShmSharedBroadcastMin int

	// The hierarchical offload of groups spanning hosts (backends/hier).

	// HierShardMin is the smallest all-reduce or broadcast split across a
	// host's ranks in an even group; below it, each host's lowest rank
	// alone talks to the other hosts.
	HierShardMin int
	// HierCrossSmallMax is the largest all-reduce between hosts done by
	// exchanging whole buffers in one round; larger ones go round a ring.
	HierCrossSmallMax int
}

// Default returns the sizes godist ships with. The engine's were measured
// over loopback TCP on 2 and 16 cores, the arena's on a 2-core VM
// (docs/algorithms.md).
func Default() Table {
	return Table{
		AllReduceRDMax:        64 << 10,
		RingSegment:           4 << 20,
		RingDirectMax:         1 << 20,
		RingDirectPairMax:     4 << 20,
		BroadcastTreeMin:      4 << 20,
		BroadcastSegment:      0,
		BroadcastSpareSegment: 4 << 20,

		ShmOneShotMax:         0,
		ShmDirectMin:          64 << 10,
		ShmSharedBroadcastMin: 1 << 20,

		HierShardMin:      256 << 10,
		HierCrossSmallMax: 64 << 10,
	}
}

// ShmOneShotDefault is the largest all-reduce done one-shot (every rank
// reduces every slot) on size local ranks; larger ones are two-shot (each
// rank reduces 1/size of each chunk). One-shot reads size*n bytes per
// rank against two-shot's ~3n and two more synchronizations, so the
// crossover falls roughly with size squared (measured on a 2-core VM:
// ~64 KiB at 2 ranks, ~16 KiB at 4, below 16 KiB at 8).
func ShmOneShotDefault(size int) int {
	size = max(size, 1)
	return min(max(256<<10/(size*size), 8<<10), 64<<10)
}

// ShmOneShot is the one-shot limit an arena of size local ranks takes
// (ShmOneShotMax with its default applied; -1 for never).
func (t *Table) ShmOneShot(size int) int {
	switch {
	case t.ShmOneShotMax == 0:
		return ShmOneShotDefault(size)
	case t.ShmOneShotMax < 0:
		return -1
	}
	return t.ShmOneShotMax
}

// ShmDirect is the single-copy threshold an arena takes (-1 for never).
func (t *Table) ShmDirect() int {
	if t.ShmDirectMin <= 0 {
		return -1
	}
	return t.ShmDirectMin
}
