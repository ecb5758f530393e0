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

// TestSpreadQuotaWhenRanksOutnumberCPUs: with the thread's affinity cut to
// two CPUs and four ranks, a CPU's share is two ranks. Rank 3 stays when
// one lower rank shares its CPU and moves to the other CPU when two do.
func TestSpreadQuotaWhenRanksOutnumberCPUs(t *testing.T) {
	var orig cpuMask
	if !getAffinity(&orig) || orig.count() < 2 {
		t.Skip("needs a thread affinity of two CPUs or more")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var two cpuMask
	var cpus []int
	for c := 0; c < len(orig)*64 && len(cpus) < 2; c++ {
		if orig[c/64]&(1<<(c%64)) != 0 {
			two[c/64] |= 1 << (c % 64)
			cpus = append(cpus, c)
		}
	}
	require.True(t, setAffinity(&two))
	defer setAffinity(&orig)

	arenas := openGroup(t, 4, nil)
	defer closeAll(arenas)
	a := arenas[3]
	a.spr.on = true // in-process ranks turn it off
	at := time.Now()
	check := func() {
		at = at.Add(2 * spreadEvery)
		a.spread(at)
	}
	here := func() (int, int) {
		cpu, ok := currentCPU()
		require.True(t, ok)
		if cpu == cpus[0] {
			return cpus[0], cpus[1]
		}
		return cpus[1], cpus[0]
	}

	// One lower rank on this CPU, one on the other: within the share.
	cpu, other := here()
	arenas[0].publishCPU(cpu)
	arenas[1].publishCPU(other)
	arenas[2].publishCPU(other)
	check()
	require.Zero(t, a.spr.n.Load())

	// Two lower ranks here, the third somewhere unknown: move to the other.
	cpu, other = here()
	arenas[0].publishCPU(cpu)
	arenas[1].publishCPU(-1) // unknown
	arenas[2].publishCPU(cpu)
	check()
	require.Equal(t, int64(1), a.spr.n.Load())
	after, _ := currentCPU()
	require.Equal(t, other, after)
	require.Equal(t, uint32(after+1), a.loadCPU(3), "published its new CPU")
	var m cpuMask
	require.True(t, getAffinity(&m))
	require.Equal(t, two, m, "affinity not restored")
}

// TestSpreadPolicy: the default policy spreads whenever there are two
// local ranks or more, whether or not they fit the CPUs.
func TestSpreadPolicy(t *testing.T) {
	require.False(t, DefaultWaitPolicy(1).Spread)
	require.True(t, DefaultWaitPolicy(2).Spread)
	require.True(t, DefaultWaitPolicy(runtime.NumCPU()+1).Spread)
}
