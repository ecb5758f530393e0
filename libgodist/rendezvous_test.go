package libgodist

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/backends/shm"
	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// backends assembles a group's backends as capi does, listening on
// loopback.
func backends(t testing.TB, transport string) backend.Set {
	t.Helper()
	set, err := assemble.Backends(assemble.Options{BindHost: "127.0.0.1", Transport: transport})
	require.NoError(t, err)
	return set
}

// connectGroup runs the real two-step rendezvous (New, LocalRecord,
// Connect) for n ranks in this process, over TCP on loopback and, unless
// transport is "tcp", shared memory; tune nil takes DefaultTuning.
func connectGroup(t testing.TB, n int, transport string, tune *algo.Table) []*ProcessGroup {
	t.Helper()
	pgs := make([]*ProcessGroup, n)
	recs := make([][]byte, n)
	for r := range pgs {
		pg, err := New(Config{Rank: r, Size: n, Group: "rdv", Timeout: 10 * time.Second, Tuning: tune}, backends(t, transport))
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
	for _, transport := range []string{assemble.TransportAuto, assemble.TransportTCP} {
		for _, n := range []int{1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%s/n%d", map[string]string{"": "auto", "tcp": "tcp"}[transport], n), func(t *testing.T) {
				pgs := connectGroup(t, n, transport, nil)
				for _, pg := range pgs {
					require.Equal(t, n > 1 && transport != assemble.TransportTCP, pg.Offload() == "shm")
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

// TestP2PShmAndTCP: point-to-point messages between ranks of a group on
// shared memory (the arena's rings and single-copy reads, waited for on
// the caller's goroutine) and on TCP, and the transport-based collectives
// (reduce, gather) that ride on them.
func TestP2PShmAndTCP(t *testing.T) {
	for _, transport := range []string{assemble.TransportAuto, assemble.TransportTCP} {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/n%d", map[string]string{"": "auto", "tcp": "tcp"}[transport], n), func(t *testing.T) {
				pgs := connectGroup(t, n, transport, nil)
				for _, size := range []int{0, 8, 4096, 64 << 10, 1<<20 + 3} {
					// A ring: r sends to r+1; receives posted after the send
					// (unexpected) on even ranks, before on odd ranks.
					var wg sync.WaitGroup
					errs := make([]error, n)
					got := make([][]byte, n)
					for r, pg := range pgs {
						wg.Add(1)
						go func() {
							defer wg.Done()
							from := (r + n - 1) % n
							got[r] = make([]byte, size)
							var rw *Work
							var err error
							if r%2 == 1 {
								if rw, err = pg.Recv(got[r], from, 7, Opts{}); err != nil {
									errs[r] = err
									return
								}
							}
							sw, err := pg.Send(randBytes(size, uint64(r)), (r+1)%n, 7, Opts{})
							if err == nil {
								err = sw.Wait(time.Second)
							}
							if err != nil {
								errs[r] = err
								return
							}
							if rw == nil {
								peer := from
								if r == 0 {
									peer = -1 // any source
								}
								if rw, err = pg.Recv(got[r], peer, 7, Opts{}); err != nil {
									errs[r] = err
									return
								}
							}
							errs[r] = rw.Wait(10 * time.Second)
							if errs[r] == nil && rw.Source() != from {
								errs[r] = fmt.Errorf("rank %d: source %d, want %d", r, rw.Source(), from)
							}
						}()
					}
					wg.Wait()
					for r := range pgs {
						require.NoError(t, errs[r], "rank %d size %d", r, size)
						require.Equal(t, randBytes(size, uint64((r+n-1)%n)), got[r], "rank %d size %d", r, size)
					}
				}
				// Collectives written against the transport.
				count := 40_000
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
					return pg.Reduce(bufs[r], 1, ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{Inline: true})
				}))
				require.Equal(t, want, toI64(bufs[1]))
				outs := make([][]byte, n)
				for i := range outs {
					outs[i] = make([]byte, 8*count)
				}
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
					var o [][]byte
					if r == 0 {
						o = outs
					}
					return pg.Gather(i64s(input(r, count)...), o, 0, Opts{})
				}))
				for i := range outs {
					require.Equal(t, input(i, count), toI64(outs[i]))
				}
			})
		}
	}
}

func randBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// failingOffloader agrees to nothing and fails its Join.
type failingOffloader struct{}

func (failingOffloader) Describe(*wire.PeerRecord) {}
func (failingOffloader) Close()                    {}
func (failingOffloader) Join(context.Context, *backend.Setup, transport.Transport) (backend.Offload, transport.Transport, error) {
	return nil, nil, errors.New("no offload today")
}

