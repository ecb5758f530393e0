package libgodist

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// The algorithm tests (one file per algorithm) run an algorithm function
// straight over comms of an in-memory group, without a ProcessGroup: an
// algorithm sees only comm, and so do they.

// algoSizes are the world sizes every algorithm is checked at.
var algoSizes = []int{1, 2, 3, 4, 5, 6, 7, 8, 13}

// algoCounts are element counts: none, one, odd, and around a small
// segment (tinyTuning cuts messages into 64-byte segments).
var algoCounts = []int{0, 1, 7, 15, 16, 17, 1000}

// tinyTuning cuts ring steps into 64-byte segments and takes the
// pipelined broadcast from 64 bytes, so small inputs take every path.
func tinyTuning() algo.Table {
	t := algo.Default()
	t.AllReduceRDMax, t.RingSegment, t.RingDirectMax, t.RingDirectPairMax = 16, 64, 64, 64
	t.BroadcastTreeMin, t.BroadcastSegment, t.BroadcastSpareSegment = 64, 64, 64
	return t
}

// onComms runs f concurrently on the comm of every rank of an in-memory
// group of n ranks (spare: the ranks fit their cores) and returns each
// rank's error. Every wait is bounded.
func onComms(t testing.TB, n int, tune algo.Table, spare bool, f func(c *comm) error) []error {
	t.Helper()
	net := transport.NewMemNetwork(n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &comm{tr: net.Transport(r), tune: &tune, ctx: ctx, seq: 1, rank: r, size: n, spare: spare, allSpare: spare}
			errs[r] = f(c)
		}()
	}
	wg.Wait()
	for r := range n {
		_ = net.Transport(r).Close()
	}
	return errs
}

// algoInput is rank r's data: count int64s, exact in float32 too.
func algoInput(r, count int) []int64 { return input(r, count) }

// sumOf is the element-wise sum of every rank's algoInput.
func sumOf(n, count int) []int64 {
	want := make([]int64, count)
	for r := range n {
		for i, v := range algoInput(r, count) {
			want[i] += v
		}
	}
	return want
}

var sumI64 = reduceSpec{dt: reduce.Int64, op: reduce.Sum}

// forSizes runs body as a subtest for every world size and count.
func forSizes(t *testing.T, minSize int, body func(t *testing.T, n, count int)) {
	for _, n := range algoSizes {
		if n < minSize {
			continue
		}
		for _, count := range algoCounts {
			t.Run(fmt.Sprintf("n%d/c%d", n, count), func(t *testing.T) { body(t, n, count) })
		}
	}
}

// requireNoErrs fails on the first rank that failed.
func requireNoErrs(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// checkAllReduceAlgo runs algo, an all-reduce algorithm, at every world
// size from minSize and every count, and checks that every rank ends with
// the sum.
func checkAllReduceAlgo(t *testing.T, minSize int, tune algo.Table, algo func(*comm, []byte, reduceSpec) error) {
	forSizes(t, minSize, func(t *testing.T, n, count int) {
		bufs := make([][]byte, n)
		for r := range bufs {
			bufs[r] = i64s(algoInput(r, count)...)
		}
		requireNoErrs(t, onComms(t, n, tune, false, func(c *comm) error { return algo(c, bufs[c.rank], sumI64) }))
		for r := range bufs {
			require.Equal(t, sumOf(n, count), toI64(bufs[r]), "rank %d", r)
		}
	})
}
