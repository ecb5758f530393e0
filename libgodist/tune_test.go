package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBroadcastSeg(t *testing.T) {
	tune := DefaultTuning()
	tune.BroadcastSegment, tune.BroadcastSpareSegment = 0, 4<<20
	require.Equal(t, 64<<20, tune.broadcastSeg(64<<20, false), "whole buffer when ranks outnumber cores")
	require.Equal(t, 4<<20, tune.broadcastSeg(64<<20, true), "segments with a core per rank")
	require.Equal(t, 3<<20, tune.broadcastSeg(3<<20, true), "never more than the buffer")
	require.Equal(t, 1, tune.broadcastSeg(0, false))
	tune.BroadcastSegment = 1000
	require.Equal(t, 1000, tune.broadcastSeg(64<<20, false))
}

func TestAlgoChoice(t *testing.T) {
	tune := DefaultTuning()
	require.Equal(t, algoRecursiveDoubling, tune.allReduceAlgo(64<<10/4, 4, 4, true), "up to AllReduceRDMax")
	require.Equal(t, algoRecursiveDoubling, tune.allReduceAlgo(3, 1<<20, 4, true), "fewer elements than ranks")
	require.Equal(t, algoRingDirect, tune.allReduceAlgo(64<<10/4+1, 4, 4, true))
	require.Equal(t, algoRing, tune.allReduceAlgo(64<<20/4, 4, 4, true))
	require.Equal(t, algoTree, tune.broadcastAlgo(64<<20, 2), "two ranks: one send")
	require.Equal(t, algoTree, tune.broadcastAlgo(4<<20, 3))
	require.Equal(t, algoTreePipelined, tune.broadcastAlgo(4<<20+1, 3))
}

func TestSegmentSize(t *testing.T) {
	tune := DefaultTuning()
	tune.RingSegment = 10
	require.Equal(t, 8, tune.segmentSize(4))
	require.Equal(t, 8, tune.segmentSize(8))
	require.Equal(t, 16, tune.segmentSize(16)) // never less than one element
}
