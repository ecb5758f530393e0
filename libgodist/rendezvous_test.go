package libgodist

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/reduce"
)

// connectGroup runs the real two-step rendezvous (New, LocalRecord,
// Connect) for n ranks in this process, over TCP on loopback and, unless
// transport is "tcp", shared memory.
func connectGroup(t *testing.T, n int, transport string) []*ProcessGroup {
	t.Helper()
	pgs := make([]*ProcessGroup, n)
	recs := make([][]byte, n)
	for r := range pgs {
		pg, err := New(Config{Rank: r, Size: n, Group: "rdv", Timeout: 10 * time.Second, BindHost: "127.0.0.1", Transport: transport})
		require.NoError(t, err)
		pgs[r] = pg
		if n > 1 {
			recs[r], err = pg.LocalRecord()
			require.NoError(t, err)
		}
	}
	if n > 1 {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r, pg := range pgs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = pg.Connect(recs, 10*time.Second) }()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, pg := range pgs {
			wg.Add(1)
			go func() { defer wg.Done(); pg.Close() }()
		}
		wg.Wait()
	})
	return pgs
}

func TestRendezvousShmAndTCP(t *testing.T) {
	for _, transport := range []string{TransportAuto, TransportTCP} {
		for _, n := range []int{1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%s/n%d", map[string]string{"": "auto", "tcp": "tcp"}[transport], n), func(t *testing.T) {
				pgs := connectGroup(t, n, transport)
				for _, pg := range pgs {
					require.Equal(t, n > 1 && transport != TransportTCP, pg.SharedMemory())
				}
				for _, count := range []int{1, 1000, 100_000} {
					bufs := make([][]byte, n)
					want := make([]int64, count)
					for r := range bufs {
						in := input(r, count)
						bufs[r] = i64s(in...)
						for i, v := range in {
							want[i] += v
						}
					}
					requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
						return pg.AllReduce(bufs[r], ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{Inline: r%2 == 0})
					}))
					for r := range bufs {
						require.Equal(t, want, toI64(bufs[r]))
					}
					outs := make([][][]byte, n)
					requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
						outs[r] = make([][]byte, n)
						for i := range outs[r] {
							outs[r][i] = make([]byte, 8*count)
						}
						return pg.AllGather(i64s(input(r, count)...), outs[r], Opts{})
					}))
					for r := range outs {
						for i := range outs[r] {
							require.Equal(t, input(i, count), toI64(outs[r][i]))
						}
					}
					b := make([][]byte, n)
					requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
						b[r] = i64s(input(r, count)...)
						return pg.Broadcast(b[r], n-1, Opts{})
					}))
					for r := range b {
						require.Equal(t, input(n-1, count), toI64(b[r]))
					}
				}
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) { return pg.Barrier(Opts{}) }))
			})
		}
	}
}
