package shm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/transport"
)

// collective runs one collective of about n bytes per rank on a.
type collective struct {
	name string
	run  func(ctx context.Context, a *Arena, n int) error
}

var collectives = []collective{
	{"allreduce", func(ctx context.Context, a *Arena, n int) error {
		return a.AllReduce(ctx, make([]byte, n/4*4), 4, dtypeCases[0].combine)
	}},
	{"broadcast", func(ctx context.Context, a *Arena, n int) error { return a.Broadcast(ctx, make([]byte, n), 0) }},
	{"allgather", func(ctx context.Context, a *Arena, n int) error {
		outs := make([][]byte, a.Size())
		for i := range outs {
			outs[i] = make([]byte, n)
		}
		return a.AllGather(ctx, make([]byte, n), outs)
	}},
	{"reduce_scatter", func(ctx context.Context, a *Arena, n int) error {
		ins := make([][]byte, a.Size())
		for i := range ins {
			ins[i] = make([]byte, n/4*4)
		}
		return a.ReduceScatter(ctx, ins, make([]byte, n/4*4), 4, dtypeCases[0].combine)
	}},
	{"alltoall", func(ctx context.Context, a *Arena, n int) error {
		ins, outs := make([][]byte, a.Size()), make([][]byte, a.Size())
		for i := range ins {
			ins[i], outs[i] = make([]byte, n), make([]byte, n)
		}
		return a.AllToAll(ctx, ins, outs)
	}},
	{"barrier", func(ctx context.Context, a *Arena, n int) error { return a.Barrier(ctx) }},
}

// TestTimeoutWhenRankSkips: one rank never enters the collective; every
// other rank fails with ErrTimeout at its deadline, naming a rank, and the
// arena refuses later collectives.
func TestTimeoutWhenRankSkips(t *testing.T) {
	for _, c := range collectives {
		for _, n := range []int{8, 5000} {
			t.Run(fmt.Sprintf("%s/%d", c.name, n), func(t *testing.T) {
				const P = 3
				arenas := openGroup(t, P, func(cfg *Config) { cfg.ChunkSize = testChunk })
				start := time.Now()
				errs := onAll(arenas[:P-1], func(r int, a *Arena) error {
					ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
					defer cancel()
					return c.run(ctx, a, n)
				})
				require.Less(t, time.Since(start), 3*time.Second)
				for r, err := range errs {
					if c.name == "broadcast" && err == nil {
						// Only the root waits for the non-roots, and only
						// before reusing a slot half.
						continue
					}
					require.ErrorIs(t, err, transport.ErrTimeout, "rank %d", r)
					var pe *transport.PeerError
					require.ErrorAs(t, err, &pe)
					require.Equal(t, c.name, pe.Op)
					if c.name != "broadcast" {
						require.Equal(t, P-1, pe.Peer, "rank %d must name the missing rank", r)
					}
					later := c.run(context.Background(), arenas[r], n)
					require.ErrorIs(t, later, ErrBroken)
					require.ErrorIs(t, later, transport.ErrTimeout)
				}
			})
		}
	}
}

// TestDeadPeer: one rank aborts (as if its process died) or closes while
// the others wait for it in a collective with a long deadline; they fail
// within milliseconds, not at the deadline.
func TestDeadPeer(t *testing.T) {
	for _, how := range []string{"abort", "close"} {
		for _, c := range collectives {
			t.Run(how+"/"+c.name, func(t *testing.T) {
				const P = 4
				arenas := openGroup(t, P, func(cfg *Config) { cfg.ChunkSize = testChunk })
				ctx := testCtx(t, 60*time.Second)
				// The others wait for rank 2 (the broadcast's root may not).
				waiters := P - 1
				if c.name == "broadcast" {
					waiters = P - 2
				}
				var killed time.Time
				errs := onAll(arenas, func(r int, a *Arena) error {
					if r == 2 {
						// Asleep is the case that matters; a machine too busy
						// to get them there still checks that they notice.
						if !testutil.WaitUntil(20*time.Second, func() bool { return asleep(a) >= waiters }) {
							t.Logf("%d ranks asleep waiting, wanted %d", asleep(a), waiters)
						}
						killed = time.Now()
						if how == "abort" {
							a.Abort(errors.New("test"))
						} else {
							a.Close()
						}
						return nil
					}
					return c.run(ctx, a, 3000)
				})
				require.Less(t, time.Since(killed), 5*time.Second, "the others noticed the dead peer late")
				want := transport.ErrConnLost
				if how == "close" {
					want = transport.ErrPeerGone
				}
				for r, err := range errs {
					if r == 2 || c.name == "broadcast" && r == 0 {
						continue // the root may finish its copy-in without anyone
					}
					require.ErrorIs(t, err, want, "rank %d", r)
					var pe *transport.PeerError
					require.ErrorAs(t, err, &pe)
					require.Equal(t, 2, pe.Peer, "rank %d: %v", r, err)
				}
			})
		}
	}
}

