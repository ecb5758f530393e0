package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
)

func TestAllGatherRing(t *testing.T) {
	forSizes(t, 1, func(t *testing.T, n, count int) {
		outs := make([][][]byte, n)
		for r := range outs {
			outs[r] = make([][]byte, n)
			for i := range outs[r] {
				outs[r][i] = make([]byte, 8*count)
			}
		}
		requireNoErrs(t, onComms(t, n, algo.Default(), false, func(c *comm) error {
			return allGatherRing(c, i64s(algoInput(c.rank, count)...), outs[c.rank])
		}))
		for r := range outs {
			for i := range outs[r] {
				require.Equal(t, algoInput(i, count), toI64(outs[r][i]), "rank %d, block %d", r, i)
			}
		}
	})
}