// TestOffloaderFailureClosesCleanly: a Join that fails fails Connect on
// every rank, and Close then returns instead of waiting for a group that
// never started.
func TestOffloaderFailureClosesCleanly(t *testing.T) {
	const n = 2
	pgs := make([]*ProcessGroup, n)
	recs := make([][]byte, n)
	for r := range pgs {
		set := backends(t, assemble.TransportTCP)
		set.Offloaders = []backend.Offloader{failingOffloader{}}
		pg, err := New(Config{Rank: r, Size: n, Group: "failing", Timeout: 5 * time.Second}, set)
		require.NoError(t, err)
		pgs[r] = pg
		recs[r], err = pg.LocalRecord()
		require.NoError(t, err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, pg := range pgs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = pg.Connect(recs, 5*time.Second) }()
	}
	wg.Wait()
	for r, err := range errs {
		require.ErrorContains(t, err, "no offload today", "rank %d", r)
	}
	closed := make(chan struct{})
	go func() {
		for _, pg := range pgs {
			pg.Close()
		}
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung after a failed Connect")
	}
}

// arenaRanks makes n ranks of group in this process, with the backends
// opts gives and shm.DefaultDir moved to a directory of the test's (dir,
// when not ""), and returns them with their records; closeRanks closes
// them at the end of the test (a second Close is a no-op).
func arenaRanks(t *testing.T, dir string, n int, group string, opts assemble.Options) ([]*ProcessGroup, [][]byte) {
	t.Helper()
	if dir != "" {
		old := shm.DefaultDir
		shm.DefaultDir = dir
		t.Cleanup(func() { shm.DefaultDir = old })
	}
	pgs := make([]*ProcessGroup, n)
	recs := make([][]byte, n)
	for r := range pgs {
		set, err := assemble.Backends(opts)
		require.NoError(t, err)
		pg, err := New(Config{Rank: r, Size: n, Group: group, Timeout: 20 * time.Second}, set)
		require.NoError(t, err)
		pgs[r] = pg
		recs[r], err = pg.LocalRecord()
		require.NoError(t, err)
	}
	t.Cleanup(func() { closeRanks(pgs) })
	return pgs, recs
}

// connectRanks connects every rank at once; it returns once all did, or
// failed, and how long that took.
func connectRanks(t *testing.T, pgs []*ProcessGroup, recs [][]byte) time.Duration {
	t.Helper()
	start := time.Now()
	errs := make([]error, len(pgs))
	var wg sync.WaitGroup
	for r, pg := range pgs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = pg.Connect(recs, 20*time.Second) }()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return time.Since(start)
}

// closeRanks closes every rank at once.
func closeRanks(pgs []*ProcessGroup) {
	var wg sync.WaitGroup
	for _, pg := range pgs {
		wg.Add(1)
		go func() { defer wg.Done(); pg.Close() }()
	}
	wg.Wait()
}

// requireOnTCPAndWorking checks that no rank has an offload and that an
// all_reduce completes on all.
func requireOnTCPAndWorking(t *testing.T, pgs []*ProcessGroup) {
	t.Helper()
	for r, pg := range pgs {
		require.Equal(t, "", pg.Offload(), "rank %d runs on TCP", r)
	}
	requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(i64s(int64(r)), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	}))
}

// TestArenaNotCreatedFallsBackAtOnce: when rank 0 cannot create the
// group's arena file (here a file of that name is in the way; in life
// /dev/shm is full or too small), every rank learns it at once and the
// group runs over TCP. The others used to wait for a usable file until the
// open timed out (10 s, or the whole group timeout when that was shorter,
// failing the group).
func TestArenaNotCreatedFallsBackAtOnce(t *testing.T) {
	dir := t.TempDir()
	pgs, recs := arenaRanks(t, dir, 3, "noarena", assemble.Options{BindHost: "127.0.0.1", Transport: assemble.TransportAuto})
	rec0, err := wire.UnmarshalPeerRecord(recs[0])
	require.NoError(t, err)
	h := fnv.New64a()
	h.Write([]byte("noarena"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("godist-%016x-%016x", rec0.Session, h.Sum64())), nil, 0o600))
	require.Less(t, connectRanks(t, pgs, recs), 3*time.Second)
	requireOnTCPAndWorking(t, pgs)
}

// TestArenaCreatedWhileRanksMeet: a job whose store is on a loopback
// address (or has none) has rank 0 create the arena at New; the group
// opens it, and every rank's Close leaves no file behind, whether the
// group connected or was closed before connecting.
func TestArenaCreatedWhileRanksMeet(t *testing.T) {
	dir := t.TempDir()
	loopback := assemble.Options{PeerHost: "127.0.0.1", Transport: assemble.TransportAuto}
	arenas := func() []string {
		m, err := filepath.Glob(filepath.Join(dir, "godist-*"))
		require.NoError(t, err)
		var out []string
		for _, p := range m {
			if !strings.HasPrefix(filepath.Base(p), "godist-probe-") {
				out = append(out, p)
			}
		}
		return out
	}

	pgs, recs := arenaRanks(t, dir, 3, "early", loopback)
	connectRanks(t, pgs, recs)
	for r, pg := range pgs {
		require.Equal(t, "shm", pg.Offload(), "rank %d", r)
	}
	requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(i64s(int64(r)), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	}))
	closeRanks(pgs)
	require.Empty(t, arenas())

	pgs, _ = arenaRanks(t, "", 3, "never", loopback)
	testutil.Eventually(t, 5*time.Second, func() bool { return len(arenas()) == 1 }, "rank 0 creates the arena at New")
	closeRanks(pgs) // before Connect: the arena made at New goes too
	require.Empty(t, arenas())
}