// TestCloseWhileWaiting: Close on a rank fails its own pending collective
// with ErrClosed promptly and returns only after it has returned.
func TestCloseWhileWaiting(t *testing.T) {
	arenas := openGroup(t, 2, nil)
	done := make(chan error)
	go func() { done <- arenas[0].Barrier(testCtx(t, 30*time.Second)) }()
	require.True(t, testutil.WaitUntil(10*time.Second, func() bool { return asleep(arenas[1]) == 1 }), "rank 0 never slept in its barrier")
	require.NoError(t, arenas[0].Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, transport.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("barrier did not return after Close")
	}
}

// TestContextCanceled: canceling (rather than timing out) maps to ErrClosed.
func TestContextCanceled(t *testing.T) {
	arenas := openGroup(t, 2, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	err := arenas[0].Barrier(ctx)
	require.ErrorIs(t, err, transport.ErrClosed)
	require.NotErrorIs(t, err, transport.ErrTimeout)
}

// TestSizeMismatch: every rank gets ErrSizeMismatch, and the arena stays
// usable for the next collective.
func TestSizeMismatch(t *testing.T) {
	for _, c := range collectives[:4] {
		for _, n := range []int{16, 252, 1020, 3000} { // +8 crosses inline, one-shot/two-shot
			if c.name == "reduce_scatter" && n > 1000 {
				n /= 3 // P*n bytes move: cross the inline limit at 3 ranks
			}
			t.Run(fmt.Sprintf("%s/%d", c.name, n), func(t *testing.T) {
				arenas := openGroup(t, 3, func(cfg *Config) { cfg.ChunkSize = testChunk; cfg.OneShotMax = 1024 })
				ctx := testCtx(t, 10*time.Second)
				errs := onAll(arenas, func(r int, a *Arena) error {
					m := n
					if r == 1 {
						m = n + 8
					}
					return c.run(ctx, a, m)
				})
				for r, err := range errs {
					if c.name == "broadcast" && r != 1 {
						require.NoError(t, err, "rank %d", r) // only the odd one out can tell
						continue
					}
					require.ErrorIs(t, err, transport.ErrSizeMismatch, "rank %d", r)
				}
				requireAllOK(t, onAll(arenas, func(r int, a *Arena) error { return c.run(ctx, a, n) }), "after mismatch")
				requireAllOK(t, onAll(arenas, func(r int, a *Arena) error { return a.Barrier(ctx) }), "barrier after mismatch")
			})
		}
	}
}

func TestAllToAllSizeMismatch(t *testing.T) {
	arenas := openGroup(t, 3, func(cfg *Config) { cfg.ChunkSize = testChunk })
	ctx := testCtx(t, 10*time.Second)
	errs := onAll(arenas, func(r int, a *Arena) error {
		ins, outs := make([][]byte, 3), make([][]byte, 3)
		for q := range ins {
			ins[q] = randBytes(2000, uint64(r*3+q))
			outs[q] = make([]byte, 2000)
		}
		if r == 0 {
			outs[1] = make([]byte, 1999)
		}
		if err := a.AllToAll(ctx, ins, outs); err != nil {
			return err
		}
		for q := range outs {
			if !bytesEqual(outs[q], randBytes(2000, uint64(q*3+r))) {
				return fmt.Errorf("block from %d wrong", q)
			}
		}
		return nil
	})
	require.ErrorIs(t, errs[0], transport.ErrSizeMismatch)
	require.NoError(t, errs[1])
	require.NoError(t, errs[2])
	requireAllOK(t, onAll(arenas, func(r int, a *Arena) error { return a.Barrier(ctx) }), "barrier after mismatch")
}

// TestDesync: ranks running different collectives fail with ErrDesync.
func TestDesync(t *testing.T) {
	arenas := openGroup(t, 2, nil)
	ctx := testCtx(t, 2*time.Second)
	errs := onAll(arenas, func(r int, a *Arena) error {
		if r == 0 {
			return collectives[0].run(ctx, a, 64)
		}
		return a.Barrier(ctx)
	})
	for r, err := range errs {
		require.ErrorIs(t, err, ErrDesync, "rank %d", r)
	}
	require.ErrorIs(t, arenas[0].Barrier(ctx), ErrBroken)
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }
