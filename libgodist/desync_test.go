package libgodist

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// A call one rank makes in a desync test.
type call func(r int, pg *ProcessGroup) (*Work, error)

var f32 = ReduceArgs{DType: reduce.Float32, Op: reduce.Sum}

func allReduceOf(n int, a ReduceArgs) call {
	return func(_ int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(make([]byte, n*a.DType.Size()), a, Opts{})
	}
}

func broadcastOf(n int, dt reduce.DType, root int) call {
	return func(_ int, pg *ProcessGroup) (*Work, error) {
		return pg.Broadcast(make([]byte, n*dt.Size()), root, Opts{Typed: true, DType: dt})
	}
}

func allGatherOf(n int, dt reduce.DType) call {
	return func(_ int, pg *ProcessGroup) (*Work, error) {
		outs := make([][]byte, pg.Size())
		for q := range outs {
			outs[q] = make([]byte, n*dt.Size())
		}
		return pg.AllGather(make([]byte, n*dt.Size()), outs, Opts{Typed: true, DType: dt})
	}
}

// allToAllOf sends each rank blocks of the given element counts (float32).
func allToAllOf(send func(r, to int) int) call {
	return func(r int, pg *ProcessGroup) (*Work, error) {
		n := pg.Size()
		ins, outs := make([][]byte, n), make([][]byte, n)
		for q := range ins {
			ins[q] = make([]byte, 4*send(r, q))
			outs[q] = make([]byte, 4*send(q, r))
		}
		return pg.AllToAll(ins, outs, Opts{Typed: true, DType: reduce.Float32})
	}
}

// runDesync runs odd on rank 1 and usual on the others, on n in-memory
// ranks with a 30 s timeout, and returns each rank's error and how long its
// op took. With next, a rank whose op succeeds (one that only sends may
// finish before it hears of the desync) runs a barrier, whose error and
// time count instead.
func runDesync(t *testing.T, n int, usual, odd call, next bool) ([]error, []time.Duration) {
	t.Helper()
	pgs, _ := group(t, n, 30*time.Second)
	return runDesyncOn(t, pgs, usual, odd, next)
}

// runDesyncOn is runDesync on the ranks pgs.
func runDesyncOn(t *testing.T, pgs []*ProcessGroup, usual, odd call, next bool) ([]error, []time.Duration) {
	t.Helper()
	took := make([]time.Duration, len(pgs))
	errs := onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
		f := usual
		if r == 1 {
			f = odd
		}
		start := time.Now()
		w, err := f(r, pg)
		if err == nil {
			err = w.Err()
		}
		if err == nil && next {
			if w, err = pg.Barrier(Opts{}); err == nil {
				err = w.Err()
			}
		}
		took[r] = time.Since(start)
		return completedWork("t", 0, err), nil
	})
	// The group refuses work from then on.
	for r, pg := range pgs {
		w, err := pg.Barrier(Opts{})
		require.NoError(t, err)
		require.ErrorIs(t, w.Err(), ErrBroken, "rank %d", r)
		require.Contains(t, w.Err().Error(), "called", "rank %d", r)
	}
	return errs, took
}

// rank1SendsMore is an all_to_all in which rank 1 sends rank 0 one element
// more than the others send each other.
var rank1SendsMore = allToAllOf(func(r, to int) int {
	if r == 1 && to == 0 {
		return 3
	}
	return 2
})

func TestDesyncEveryRankFailsInTheOp(t *testing.T) {
	cases := []struct {
		name       string
		usual, odd call
		want       string // when ranks 1 and 0 are the pair named
	}{
		{"op", allReduceOf(1024, f32), broadcastOf(1024, reduce.Float32, 0),
			"rank 1 called broadcast(float32[1024], root=0) where rank 0 called all_reduce(float32[1024], SUM)"},
		{"count", allReduceOf(1024, f32), allReduceOf(2048, f32),
			"rank 1 called all_reduce(float32[2048], SUM) where rank 0 called all_reduce(float32[1024], SUM)"},
		{"dtype", allReduceOf(1024, f32), allReduceOf(1024, ReduceArgs{DType: reduce.Int32, Op: reduce.Sum}),
			"rank 1 called all_reduce(int32[1024], SUM) where rank 0 called all_reduce(float32[1024], SUM)"},
		{"reduce op", allReduceOf(8, f32), allReduceOf(8, ReduceArgs{DType: reduce.Float32, Op: reduce.Max}),
			"rank 1 called all_reduce(float32[8], MAX) where rank 0 called all_reduce(float32[8], SUM)"},
		{"all_gather dtype", allGatherOf(16, reduce.Float32), allGatherOf(16, reduce.Int32),
			"rank 1 called all_gather(int32[16] per rank) where rank 0 called all_gather(float32[16] per rank)"},
		{"all_to_all splits", allToAllOf(func(r, to int) int { return 2 }), rank1SendsMore, "rank 1 called all_to_all(float32, 3 elements to rank 0, 2 from it) where rank 0 called all_to_all(float32, 2 elements to rank 1, 2 from it)"},
	}
	for _, tc := range cases {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/P%d", tc.name, n), func(t *testing.T) {
				errs, took := runDesync(t, n, tc.usual, tc.odd, false)
				for r, err := range errs {
					require.Error(t, err, "rank %d", r)
					require.ErrorIs(t, err, ErrDesync, "rank %d: %v", r, err)
					var de *transport.DesyncError
					require.True(t, errors.As(err, &de), "rank %d", r)
					require.Less(t, took[r], 2*time.Second, "rank %d", r)
					// With three ranks the first to find it may be rank 2.
					if strings.Contains(err.Error(), "where rank 0 called") {
						require.Contains(t, err.Error(), tc.want, "rank %d", r)
					} else {
						require.Contains(t, err.Error(), "rank 2 called", "rank %d", r)
					}
				}
			})
		}
	}
}

// TestDesyncOnlySenders: ranks that disagree on a broadcast's root or
// dtype, or on reduce against gather. A rank that only sends in its own
// view (a root; a non-root of gather) may finish before it hears of the
// desync: its next collective fails with it instead. Reduce and gather
// also take different steps (tags): no receive ever matches the other
// rank's message.
func TestDesyncOnlySenders(t *testing.T) {
	cases := []struct {
		name       string
		usual, odd call
		want       []string
	}{
		{"root", broadcastOf(16, reduce.Float32, 0), broadcastOf(16, reduce.Float32, 1),
			[]string{"broadcast(float32[16], root=1)", "broadcast(float32[16], root=0)"}},
		{"dtype", broadcastOf(16, reduce.Float32, 0), broadcastOf(16, reduce.Int32, 0),
			[]string{"broadcast(int32[16], root=0)", "broadcast(float32[16], root=0)"}},
		{"reduce vs gather", func(_ int, pg *ProcessGroup) (*Work, error) {
			return pg.Reduce(make([]byte, 32), 0, f32, Opts{})
		}, func(_ int, pg *ProcessGroup) (*Work, error) {
			return pg.Gather(make([]byte, 32), nil, 0, Opts{Typed: true, DType: reduce.Float32})
		}, []string{"rank 1 called gather(float32[8] per rank, root=0) where rank 0 called reduce(float32[8], SUM, root=0)"}},
	}
	for _, tc := range cases {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/P%d", tc.name, n), func(t *testing.T) {
				errs, took := runDesync(t, n, tc.usual, tc.odd, true)
				for r, err := range errs {
					require.ErrorIs(t, err, ErrDesync, "rank %d", r)
					require.Less(t, took[r], 2*time.Second, "rank %d", r)
					for _, w := range tc.want {
						require.Contains(t, err.Error(), w, "rank %d", r)
					}
				}
			})
		}
	}
}

// TestDesyncDetail: calls that agree in every count but not in the
// shapes the callers describe.
func TestDesyncDetail(t *testing.T) {
	errs, _ := runDesync(t, 2, func(_ int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(make([]byte, 24), f32, Opts{Detail: "float32[2, 3]"})
	}, func(_ int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(make([]byte, 24), f32, Opts{Detail: "float32[3, 2]"})
	}, false)
	for r, err := range errs {
		require.ErrorIs(t, err, ErrDesync, "rank %d", r)
		require.Contains(t, err.Error(), "with tensors of other shapes")
		require.Contains(t, err.Error(), []string{"float32[2, 3]", "float32[3, 2]"}[r])
	}
}

