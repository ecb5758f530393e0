package libgodist

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

var worldSizes = []int{1, 2, 3, 4, 5, 7, 8}

// group builds n connected in-memory process groups.
func group(t testing.TB, n int, timeout time.Duration) ([]*ProcessGroup, *transport.MemNetwork) {
	t.Helper()
	return groupTuned(t, n, timeout, nil)
}

// groupTuned builds n connected in-memory process groups with tune (nil
// for algo.Default).
func groupTuned(t testing.TB, n int, timeout time.Duration, tune *algo.Table) ([]*ProcessGroup, *transport.MemNetwork) {
	t.Helper()
	net := transport.NewMemNetwork(n)
	pgs := make([]*ProcessGroup, n)
	for r := range pgs {
		pg, err := NewWithTransport(Config{Rank: r, Size: n, Group: "test", Timeout: timeout, Tuning: tune}, net.Transport(r))
		require.NoError(t, err)
		pgs[r] = pg
	}
	t.Cleanup(func() {
		for _, pg := range pgs {
			pg.Close()
		}
	})
	return pgs, net
}

// onAll runs f on every rank concurrently and waits for their Works.
func onAll(t testing.TB, pgs []*ProcessGroup, f func(r int, pg *ProcessGroup) (*Work, error)) []error {
	t.Helper()
	errs := make([]error, len(pgs))
	var wg sync.WaitGroup
	for r, pg := range pgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := f(r, pg)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = w.Err()
		}()
	}
	wg.Wait()
	return errs
}

func requireAllOK(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

func i64s(vals ...int64) []byte {
	b := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

func toI64(b []byte) []int64 {
	out := make([]int64, len(b)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// input returns rank r's deterministic test data of count int64s.
func input(r, count int) []int64 {
	rng := rand.New(rand.NewSource(int64(r*7919 + count)))
	v := make([]int64, count)
	for i := range v {
		v[i] = rng.Int63n(1000) - 500
	}
	return v
}

func TestAllReduceSumAndMax(t *testing.T) {
	// Recursive doubling, the ring with one segment per chunk, and the ring
	// with chunks cut into many segments (some a partial element long,
	// rounded up to one element). spare: the host's ranks fit its cores,
	// which moves the choice between the direct and the pipelined ring.
	for _, mode := range []struct {
		rdMax, seg int
		spare      bool
	}{{1 << 20, 512 << 10, false}, {16, 512 << 10, false}, {16, 24, false}, {16, 3, false},
		{16, 512 << 10, true}, {16, 24, true}, {16, 3, true}} {
		tune := algo.Default()
		tune.AllReduceRDMax, tune.RingSegment = mode.rdMax, mode.seg
		for _, n := range append(worldSizes, 13) {
			for _, count := range []int{0, 1, 7, 1000} {
				for _, op := range []reduce.Op{reduce.Sum, reduce.Max, reduce.Avg} {
					t.Run(fmt.Sprintf("rd%d/seg%d/spare=%v/n%d/c%d/%v", mode.rdMax, mode.seg, mode.spare, n, count, op), func(t *testing.T) {
						pgs, _ := groupTuned(t, n, 5*time.Second, &tune)
						for _, pg := range pgs {
							pg.spare = mode.spare
						}
						bufs := make([][]byte, n)
						want := make([]int64, count)
						for r := 0; r < n; r++ {
							in := input(r, count)
							bufs[r] = i64s(in...)
							for i, v := range in {
								switch {
								case r == 0:
									want[i] = v
								case op == reduce.Max:
									want[i] = max(want[i], v)
								default:
									want[i] += v
								}
							}
						}
						if op == reduce.Avg {
							for i := range want {
								want[i] /= int64(n)
							}
						}
						requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
							return pg.AllReduce(bufs[r], ReduceArgs{DType: reduce.Int64, Op: op}, Opts{})
						}))
						for r := 0; r < n; r++ {
							require.Equal(t, want, toI64(bufs[r]), "rank %d", r)
						}
					})
				}
			}
		}
	}
}

func TestBroadcastReduceGatherScatter(t *testing.T) {
	for _, n := range worldSizes {
		for root := 0; root < n; root++ {
			t.Run(fmt.Sprintf("n%d/root%d", n, root), func(t *testing.T) {
				pgs, _ := group(t, n, 5*time.Second)
				count := 5
				// broadcast
				bufs := make([][]byte, n)
				for r := range bufs {
					bufs[r] = i64s(input(r, count)...)
				}
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) { return pg.Broadcast(bufs[r], root, Opts{}) }))
				for r := range bufs {
					require.Equal(t, input(root, count), toI64(bufs[r]))
				}
				// reduce: root gets the sum, others unchanged
				want := make([]int64, count)
				for r := range bufs {
					in := input(r, count)
					bufs[r] = i64s(in...)
					for i, v := range in {
						want[i] += v
					}
				}
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
					return pg.Reduce(bufs[r], root, ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
				}))
				for r := range bufs {
					if r == root {
						require.Equal(t, want, toI64(bufs[r]))
					} else {
						require.Equal(t, input(r, count), toI64(bufs[r]))
					}
				}
				// gather + scatter round trip
				outs := make([][]byte, n)
				for i := range outs {
					outs[i] = make([]byte, 8*count)
				}
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
					var o [][]byte
					if r == root {
						o = outs
					}
					return pg.Gather(i64s(input(r, count)...), o, root, Opts{})
				}))
				for i := range outs {
					require.Equal(t, input(i, count), toI64(outs[i]))
				}
				got := make([][]byte, n)
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
					got[r] = make([]byte, 8*count)
					var in [][]byte
					if r == root {
						in = outs
					}
					return pg.Scatter(in, got[r], root, Opts{})
				}))
				for r := range got {
					require.Equal(t, input(r, count), toI64(got[r]))
				}
			})
		}
	}
}

