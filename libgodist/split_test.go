package libgodist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// splitAll runs Split on every rank of pgs concurrently, rank r with
// lists[r], and returns the children (nil where it failed) and errors.
func splitAll(t *testing.T, pgs []*ProcessGroup, lists [][]int, name string) ([]*ProcessGroup, []error) {
	t.Helper()
	kids := make([]*ProcessGroup, len(pgs))
	errs := make([]error, len(pgs))
	var wg sync.WaitGroup
	for r, pg := range pgs {
		if lists[r] == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			kids[r], errs[r] = pg.Split(lists[r], name, 5*time.Second)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, k := range kids {
			if k != nil {
				k.Close()
			}
		}
	})
	return kids, errs
}

// sumOn all-reduces (SUM, int64) rank r's value vals[r] over the groups
// in gs (nil entries skipped) and returns each one's result.
func sumOn(t *testing.T, gs []*ProcessGroup, vals []int64) []int64 {
	t.Helper()
	out := make([]int64, len(gs))
	bufs := make([][]byte, len(gs))
	var live []*ProcessGroup
	var idx []int
	for r, g := range gs {
		if g != nil {
			bufs[r] = i64s(vals[r], vals[r]*3)
			live = append(live, g)
			idx = append(idx, r)
		}
	}
	errs := onAll(t, live, func(i int, g *ProcessGroup) (*Work, error) {
		return g.AllReduce(bufs[idx[i]], ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	})
	requireAllOK(t, errs)
	for _, r := range idx {
		out[r] = int64(binary.LittleEndian.Uint64(bufs[r]))
		require.Equal(t, 3*out[r], int64(binary.LittleEndian.Uint64(bufs[r][8:])))
	}
	return out
}

// splitTransports are the transports a child is split over in these
// tests: in memory (with the given op timeout), shared memory and TCP.
var splitTransports = []struct {
	name  string
	group func(t *testing.T, n int, timeout time.Duration) []*ProcessGroup
}{
	{"mem", func(t *testing.T, n int, timeout time.Duration) []*ProcessGroup {
		pgs, _ := group(t, n, timeout)
		return pgs
	}},
	{"auto", func(t *testing.T, n int, _ time.Duration) []*ProcessGroup {
		return connectGroup(t, n, assemble.TransportAuto, nil)
	}},
	{"tcp", func(t *testing.T, n int, _ time.Duration) []*ProcessGroup {
		return connectGroup(t, n, assemble.TransportTCP, nil)
	}},
}

func TestSplitFormsChildrenOnTheParentsConnections(t *testing.T) {
	for _, st := range splitTransports {
		t.Run(st.name, func(t *testing.T) {
			pgs := st.group(t, 5, 5*time.Second)
			// Two children in reversed rank order, and rank 4 alone.
			lists := [][]int{{2, 0}, {3, 1}, {2, 0}, {3, 1}, {4}}
			kids, errs := splitAll(t, pgs, lists, "child")
			requireAllOK(t, errs)
			for r, k := range kids {
				require.Equal(t, len(lists[r]), k.Size())
				require.Equal(t, lists[r][k.Rank()], r, "rank %d", r)
			}
			vals := []int64{1, 10, 100, 1000, 10000}
			require.Equal(t, []int64{101, 1010, 101, 1010, 10000}, sumOn(t, kids, vals))
			// Over shared memory a child gets an arena of its own, open by
			// the time its first collective ran.
			want := map[string]string{"auto": "shm"}[st.name]
			for r, k := range kids[:4] {
				require.Equal(t, want, k.Offload(), "rank %d", r)
			}
			// The parent runs alongside its children, and a grandchild
			// of child 0 (a child's own split) beside both.
			require.Equal(t, []int64{11111, 11111, 11111, 11111, 11111}, sumOn(t, pgs, vals))
			grand, errs := splitAll(t, []*ProcessGroup{kids[0], kids[2]}, [][]int{{1, 0}, {1, 0}}, "grandchild")
			requireAllOK(t, errs)
			require.Equal(t, []int64{101, 101}, sumOn(t, grand, []int64{1, 100}))
			require.Equal(t, want, grand[0].Offload())
			require.Equal(t, []int64{101, 1010, 101, 1010, 10000}, sumOn(t, kids, vals))
			// Point-to-point in the child: child rank 0 (group rank 3)
			// to child rank 1 (group rank 1), received from any source.
			buf := make([]byte, 8)
			var wg sync.WaitGroup
			wg.Add(1)
			var recvErr error
			var src int
			go func() {
				defer wg.Done()
				w, err := kids[1].Recv(buf, transport.AnySource, 7, Opts{})
				if err == nil {
					err = w.Err()
					src = w.Source()
				}
				recvErr = err
			}()
			w, err := kids[3].Send(i64s(42), 1, 7, Opts{})
			require.NoError(t, err)
			require.NoError(t, w.Err())
			wg.Wait()
			require.NoError(t, recvErr)
			require.Equal(t, 0, src, "the source in the child's numbering")
			require.Equal(t, int64(42), int64(binary.LittleEndian.Uint64(buf)))
		})
	}
}

func TestSplitRefusesBadRankLists(t *testing.T) {
	pgs, _ := group(t, 3, 2*time.Second)
	_, err := pgs[0].Split([]int{1, 2}, "x", 0)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "not among the child's ranks")
	_, err = pgs[0].Split([]int{0, 3}, "x", 0)
	require.ErrorContains(t, err, "out of range")
	_, err = pgs[0].Split([]int{0, 0}, "x", 0)
	require.ErrorContains(t, err, "listed twice")
	// Ranks that list other ranks fail alike instead of pairing up.
	_, errs := splitAll(t, pgs, [][]int{{0, 1}, {1, 0}, nil}, "y")
	for r := range 2 {
		require.ErrorIs(t, errs[r], ErrInvalid, "rank %d", r)
		require.ErrorContains(t, errs[r], "other ranks")
	}
}

