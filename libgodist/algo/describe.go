package algo

import "fmt"

// The choices above, in words: what a group's INFO line and
// godist.topology() say its collectives take.

// DescribeEngine names the algorithms the engine's collectives take on n
// ranks over the transport; spare says whether this host's ranks fit its
// cores.
func (t *Table) DescribeEngine(n int, spare bool) string {
	direct := t.RingDirectMax
	if n == 2 {
		direct = t.RingDirectPairMax
	}
	if !spare {
		direct = t.RingSegment
	}
	bcast := Tree.String()
	if n > 2 {
		bcast += fmt.Sprintf(", %s above %s", TreePipelined, Size(t.BroadcastTreeMin))
	}
	return fmt.Sprintf("all_reduce: %s up to %s, then ring (direct while a chunk is at most %s, pipelined above); "+
		"broadcast: %s", RecursiveDoubling, Size(t.AllReduceRDMax), Size(direct), bcast)
}

// DescribeShm names the algorithms of an arena of size local ranks whose
// limits are oneShot and direct, canRead saying whether its ranks can
// read each other's memory.
func (t *Table) DescribeShm(size, oneShot, direct int, canRead bool) string {
	ar := ShmTwoShot.String()
	if oneShot >= 0 {
		ar = fmt.Sprintf("%s up to %s, %s above", ShmOneShot, Size(oneShot), ShmTwoShot)
	}
	bc := ShmBroadcast.String()
	if from := max(t.ShmSharedBroadcastMin, direct); t.ShmBroadcast(from, size, direct, canRead) == ShmSharedCopy {
		bc = fmt.Sprintf("%s, %s from %s", ShmBroadcast, ShmSharedCopy, Size(from))
	}
	a2a := ShmSlots.String()
	if ShmAllToAll(max(direct, 0), size, direct, canRead) == ShmDirectCopy {
		a2a = fmt.Sprintf("%s, %s from %s", ShmSlots, ShmDirectCopy, Size(direct))
	}
	return fmt.Sprintf("all_reduce: %s; broadcast: %s; all_to_all: %s", ar, bc, a2a)
}

// DescribeHier names the hierarchical offload's algorithms on hosts of L
// ranks (even: every host the same).
func (t *Table) DescribeHier(L int, even bool) string {
	ar := HierLeaders.String()
	if t.HierAllReduce(t.HierShardMin, 1, L, even) == HierSharded {
		ar = fmt.Sprintf("%s below %s, %s from there", HierLeaders, Size(t.HierShardMin), HierSharded)
	}
	return fmt.Sprintf("all_reduce and broadcast: %s; between hosts: %s up to %s, %s above", ar, CrossSmall,
		Size(t.HierCrossSmallMax), CrossRing)
}

// Size writes a byte count the short way: 64 KiB, 28.4 KiB.
func Size(n int) string {
	for _, u := range []struct {
		shift int
		name  string
	}{{20, "MiB"}, {10, "KiB"}} {
		switch {
		case n >= 1<<u.shift && n%(1<<u.shift) == 0:
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		case n >= 1<<u.shift:
			return fmt.Sprintf("%.1f %s", float64(n)/float64(int(1)<<u.shift), u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}