func TestAllGatherReduceScatterAllToAllBarrier(t *testing.T) {
	for _, n := range worldSizes {
		for _, count := range []int{0, 1, 3} {
			t.Run(fmt.Sprintf("n%d/c%d", n, count), func(t *testing.T) {
				pgs, _ := group(t, n, 5*time.Second)
				outs := make([][][]byte, n)
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
					outs[r] = make([][]byte, n)
					for i := range outs[r] {
						outs[r][i] = make([]byte, 8*count)
					}
					return pg.AllGather(i64s(input(r, count)...), outs[r], Opts{})
				}))
				for r := 0; r < n; r++ {
					for i := 0; i < n; i++ {
						require.Equal(t, input(i, count), toI64(outs[r][i]))
					}
				}
				// reduce_scatter: rank r's block i is input(r*n+i)
				res := make([][]byte, n)
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
					ins := make([][]byte, n)
					for i := range ins {
						ins[i] = i64s(input(r*n+i, count)...)
					}
					res[r] = make([]byte, 8*count)
					return pg.ReduceScatter(ins, res[r], ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
				}))
				for r := 0; r < n; r++ {
					want := make([]int64, count)
					for src := 0; src < n; src++ {
						for i, v := range input(src*n+r, count) {
							want[i] += v
						}
					}
					require.Equal(t, want, toI64(res[r]))
				}
				// all_to_all with uneven blocks: rank r sends (r+j)%3 int64s to j
				a2a := make([][][]byte, n)
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
					ins := make([][]byte, n)
					a2a[r] = make([][]byte, n)
					for j := 0; j < n; j++ {
						ins[j] = i64s(input(r*100+j, (r+j)%3)...)
						a2a[r][j] = make([]byte, 8*((j+r)%3))
					}
					return pg.AllToAll(ins, a2a[r], Opts{})
				}))
				for r := 0; r < n; r++ {
					for j := 0; j < n; j++ {
						require.Equal(t, input(j*100+r, (j+r)%3), toI64(a2a[r][j]))
					}
				}
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) { return pg.Barrier(Opts{}) }))
			})
		}
	}
}

