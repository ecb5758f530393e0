package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
)

// TestReduceTree: the root ends with the sum, every other rank's buffer is
// left as it was.
func TestReduceTree(t *testing.T) {
	forSizes(t, 1, func(t *testing.T, n, count int) {
		for root := range n {
			bufs := make([][]byte, n)
			for r := range bufs {
				bufs[r] = i64s(algoInput(r, count)...)
			}
			requireNoErrs(t, onComms(t, n, algo.Default(), false, func(c *comm) error { return reduceTo(c, bufs[c.rank], root, sumI64) }))
			for r := range bufs {
				want := algoInput(r, count)
				if r == root {
					want = sumOf(n, count)
				}
				require.Equal(t, want, toI64(bufs[r]), "rank %d, root %d", r, root)
			}
		}
	})
}
