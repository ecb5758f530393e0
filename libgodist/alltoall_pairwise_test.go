package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
)

// TestAllToAllPairwise sends blocks of uneven sizes: rank r's block for
// rank j holds (count + r + 2j) elements.
func TestAllToAllPairwise(t *testing.T) {
	forSizes(t, 1, func(t *testing.T, n, count int) {
		size := func(from, to int) int { return count + from + 2*to }
		block := func(from, to int) []int64 { return algoInput(from*1000+to, size(from, to)) }
		outs := make([][][]byte, n)
		for r := range outs {
			outs[r] = make([][]byte, n)
			for j := range outs[r] {
				outs[r][j] = make([]byte, 8*size(j, r))
			}
		}
		requireNoErrs(t, onComms(t, n, algo.Default(), false, func(c *comm) error {
			ins := make([][]byte, n)
			for j := range ins {
				ins[j] = i64s(block(c.rank, j)...)
			}
			return allToAllPairwise(c, ins, outs[c.rank])
		}))
		for r := range outs {
			for j := range outs[r] {
				require.Equal(t, block(j, r), toI64(outs[r][j]), "rank %d, block from %d", r, j)
			}
		}
	})
}