func TestSendRecvAnySourceAndOrder(t *testing.T) {
	pgs, _ := group(t, 3, 5*time.Second)
	// ranks 1 and 2 each send two messages to 0 with tag 7; 0 receives from any.
	for _, r := range []int{1, 2} {
		for k := int64(0); k < 2; k++ {
			w, err := pgs[r].Send(i64s(int64(r)*10+k), 0, 7, Opts{})
			require.NoError(t, err)
			require.NoError(t, w.Err())
		}
	}
	seen := map[int][]int64{}
	for i := 0; i < 4; i++ {
		b := make([]byte, 8)
		w, err := pgs[0].Recv(b, transport.AnySource, 7, Opts{})
		require.NoError(t, err)
		require.NoError(t, w.Err())
		seen[w.Source()] = append(seen[w.Source()], toI64(b)[0])
	}
	require.Equal(t, map[int][]int64{1: {10, 11}, 2: {20, 21}}, seen)
	// a receive with a different tag does not match, and times out
	w, err := pgs[0].Recv(make([]byte, 8), 1, 8, Opts{Timeout: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Error(t, w.Err())
	require.Contains(t, w.Err().Error(), "timed out")
}

func TestTimeoutNamesMissingRank(t *testing.T) {
	pgs, _ := group(t, 4, 300*time.Millisecond)
	errs := onAll(t, pgs[:3], func(r int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(i64s(1, 2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		var oe *OpError
		require.ErrorAs(t, err, &oe)
		require.True(t, oe.Timeout())
		require.Equal(t, []int{3}, oe.Missing, "rank %d: %v", r, err)
		require.Empty(t, oe.Silent, "rank 3 answers the progress query")
		require.Contains(t, err.Error(), "allreduce (seq 1)")
	}
	// the group is now broken: later ops fail fast
	w, err := pgs[0].Barrier(Opts{})
	require.NoError(t, err)
	require.ErrorIs(t, w.Err(), ErrBroken)
}

// blackhole drops every message its rank sends to peer, as a cut link
// would.
type blackhole struct {
	transport.Transport
	peer int
}

func (b *blackhole) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if peer == b.peer {
		return nil
	}
	return b.Transport.Send(ctx, peer, tag, data)
}

// TestTimeoutNamesSilentRank: a rank that cannot be reached does not
// answer the progress query either, and the error says so.
func TestTimeoutNamesSilentRank(t *testing.T) {
	net := transport.NewMemNetwork(3)
	pgs := make([]*ProcessGroup, 3)
	for r := range pgs {
		var tr transport.Transport = net.Transport(r)
		if r < 2 {
			tr = &blackhole{Transport: tr, peer: 2}
		}
		pg, err := NewWithTransport(Config{Rank: r, Size: 3, Group: "test", Timeout: 300 * time.Millisecond}, tr)
		require.NoError(t, err)
		pgs[r] = pg
	}
	t.Cleanup(func() {
		for _, pg := range pgs {
			pg.Close()
		}
	})
	errs := onAll(t, pgs[:2], func(r int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(i64s(1, 2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	})
	for r, err := range errs {
		var oe *OpError
		require.ErrorAs(t, err, &oe, "rank %d", r)
		require.Equal(t, []int{2}, oe.Missing, "rank %d: %v", r, err)
		require.Equal(t, []int{2}, oe.Silent, "rank %d: %v", r, err)
		require.Contains(t, err.Error(), "rank(s) [2] did not answer: unreachable, stopped or stuck")
	}
}

// queryHold wraps a rank's transport: the progress queries it sends (a
// timed-out rank asking its peers how far they got) wait until release is
// closed.
type queryHold struct {
	transport.Transport
	release <-chan struct{}
}

func (q *queryHold) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if tag == transport.ControlTag(0) {
		select {
		case <-q.release:
		case <-time.After(10 * time.Second):
		}
	}
	return q.Transport.Send(ctx, peer, tag, data)
}

// TestTimeoutMissingAfterPeersLeft: ranks 0 and 2 time out and close their
// groups before rank 1, timed out too, asks them how far they got (its
// queries are held until they have left). Their farewell still says they
// joined: rank 1 names only the rank that never came, also when the
// farewells are not there at its first look (late).
func TestTimeoutMissingAfterPeersLeft(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "farewell", true: "late"}[late], func(t *testing.T) { timeoutMissingAfterPeersLeft(t, late) })
	}
}

func timeoutMissingAfterPeersLeft(t *testing.T, late bool) {
	const n = 4
	net := transport.NewMemNetwork(n)
	left := make(chan struct{})
	pgs := make([]*ProcessGroup, n)
	for r := range pgs {
		tr := net.Transport(r)
		if r == 1 {
			if late {
				tr = &lateFarewell{Transport: tr}
			}
			tr = &queryHold{Transport: tr, release: left}
		}
		pg, err := NewWithTransport(Config{Rank: r, Size: n, Group: "test", Timeout: 300 * time.Millisecond}, tr)
		require.NoError(t, err)
		pgs[r] = pg
	}
	t.Cleanup(func() {
		for _, pg := range pgs {
			pg.Close()
		}
	})
	var early, gone sync.WaitGroup // ranks 0 and 2 both failed; both closed
	early.Add(2)
	gone.Add(2)
	go func() { gone.Wait(); close(left) }()
	errs := onAll(t, pgs[:3], func(r int, pg *ProcessGroup) (*Work, error) {
		if r != 1 {
			// Rank 1 has joined by the time ranks 0 and 2 time out.
			if !testutil.WaitUntil(10*time.Second, func() bool { return pgs[1].entered.Load() >= 1 }) {
				t.Error("rank 1 never started its all_reduce")
			}
		}
		w, err := pg.AllReduce(i64s(1, 2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
		if r != 1 {
			if err == nil {
				_ = w.Err()
			}
			early.Done()
			early.Wait()
			pg.Close() // leaves before rank 1 asks
			gone.Done()
		}
		return w, err
	})
	for r, err := range errs {
		var oe *OpError
		require.ErrorAs(t, err, &oe, "rank %d", r)
		require.True(t, oe.Timeout(), "rank %d: %v", r, err)
		require.Equal(t, []int{3}, oe.Missing, "rank %d: %v", r, err)
		require.Empty(t, oe.Silent, "rank %d: %v", r, err)
	}
}

// TestPeerLeftSaysWhy: rank 0's group breaks (its op times out before
// rank 1 joins) and it closes; rank 1's op then fails because rank 0
// left, and says why rank 0 left.
func TestPeerLeftSaysWhy(t *testing.T) {
	net := transport.NewMemNetwork(2)
	pgs := make([]*ProcessGroup, 2)
	for r := range pgs {
		var tr transport.Transport = net.Transport(r)
		if r == 1 {
			tr = deafToGiveUps{tr} // what the farewell says, not the notice
		}
		pg, err := NewWithTransport(Config{Rank: r, Size: 2, Group: "test", Timeout: 5 * time.Second}, tr)
		require.NoError(t, err)
		pgs[r] = pg
		t.Cleanup(func() { pg.Close() })
	}
	w, err := pgs[0].AllReduce(i64s(1), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Error(t, w.Err())
	pgs[0].Close()
	w, err = pgs[1].AllReduce(i64s(2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.NoError(t, err)
	err = w.Err()
	require.ErrorIs(t, err, transport.ErrPeerGone)
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, 0, oe.Peer)
	require.Contains(t, oe.PeerLeft, "allreduce (seq 1)")
	require.Contains(t, err.Error(), "(rank 0 left after: godist: allreduce (seq 1) in group \"test\" timed out after 100ms: rank(s) [1] did not join")
}

// lateFarewell wraps a rank's transport: its first look for each peer's
// farewell finds nothing, as when the farewell is still in a
// shared-memory ring that the receiver has not drained.
type lateFarewell struct {
	transport.Transport
	mu     sync.Mutex
	looked map[int]bool
}

func (l *lateFarewell) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	if tag == farewellTag {
		l.mu.Lock()
		first := !l.looked[peer]
		if l.looked == nil {
			l.looked = map[int]bool{}
		}
		l.looked[peer] = true
		l.mu.Unlock()
		if first {
			r := l.Transport.PostRecv(peer, transport.ControlTag(2), buf) // nobody sends there
			r.Cancel(transport.ErrClosed)
			return r
		}
	}
	return l.Transport.PostRecv(peer, tag, buf)
}

// TestLateFarewellSaysWhy: TestPeerLeftSaysWhy with rank 0's farewell not
// there at rank 1's first look: rank 1 waits for it and still says why
// rank 0 left.
func TestLateFarewellSaysWhy(t *testing.T) {
	net := transport.NewMemNetwork(2)
	pgs := make([]*ProcessGroup, 2)
	for r := range pgs {
		tr := net.Transport(r)
		if r == 1 {
			tr = deafToGiveUps{&lateFarewell{Transport: tr}}
		}
		pg, err := NewWithTransport(Config{Rank: r, Size: 2, Group: "test", Timeout: 5 * time.Second}, tr)
		require.NoError(t, err)
		pgs[r] = pg
		t.Cleanup(func() { pg.Close() })
	}
	w, err := pgs[0].AllReduce(i64s(1), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Error(t, w.Err())
	pgs[0].Close()
	w, err = pgs[1].AllReduce(i64s(2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.NoError(t, err)
	err = w.Err()
	require.ErrorIs(t, err, transport.ErrPeerGone)
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	require.Contains(t, oe.PeerLeft, "allreduce (seq 1)", "%v", err)
}

func TestKilledPeerFailsOthers(t *testing.T) {
	pgs, net := group(t, 3, 10*time.Second)
	net.Kill(2)
	start := time.Now()
	errs := onAll(t, pgs[:2], func(r int, pg *ProcessGroup) (*Work, error) { return pg.Barrier(Opts{}) })
	for r, err := range errs {
		require.ErrorIs(t, err, transport.ErrConnLost)
		// Rank 1 waits for rank 0 in the first round: its receive fails
		// because rank 2's connection was lost, and rank 2 is named.
		var oe *OpError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, 2, oe.Peer, "rank %d: %v", r, err)
		require.Contains(t, err.Error(), "failed with rank 2", "rank %d", r)
	}
	require.Less(t, time.Since(start), 2*time.Second)
}

// TestLostPeerInRecvBreaksGroup: a receive that fails because its peer's
// connection was lost breaks the group as a collective's failure does:
// the next op is refused and says why (the farewell of a rank that leaves
// after it carries the same), and the error names the lost rank.
func TestLostPeerInRecvBreaksGroup(t *testing.T) {
	pgs, net := group(t, 3, 10*time.Second)
	net.Kill(2)
	w, err := pgs[0].Recv(make([]byte, 8), transport.AnySource, 0, Opts{})
	require.NoError(t, err)
	err = w.Err()
	require.ErrorIs(t, err, transport.ErrConnLost)
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, 2, oe.Peer, "%v", err)
	w, err = pgs[0].Barrier(Opts{})
	require.NoError(t, err)
	err = w.Err()
	require.ErrorIs(t, err, ErrBroken)
	require.ErrorContains(t, err, "recv (seq 0)")
}

func TestInvalidArguments(t *testing.T) {
	pgs, _ := group(t, 2, time.Second)
	_, err := pgs[0].AllReduce(make([]byte, 3), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = pgs[0].AllReduce(make([]byte, 8), ReduceArgs{DType: reduce.Float32, Op: reduce.BAnd}, Opts{})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = pgs[0].Broadcast(nil, 5, Opts{})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = pgs[0].AllGather(make([]byte, 8), [][]byte{make([]byte, 8)}, Opts{})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = pgs[0].Send(nil, 2, 0, Opts{})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestMonitoredBarrier(t *testing.T) {
	pgs, _ := group(t, 4, 5*time.Second)
	requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) { return pg.MonitoredBarrier(0, true) }))
	// ranks 2 and 3 never arrive
	for _, waitAll := range []bool{true, false} {
		pgs, _ := group(t, 4, 5*time.Second)
		errs := onAll(t, pgs[:2], func(r int, pg *ProcessGroup) (*Work, error) {
			return pg.MonitoredBarrier(200*time.Millisecond, waitAll)
		})
		require.ErrorIs(t, errs[0], ErrNotArrived)
		if waitAll {
			require.Contains(t, errs[0].Error(), "ranks [2 3] did not arrive")
		} else {
			require.Contains(t, errs[0].Error(), "rank 2 did not arrive")
		}
		require.ErrorIs(t, errs[1], ErrNotArrived)
	}
}

func TestInlineAndQueuedKeepOrder(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		pgs, _ := group(t, n, 5*time.Second)
		bufs := make([][][]byte, n)
		requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
			var last *Work
			for k := 0; k < 4; k++ {
				bufs[r] = append(bufs[r], i64s(int64(r+k)))
				w, err := pg.AllReduce(bufs[r][k], ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{Inline: k == 3 || r%2 == 0})
				if err != nil {
					return nil, err
				}
				last = w
			}
			return last, nil
		}))
		for r := 0; r < n; r++ {
			for k := 0; k < 4; k++ {
				require.Equal(t, []int64{int64(n*(n-1)/2 + n*k)}, toI64(bufs[r][k]))
			}
		}
	}
}

// TestWaiterRunsQueuedOps: a caller waiting for a queued op that has not
// started runs it, and the ops queued before it, on its own goroutine, in
// order; the ops queued after it run on the drainer. A poll never runs one.
func TestWaiterRunsQueuedOps(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		pgs, _ := group(t, n, 5*time.Second)
		bufs := make([][][]byte, n)
		works := make([][]*Work, n)
		for r, pg := range pgs {
			pg.exec.mu.Lock()
			pg.exec.busy = true // hold the drainer off while ops queue up
			pg.exec.mu.Unlock()
			for k := 0; k < 5; k++ {
				bufs[r] = append(bufs[r], i64s(int64(r+k)))
				w, err := pg.AllReduce(bufs[r][k], ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
				require.NoError(t, err)
				works[r] = append(works[r], w)
			}
			pg.exec.mu.Lock()
			pg.exec.busy = false // no kick: only a waiter starts them
			pg.exec.mu.Unlock()
			require.ErrorIs(t, works[r][2].Wait(0), ErrNotReady, "a poll ran a queued op")
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r, pg := range pgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if errs[r] = works[r][2].Wait(5 * time.Second); errs[r] != nil {
					return
				}
				for k := 0; k < 3; k++ {
					select {
					case <-works[r][k].Done():
					default:
						errs[r] = fmt.Errorf("op %d not done after op 2 was waited for", k)
						return
					}
				}
				if errs[r] = works[r][4].Wait(5 * time.Second); errs[r] != nil { // on the drainer
					return
				}
				// The drainer finishes an op's Work before it goes idle.
				if !testutil.WaitUntil(2*time.Second, func() bool {
					pg.exec.mu.Lock()
					defer pg.exec.mu.Unlock()
					return !pg.exec.busy
				}) {
					errs[r] = fmt.Errorf("executor still busy")
				}
			}()
		}
		wg.Wait()
		requireAllOK(t, errs)
		for r := 0; r < n; r++ {
			for k := 0; k < 5; k++ {
				require.Equal(t, []int64{int64(n*(n-1)/2 + n*k)}, toI64(bufs[r][k]), "n %d rank %d op %d", n, r, k)
			}
		}
	}
}