func TestSplitChildClosesAndAbortsAlone(t *testing.T) {
	pgs := connectGroup(t, 3, assemble.TransportAuto, nil)
	kids, errs := splitAll(t, pgs, [][]int{{0, 1}, {0, 1}, {2}}, "c")
	requireAllOK(t, errs)
	// A pending receive of the child ends at once when it aborts; the
	// parent and the other child go on.
	w, err := kids[0].Recv(make([]byte, 8), 1, 3, Opts{})
	require.NoError(t, err)
	start := time.Now()
	kids[0].Abort(errors.New("stop"))
	require.Error(t, w.Err())
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, []int64{111, 111, 111}, sumOn(t, pgs, []int64{1, 10, 100}))
	kids[1].Close()
	// Closing the parent keeps the connections for a child still open.
	more, errs := splitAll(t, pgs, [][]int{{0, 2}, {1}, {0, 2}}, "d")
	requireAllOK(t, errs)
	var wg sync.WaitGroup
	for _, pg := range pgs {
		wg.Add(1)
		go func() { defer wg.Done(); pg.Close() }()
	}
	wg.Wait()
	require.Equal(t, []int64{101, 0, 101}, sumOn(t, []*ProcessGroup{more[0], nil, more[2]}, []int64{1, 10, 100}))
	_, err = pgs[0].Split([]int{0}, "e", 0)
	require.ErrorIs(t, err, ErrClosed)
}

