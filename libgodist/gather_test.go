package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
)

func TestGatherScatter(t *testing.T) {
	forSizes(t, 1, func(t *testing.T, n, count int) {
		for root := range n {
			outs := make([][]byte, n)
			for i := range outs {
				outs[i] = make([]byte, 8*count)
			}
			requireNoErrs(t, onComms(t, n, algo.Default(), false, func(c *comm) error {
				var o [][]byte
				if c.rank == root {
					o = outs
				}
				return gather(c, i64s(algoInput(c.rank, count)...), o, root)
			}))
			for i := range outs {
				require.Equal(t, algoInput(i, count), toI64(outs[i]), "gather to %d, block %d", root, i)
			}
			got := make([][]byte, n)
			for r := range got {
				got[r] = make([]byte, 8*count)
			}
			requireNoErrs(t, onComms(t, n, algo.Default(), false, func(c *comm) error {
				var ins [][]byte
				if c.rank == root {
					ins = make([][]byte, n)
					for i := range ins {
						ins[i] = i64s(algoInput(100+i, count)...)
					}
				}
				return scatter(c, ins, got[c.rank], root)
			}))
			for r := range got {
				require.Equal(t, algoInput(100+r, count), toI64(got[r]), "scatter from %d to %d", root, r)
			}
		}
	})
}
