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
