package shm

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitDoesNotBurnCPU: ranks waiting a long time for a late peer sleep
// on futexes after the bounded spin and yield phases, so the process uses
// a small fraction of a core while they wait.
func TestWaitDoesNotBurnCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs getrusage")
	}
	for _, P := range []int{2, 8} {
		t.Run(fmt.Sprintf("P%d", P), func(t *testing.T) {
			arenas := openGroup(t, P, nil)
			ctx := testCtx(t, 10*time.Second)
			const late = 300 * time.Millisecond
			cpu0, start := cpuTime(), time.Now()
			requireAllOK(t, onAll(arenas, func(r int, a *Arena) error {
				if r == P-1 {
					time.Sleep(late)
				}
				return a.Barrier(ctx)
			}), "barrier")
			wall, cpu := time.Since(start), cpuTime()-cpu0
			t.Logf("%d ranks, one %v late: %v CPU in %v", P, late, cpu, wall)
			require.Less(t, cpu, wall/3, "waiters must sleep, not spin (spinning would cost ~2 cores)")
		})
	}
}

// TestDefaultSleepsStayUnderTakeBack: no sleep of the default policy lasts
// as long as the 10 ms after which the Go runtime's monitor takes the P of
// a goroutine in a system call (see WaitPolicy.Idle).
func TestDefaultSleepsStayUnderTakeBack(t *testing.T) {
	for _, size := range []int{1, 2, 3, 4, 8, 64} {
		p := DefaultWaitPolicy(size)
		require.NoError(t, p.check())
		for name, d := range map[string]time.Duration{"Sleep": p.Sleep, "Idle": p.Idle, "Liveness": p.Liveness} {
			require.LessOrEqual(t, d, maxSyscallSleep, "size %d: %s", size, name)
		}
		require.Less(t, maxSyscallSleep, 10*time.Millisecond)
	}
}