// TestDeferrableOps: while callers wait for their async ops at once, a
// deferrable op stays queued for its waiter; one nobody waits for still
// runs (after deferStart), and then the next starts at once; a watch
// (Expedite) starts a deferred one.
func TestDeferrableOps(t *testing.T) {
	pgs, _ := group(t, 2, 5*time.Second)
	sum := ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}
	both := func(f func(r int, pg *ProcessGroup) error) {
		t.Helper()
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r, pg := range pgs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = f(r, pg) }()
		}
		wg.Wait()
		requireAllOK(t, errs)
	}
	// Waited for at once: run by the waiter.
	both(func(r int, pg *ProcessGroup) error {
		for k := 0; k < 20; k++ {
			buf := i64s(int64(r + k))
			w, err := pg.AllReduce(buf, sum, Opts{Deferrable: true})
			if err != nil {
				return err
			}
			if err := w.Wait(5 * time.Second); err != nil {
				return err
			}
			if got := toI64(buf)[0]; got != int64(1+2*k) {
				return fmt.Errorf("op %d: got %d", k, got)
			}
		}
		pg.exec.mu.Lock()
		defer pg.exec.mu.Unlock()
		if !pg.exec.waited {
			return fmt.Errorf("ops waited for at once were not run by their waiters")
		}
		return nil
	})
	// Nobody waits: the op still completes, and the next one starts at once.
	both(func(r int, pg *ProcessGroup) error {
		buf := i64s(int64(r))
		w, err := pg.AllReduce(buf, sum, Opts{Deferrable: true})
		if err != nil {
			return err
		}
		select {
		case <-w.Done():
		case <-time.After(5 * time.Second):
			return fmt.Errorf("a deferred op never started")
		}
		pg.exec.mu.Lock()
		waited := pg.exec.waited
		pg.exec.mu.Unlock()
		if waited {
			return fmt.Errorf("an op the drainer ran left waited set")
		}
		w, err = pg.AllReduce(buf, sum, Opts{Deferrable: true})
		if err != nil {
			return err
		}
		return w.Err()
	})
	// A watch starts a deferred op.
	for _, pg := range pgs {
		pg.exec.mu.Lock()
		pg.exec.waited = true
		pg.exec.mu.Unlock()
	}
	both(func(r int, pg *ProcessGroup) error {
		w, err := pg.AllReduce(i64s(1), sum, Opts{Deferrable: true})
		if err != nil {
			return err
		}
		start := time.Now()
		w.Expedite()
		if err := w.Err(); err != nil {
			return err
		}
		if d := time.Since(start); d > 2*time.Second {
			return fmt.Errorf("expedited op took %v", d)
		}
		return nil
	})
}
