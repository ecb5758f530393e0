package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
)

// TestReduceScatterRing: rank r ends with the sum over ranks of their
// block r, and no input is modified.
func TestReduceScatterRing(t *testing.T) {
	forSizes(t, 2, func(t *testing.T, n, count int) {
		ins := make([][][]byte, n)
		for r := range ins {
			ins[r] = make([][]byte, n)
			for b := range ins[r] {
				ins[r][b] = i64s(algoInput(r*n+b, count)...)
			}
		}
		outs := make([][]byte, n)
		for r := range outs {
			outs[r] = make([]byte, 8*count)
		}
		requireNoErrs(t, onComms(t, n, algo.Default(), false, func(c *comm) error {
			return reduceScatterRing(c, ins[c.rank], outs[c.rank], sumI64)
		}))
		for r := range outs {
			want := make([]int64, count)
			for q := range n {
				for i, v := range algoInput(q*n+r, count) {
					want[i] += v
				}
			}
			require.Equal(t, want, toI64(outs[r]), "rank %d", r)
			for b := range ins[r] {
				require.Equal(t, algoInput(r*n+b, count), toI64(ins[r][b]), "rank %d's input %d was modified", r, b)
			}
		}
	})
}
