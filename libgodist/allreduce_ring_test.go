package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAllReduceRing runs the pipelined ring with 64-byte segments, so a
// chunk travels in many segments, some of them shorter than the rest.
func TestAllReduceRing(t *testing.T) {
	forSizes(t, 2, func(t *testing.T, n, count int) {
		bufs := make([][]byte, n)
		for r := range bufs {
			bufs[r] = i64s(algoInput(r, count)...)
		}
		requireNoErrs(t, onComms(t, n, tinyTuning(), false, func(c *comm) error { return allReduceRing(c, bufs[c.rank], sumI64) }))
		for r := range bufs {
			require.Equal(t, sumOf(n, count), toI64(bufs[r]), "rank %d", r)
		}
	})
}
