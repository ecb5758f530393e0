package algo

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBroadcastSeg(t *testing.T) {
	tune := Default()
	tune.BroadcastSegment, tune.BroadcastSpareSegment = 0, 4<<20
	require.Equal(t, 64<<20, tune.TreeSegment(64<<20, false), "whole buffer when ranks outnumber cores")
	require.Equal(t, 4<<20, tune.TreeSegment(64<<20, true), "segments with a core per rank")
	require.Equal(t, 3<<20, tune.TreeSegment(3<<20, true), "never more than the buffer")
	require.Equal(t, 1, tune.TreeSegment(0, false))
	tune.BroadcastSegment = 1000
	require.Equal(t, 1000, tune.TreeSegment(64<<20, false))
}

func TestAlgoChoice(t *testing.T) {
	tune := Default()
	require.Equal(t, RecursiveDoubling, tune.AllReduce(64<<10/4, 4, 4, true), "up to AllReduceRDMax")
	require.Equal(t, RecursiveDoubling, tune.AllReduce(3, 1<<20, 4, true), "fewer elements than ranks")
	require.Equal(t, RingDirect, tune.AllReduce(64<<10/4+1, 4, 4, true))
	require.Equal(t, Ring, tune.AllReduce(64<<20/4, 4, 4, true))
	require.Equal(t, Tree, tune.Broadcast(64<<20, 2), "two ranks: one send")
	require.Equal(t, Tree, tune.Broadcast(4<<20, 3))
	require.Equal(t, TreePipelined, tune.Broadcast(4<<20+1, 3))
}

func TestSegmentSize(t *testing.T) {
	tune := Default()
	tune.RingSegment = 10
	require.Equal(t, 8, tune.SegmentSize(4))
	require.Equal(t, 8, tune.SegmentSize(8))
	require.Equal(t, 16, tune.SegmentSize(16)) // never less than one element
}

func TestRingDirectChoice(t *testing.T) {
	tune := Table{RingSegment: 4 << 20, RingDirectMax: 1 << 20, RingDirectPairMax: 4 << 20}
	for _, c := range []struct {
		count, es, n int
		spare, want  bool
		what         string
	}{
		{2 << 20 / 4, 4, 8, true, true, "2 MiB on 8 ranks: 256 KiB chunks"},
		{2 << 20 / 4, 4, 3, true, true, "2 MiB on 3 ranks: 683 KiB chunks"},
		{4 << 20 / 4, 4, 4, true, true, "4 MiB on 4 ranks: 1 MiB chunks"},
		{4<<20/4 + 1, 4, 4, true, false, "a chunk one element over"},
		{4 << 20 / 4, 4, 3, true, false, "4 MiB on 3 ranks: 1.3 MiB chunks"},
		{8 << 20 / 4, 4, 8, true, true, "8 MiB on 8 ranks: 1 MiB chunks"},
		{16 << 20 / 4, 4, 4, true, false, "16 MiB on 4 ranks: 4 MiB chunks"},
		{64 << 20 / 4, 4, 16, true, false, "64 MiB on 16 ranks: 4 MiB chunks"},
		// Two ranks: up to a whole segment.
		{2 << 20 / 4, 4, 2, true, true, "2 MiB on 2 ranks: 1 MiB chunks"},
		{8 << 20 / 4, 4, 2, true, true, "8 MiB on 2 ranks: 4 MiB chunks"},
		{8 << 20 / 2, 2, 2, true, true, "8 MiB of 2-byte elements on 2 ranks"},
		{8<<20/4 + 1, 4, 2, true, false, "a chunk one element over"},
		{16 << 20 / 4, 4, 2, true, false, "16 MiB on 2 ranks: 8 MiB chunks"},
		// More ranks than cores: up to a whole segment at any size.
		{16 << 20 / 4, 4, 4, false, true, "16 MiB on 4 ranks: 4 MiB chunks"},
		{32 << 20 / 4, 4, 8, false, true, "32 MiB on 8 ranks: 4 MiB chunks"},
		{32 << 20 / 4, 4, 4, false, false, "32 MiB on 4 ranks: 8 MiB chunks"},
		{16<<20/4 + 1, 4, 4, false, false, "a chunk one element over"},
	} {
		require.Equal(t, c.want, tune.ringDirect(c.count, c.es, c.n, c.spare), c.what)
	}
	tune.RingSegment = 4000
	require.False(t, tune.ringDirect(2<<20/4, 4, 8, true), "chunks over a segment go through the pipeline")
	require.False(t, tune.ringDirect(8008/4, 4, 2, true), "on 2 ranks too: 4004-byte chunks")
	require.False(t, tune.ringDirect(8008/4, 4, 2, false), "and with more ranks than cores")
}

