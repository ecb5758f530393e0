package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAllReduceRingDirect(t *testing.T) {
	forSizes(t, 1, func(t *testing.T, n, count int) {
		bufs := make([][]byte, n)
		for r := range bufs {
			bufs[r] = i64s(algoInput(r, count)...)
		}
		requireNoErrs(t, onComms(t, n, DefaultTuning(), false, func(c *comm) error {
			return allReduceRingDirect(c, bufs[c.rank], sumI64)
		}))
		for r := range bufs {
			require.Equal(t, sumOf(n, count), toI64(bufs[r]), "rank %d", r)
		}
	})
}
