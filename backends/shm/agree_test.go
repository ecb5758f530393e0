package shm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/transport"
)

// TestLateRankAfterPeersGaveUp: the other ranks time out before the last
// one enters the collective, after having published their contributions.
// The late rank must then fail too, at once, not complete the collective
// with its peers' abandoned contributions.
func TestLateRankAfterPeersGaveUp(t *testing.T) {
	for _, c := range collectives {
		for _, n := range []int{8, 5000} {
			t.Run(fmt.Sprintf("%s/%d", c.name, n), func(t *testing.T) {
				const P = 3
				arenas := openGroup(t, P, func(cfg *Config) { cfg.ChunkSize = testChunk })
				errs := onAll(arenas[:P-1], func(r int, a *Arena) error {
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					defer cancel()
					return c.run(ctx, a, n)
				})
				failed := errs[0] != nil || errs[1] != nil
				start := time.Now()
				late := c.run(testCtx(t, 5*time.Second), arenas[P-1], n)
				if !failed {
					// A broadcast's root and non-roots need nothing of the
					// late non-root.
					require.NoError(t, late)
					return
				}
				require.ErrorIs(t, late, transport.ErrAbandoned, "ranks failed with %v, %v", errs[0], errs[1])
				require.Less(t, time.Since(start), 2*time.Second)
				require.ErrorIs(t, c.run(context.Background(), arenas[P-1], n), ErrBroken)
			})
		}
	}
}

// TestAgreementRace: rank 0's all-reduce times out around the moment rank
// 1 enters it. Whichever comes first, the ranks agree: both complete or
// both fail.
func TestAgreementRace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	outcomes := map[bool]int{}
	for i := 0; i < 40; i++ {
		arenas := openGroup(t, 2, nil)
		const timeout = 2 * time.Millisecond
		delay := time.Duration(rng.Int64N(int64(2 * timeout)))
		errs := onAll(arenas, func(r int, a *Arena) error {
			d := time.Second
			if r == 0 {
				d = timeout
			} else {
				time.Sleep(delay)
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			return a.AllReduce(ctx, make([]byte, 64), 4, dtypeCases[0].combine)
		})
		require.Equal(t, errs[0] == nil, errs[1] == nil, "delay %v: rank 0: %v; rank 1: %v", delay, errs[0], errs[1])
		outcomes[errs[0] == nil]++
		closeAll(arenas)
	}
	t.Logf("completed %d times, failed %d times", outcomes[true], outcomes[false])
}