func TestSplitChildsPeersLearnThatARankLeft(t *testing.T) {
	// A rank that aborts or closes a child leaves the connections open;
	// its peers in the child fail their receives from it at once, as a
	// closed connection fails a store-formed group's, not at their timeout.
	for _, st := range splitTransports {
		t.Run(st.name, func(t *testing.T) {
			pgs := st.group(t, 3, 20*time.Second)
			lists := [][]int{{0, 1}, {0, 1}, {2}}
			kids, errs := splitAll(t, pgs, lists, "c")
			requireAllOK(t, errs)
			w, err := kids[1].Recv(make([]byte, 8), 0, 3, Opts{})
			require.NoError(t, err)
			start := time.Now()
			kids[0].Abort(errors.New("stop here"))
			err = w.Err()
			require.ErrorIs(t, err, transport.ErrPeerGone)
			require.ErrorContains(t, err, "rank 0")
			require.ErrorContains(t, err, "stop here")
			require.Less(t, time.Since(start), 2*time.Second)

			kids, errs = splitAll(t, pgs, lists, "d")
			requireAllOK(t, errs)
			require.Equal(t, []int64{11, 11, 100}, sumOn(t, kids, []int64{1, 10, 100}))
			require.NoError(t, kids[0].Close())
			start = time.Now()
			w, err = kids[1].AllReduce(i64s(1, 2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
			if err == nil {
				err = w.Err()
			}
			require.ErrorIs(t, err, transport.ErrPeerGone)
			require.Less(t, time.Since(start), 2*time.Second)
			// The parent and the other ranks' groups go on.
			require.Equal(t, []int64{111, 111, 111}, sumOn(t, pgs, []int64{1, 10, 100}))
		})
	}
}

func TestSplitIDsStayApartAcrossOverlappingChildren(t *testing.T) {
	// Ranks 0 and 1 split twice among themselves before a child of 0
	// and 2: rank 0 has used more ids than rank 2, and the child takes
	// one neither has used.
	pgs, _ := group(t, 3, 5*time.Second)
	for i := range 2 {
		_, errs := splitAll(t, pgs, [][]int{{0, 1}, {0, 1}, {2}}, fmt.Sprint("a", i))
		requireAllOK(t, errs)
	}
	kids, errs := splitAll(t, pgs, [][]int{{0, 2}, {1}, {0, 2}}, "b")
	requireAllOK(t, errs)
	require.Equal(t, kids[0].sub.id, kids[2].sub.id)
	require.Equal(t, uint16(3), kids[0].sub.id)
	require.Equal(t, []int64{101, 10, 101}, sumOn(t, kids, []int64{1, 10, 100}))
}

func TestSplitChildFindsDesyncAlone(t *testing.T) {
	cases := []struct {
		name       string
		usual, odd call
		want       string
	}{
		{"op", allReduceOf(1024, f32), broadcastOf(1024, reduce.Float32, 0),
			"rank 1 called broadcast(float32[1024], root=0) where rank 0 called all_reduce(float32[1024], SUM)"},
		{"all_to_all splits", allToAllOf(func(r, to int) int { return 2 }), rank1SendsMore, "rank 1 called all_to_all(float32, 3 elements to rank 0, 2 from it) where rank 0 called all_to_all(float32, 2 elements to rank 1, 2 from it)"},
	}
	for _, st := range splitTransports {
		for _, tc := range cases {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				pgs := st.group(t, 4, 20*time.Second)
				// Children {3, 1} and {0, 2}: the first one's rank 1 (group
				// rank 1) calls another collective.
				lists := [][]int{{0, 2}, {3, 1}, {0, 2}, {3, 1}}
				kids, errs := splitAll(t, pgs, lists, "c")
				requireAllOK(t, errs)
				errs, took := runDesyncOn(t, []*ProcessGroup{kids[3], kids[1]}, tc.usual, tc.odd, false)
				for r, err := range errs {
					require.ErrorIs(t, err, ErrDesync, "rank %d: %v", r, err)
					require.Contains(t, err.Error(), tc.want, "rank %d", r)
					require.Less(t, took[r], 2*time.Second, "rank %d", r)
				}
				// The other child and the parent go on.
				require.Equal(t, []int64{101, 0, 101, 0}, sumOn(t, []*ProcessGroup{kids[0], nil, kids[2], nil}, []int64{1, 10, 100, 1000}))
				require.Equal(t, []int64{1111, 1111, 1111, 1111}, sumOn(t, pgs, []int64{1, 10, 100, 1000}))
			})
		}
	}
}

// unsplittable is an offload that cannot serve a child (as several
// hosts' arenas and MPI's collectives cannot).
type unsplittable struct{ backend.Offload }

func (unsplittable) Name() string { return "test" }

func TestSplitRefusesWhereTheOffloadCannotServeAChild(t *testing.T) {
	pgs, _ := group(t, 2, 2*time.Second)
	for _, pg := range pgs {
		pg.mu.Lock()
		pg.offload = unsplittable{}
		pg.mu.Unlock()
	}
	// Every rank refuses at once, before any exchange.
	_, errs := splitAll(t, pgs, [][]int{{0, 1}, {0, 1}}, "c")
	for r, err := range errs {
		require.ErrorIs(t, err, ErrNotSplittable, "rank %d", r)
	}
	for _, pg := range pgs {
		pg.mu.Lock()
		pg.offload = nil
		pg.mu.Unlock()
	}
}
