package shm

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSpreadMovesOffSharedCPU: a rank whose lower-ranked peer last ran on
// the CPU it runs on moves to another CPU of its affinity, and its
// affinity is what it was; with the peer elsewhere it stays put; and the
// check runs at most once per spreadEvery.
func TestSpreadMovesOffSharedCPU(t *testing.T) {
	var orig cpuMask
	if !getAffinity(&orig) || orig.count() < 2 {
		t.Skip("needs a thread affinity of two CPUs or more")
	}
	arenas := openGroup(t, 2, nil)
	defer closeAll(arenas)
	a := arenas[1]
	a.spr.on = true // in-process ranks turn it off

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu, ok := currentCPU()
	require.True(t, ok)

	// The peer (rank 0) on another CPU: no move.
	other := (cpu + 1) % 1024
	arenas[0].publishCPU(other)
	a.spread(time.Now())
	require.Zero(t, a.spr.n.Load())
	require.Equal(t, uint32(cpu+1), a.loadCPU(1), "published its CPU")

	// Within spreadEvery nothing happens, even with a clash.
	now, _ := currentCPU()
	arenas[0].publishCPU(now)
	a.spread(time.Now())
	require.Zero(t, a.spr.n.Load())

	// Later, the clash moves this thread off the peer's CPU.
	a.spread(time.Now().Add(2 * spreadEvery))
	require.Equal(t, int64(1), a.spr.n.Load())
	after, _ := currentCPU()
	require.NotEqual(t, now, after, "still on the peer's CPU")
	var m cpuMask
	require.True(t, getAffinity(&m))
	require.Equal(t, orig, m, "affinity not restored")

	// Rank 0 never moves for rank 1: only the higher rank of a pair does.
	arenas[0].spr.on = true
	arenas[1].publishCPU(after)
	arenas[0].spread(time.Now().Add(4 * spreadEvery))
	require.Zero(t, arenas[0].spr.n.Load())
}

// TestSpreadOnlyWhenRanksFitCPUs: the default policy spreads only when
// every local rank can have a CPU.
func TestSpreadOnlyWhenRanksFitCPUs(t *testing.T) {
	require.False(t, DefaultWaitPolicy(1).Spread)
	require.Equal(t, 2 <= runtime.NumCPU(), DefaultWaitPolicy(2).Spread)
	require.False(t, DefaultWaitPolicy(runtime.NumCPU()+1).Spread)
}