func TestShmChoice(t *testing.T) {
	tab := Default()
	require.Equal(t, 64<<10, tab.ShmOneShot(2))
	require.Equal(t, 16<<10, tab.ShmOneShot(4))
	require.Equal(t, 8<<10, tab.ShmOneShot(8))
	require.Equal(t, 8<<10, tab.ShmOneShot(64), "never below 8 KiB")
	require.Equal(t, ShmOneShot, ShmAllReduce(64<<10, tab.ShmOneShot(2)))
	require.Equal(t, ShmTwoShot, ShmAllReduce(64<<10+1, tab.ShmOneShot(2)))
	tab.ShmOneShotMax = -1
	require.Equal(t, -1, tab.ShmOneShot(2))
	require.Equal(t, ShmTwoShot, ShmAllReduce(0, tab.ShmOneShot(2)), "never one-shot")
	tab.ShmOneShotMax = 1000
	require.Equal(t, 1000, tab.ShmOneShot(8), "an explicit limit holds at any size")

	tab = Default()
	direct := tab.ShmDirect()
	require.Equal(t, 64<<10, direct)
	require.Equal(t, ShmDirectCopy, ShmAllToAll(direct, 4, direct, true))
	require.Equal(t, ShmSlots, ShmAllToAll(direct-1, 4, direct, true))
	require.Equal(t, ShmSlots, ShmAllToAll(direct, 4, direct, false), "ranks that cannot read each other")
	require.Equal(t, ShmSlots, ShmAllToAll(direct, 1, direct, true))
	require.Equal(t, ShmSharedCopy, tab.ShmBroadcast(1<<20, 2, direct, true))
	require.Equal(t, ShmBroadcast, tab.ShmBroadcast(1<<20-1, 2, direct, true))
	require.Equal(t, ShmBroadcast, tab.ShmBroadcast(1<<20, 3, direct, true), "two ranks only")
	require.Equal(t, ShmBroadcast, tab.ShmBroadcast(1<<20, 2, direct, false))
	require.Equal(t, ShmBroadcast, tab.ShmBroadcast(8<<20, 2, 16<<20, true), "under the single-copy threshold")
	tab.ShmDirectMin = 0
	require.Equal(t, -1, tab.ShmDirect())
	require.Equal(t, ShmSlots, ShmAllToAll(64<<20, 2, tab.ShmDirect(), true), "single copy off")
}

func TestHierChoice(t *testing.T) {
	tab := Default()
	min := tab.HierShardMin
	require.Equal(t, HierSharded, tab.HierAllReduce(min/4, 4, 2, true))
	require.Equal(t, HierLeaders, tab.HierAllReduce(min/4-1, 4, 2, true), "below the shard size")
	require.Equal(t, HierLeaders, tab.HierAllReduce(min/4, 4, 2, false), "uneven hosts")
	require.Equal(t, HierLeaders, tab.HierAllReduce(min/4, 4, 1, true), "one rank a host")
	require.Equal(t, HierLeaders, tab.HierAllReduce(3, min, 4, true), "fewer elements than ranks on a host")
	require.Equal(t, HierSharded, tab.HierBroadcast(min, 2, true))
	require.Equal(t, HierLeaders, tab.HierBroadcast(min-1, 2, true))
	require.Equal(t, CrossSmall, tab.HierCross(tab.HierCrossSmallMax/4, 4, 3))
	require.Equal(t, CrossRing, tab.HierCross(tab.HierCrossSmallMax/4+1, 4, 3))
	require.Equal(t, CrossSmall, tab.HierCross(2, 1<<20, 3), "fewer elements than hosts")
}

func TestNames(t *testing.T) {
	for a := RecursiveDoubling; a <= CrossRing; a++ {
		require.NotEqual(t, "unknown", a.String(), "algorithm %d has no name", int(a))
	}
	require.Equal(t, "unknown", Algo(0).String())
}

func TestDescribe(t *testing.T) {
	tab := Default()
	require.Equal(t, "all_reduce: recursive doubling up to 64 KiB, then ring (direct while a chunk is at most 4 MiB, "+
		"pipelined above); broadcast: binomial tree", tab.DescribeEngine(2, true))
	require.Contains(t, tab.DescribeEngine(3, false), "at most 4 MiB, pipelined above); broadcast: binomial tree, "+
		"pipelined tree above 4 MiB")
	require.Equal(t, "all_reduce: one-shot up to 64 KiB, two-shot above; broadcast: chunked copy, shared single copy "+
		"from 1 MiB; all_to_all: chunked copy, single copy from 64 KiB",
		tab.DescribeShm(2, tab.ShmOneShot(2), tab.ShmDirect(), true))
	require.Equal(t, "all_reduce: two-shot; broadcast: chunked copy; all_to_all: chunked copy",
		tab.DescribeShm(4, -1, tab.ShmDirect(), false))
	require.Equal(t, "all_reduce and broadcast: through the hosts' lowest ranks below 256 KiB, sharded across hosts "+
		"from there; between hosts: one exchange among hosts up to 64 KiB, ring among hosts above",
		tab.DescribeHier(2, true))
	require.True(t, strings.HasPrefix(tab.DescribeHier(2, false), "all_reduce and broadcast: through the hosts' lowest ranks;"))
	require.Equal(t, "3 B", Size(3))
	require.Equal(t, "1.5 KiB", Size(1536))
	require.Equal(t, "28.4 KiB", Size(ShmOneShotDefault(3)))
	require.Equal(t, "4 MiB", Size(4<<20))
}