// TestNoDesyncWithoutDetailOnOneRank: a rank that describes nothing
// agrees with one that does.
func TestNoDesyncWithoutDetailOnOneRank(t *testing.T) {
	pgs, _ := group(t, 2, 30*time.Second)
	requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(make([]byte, 24), f32, Opts{Detail: []string{"float32[2, 3]", ""}[r]})
	}))
}

// TestDesyncNoticeIgnoresStrangers: a malformed notice changes nothing.
func TestDesyncNoticeIgnoresStrangers(t *testing.T) {
	pgs, _ := group(t, 2, 30*time.Second)
	pgs[0].noticed(make([]byte, desyncSize)) // ranks 0 and 0
	pgs[0].noticed([]byte{1, 2, 3})          // short
	bad := make([]byte, desyncSize)
	bad[0] = 7 // rank 7 of 2
	pgs[0].noticed(bad)
	requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(make([]byte, 8), f32, Opts{})
	}))
}

// TestDesyncOverBackends: the same checks over loopback TCP and over the
// shared-memory arena (its collectives, and the reduce and gather that go
// through its point-to-point rings), at 2 and 3 ranks.
func TestDesyncOverBackends(t *testing.T) {
	reduceTo := func(_ int, pg *ProcessGroup) (*Work, error) {
		return pg.Reduce(make([]byte, 32), 0, f32, Opts{})
	}
	gatherTo := func(_ int, pg *ProcessGroup) (*Work, error) {
		return pg.Gather(make([]byte, 32), nil, 0, Opts{Typed: true, DType: reduce.Float32})
	}
	cases := []struct {
		name       string
		usual, odd call
		next       bool
	}{
		{"op", allReduceOf(1024, f32), broadcastOf(1024, reduce.Float32, 0), false},
		{"count", allReduceOf(1024, f32), allReduceOf(2048, f32), false},
		{"dtype", allReduceOf(1024, f32), allReduceOf(1024, ReduceArgs{DType: reduce.Int32, Op: reduce.Sum}), false},
		{"reduce op", allReduceOf(8, f32), allReduceOf(8, ReduceArgs{DType: reduce.Float32, Op: reduce.Max}), false},
		{"root", broadcastOf(16, reduce.Float32, 0), broadcastOf(16, reduce.Float32, 1), true},
		{"all_gather dtype", allGatherOf(16, reduce.Float32), allGatherOf(16, reduce.Int32), false},
		{"reduce vs gather", reduceTo, gatherTo, true},
		{"all_reduce vs reduce", allReduceOf(8, f32), reduceTo, true},
		{"all_to_all splits", allToAllOf(func(r, to int) int { return 2 }), allToAllOf(func(r, to int) int {
			if r == 1 && to == 0 {
				return 3
			}
			return 2
		}), true}, // over TCP a rank whose blocks all match may finish first
	}
	for _, tr := range []string{assemble.TransportTCP, assemble.TransportAuto} {
		for _, tc := range cases {
			for _, n := range []int{2, 3} {
				t.Run(fmt.Sprintf("%s/%s/P%d", map[string]string{"": "shm", "tcp": "tcp"}[tr], tc.name, n), func(t *testing.T) {
					pgs := connectGroup(t, n, tr, nil)
					for _, pg := range pgs {
						pg.cfg.Timeout = 30 * time.Second
					}
					errs, took := runDesyncOn(t, pgs, tc.usual, tc.odd, tc.next)
					for r, err := range errs {
						require.ErrorIs(t, err, ErrDesync, "rank %d", r)
						require.Less(t, took[r], 2*time.Second, "rank %d", r)
					}
				})
			}
		}
	}
}

// TestDesyncFoundAtTimeout: ranks that each wait for the other in a
// different collective (non-roots of scatters with different roots: no
// one sends) time out, and the progress query that names missing ranks
// finds the peer at the same sequence number in another call.
func TestDesyncFoundAtTimeout(t *testing.T) {
	pgs, _ := group(t, 2, 300*time.Millisecond)
	start := time.Now()
	errs := onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
		return pg.Scatter(nil, make([]byte, 16), 1-r, Opts{Typed: true, DType: reduce.Float32})
	})
	for r, err := range errs {
		require.ErrorIs(t, err, ErrDesync, "rank %d", r)
		require.Contains(t, err.Error(), "rank 1 called scatter(float32[4] per rank, root=0) where rank 0 called scatter(float32[4] per rank, root=1)")
	}
	require.Less(t, time.Since(start), 2*time.Second)
}
