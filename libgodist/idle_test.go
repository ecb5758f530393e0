package libgodist

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/internal/testutil"
)

// goroutineStates maps each goroutine's stack dump to the state in its
// header ("IO wait", "select", "syscall", ...).
func goroutineStates() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		i, j := strings.Index(head, "["), strings.Index(head, "]")
		if i < 0 || j < i {
			continue
		}
		state, _, _ := strings.Cut(head[i+1:j], ",")
		out[g] = state
	}
	return out
}

// TestIdleGroupWaitsParked: while a group is idle, its background
// goroutines that may wait for as long as the group lives (the TCP reader
// of each peer, the shared-memory receiver, the control loop answering
// progress queries) are parked, not asleep in a system call. A goroutine in a system call keeps its P,
// and the runtime's monitor takes back a P held 10 ms in one call, then
// polls every 20 µs again: idle groups kept it (and the CPU) busy.
func TestIdleGroupWaitsParked(t *testing.T) {
	for _, tr := range []string{assemble.TransportAuto, assemble.TransportTCP} {
		t.Run(fmt.Sprintf("transport=%q", tr), func(t *testing.T) {
			pgs := connectGroup(t, 3, tr, nil)
			errs := onAll(t, pgs, func(_ int, pg *ProcessGroup) (*Work, error) { return pg.Barrier(Opts{}) })
			requireAllOK(t, errs)
			// Look once the TCP readers are past their rest after the last
			// waiter (linger) and, within a deadline, until nothing is
			// awake: the shared-memory receiver sleeps in futex(2) for a
			// while before it parks.
			var bad []string
			var found map[string]int
			testutil.WaitUntil(10*time.Second, func() bool {
				bad, found = bad[:0], map[string]int{}
				resting := false
				for stack, state := range goroutineStates() {
					resting = resting || strings.Contains(stack, "tcp.(*peer).rest(")
					for _, fn := range []string{"libgodist.(*ProcessGroup).controlLoop", "tcp.(*peer).readLoop", "shm.(*Arena).recvLoop"} {
						if !strings.Contains(stack, fn) {
							continue
						}
						found[fn]++
						if state == "syscall" || state == "running" || state == "runnable" {
							bad = append(bad, state+": "+stack)
						}
					}
				}
				return !resting && len(bad) == 0
			})
			require.Equal(t, 3, found["libgodist.(*ProcessGroup).controlLoop"])
			if tr == assemble.TransportTCP {
				require.Equal(t, 6, found["tcp.(*peer).readLoop"])
			} else {
				require.Equal(t, 3, found["shm.(*Arena).recvLoop"])
			}
			require.Empty(t, bad)
		})
	}
}
