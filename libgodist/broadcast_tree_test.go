package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
)

func TestBroadcastTree(t *testing.T) {
	forSizes(t, 1, func(t *testing.T, n, count int) {
		for root := range n {
			bufs := make([][]byte, n)
			for r := range bufs {
				bufs[r] = i64s(algoInput(r, count)...)
			}
			requireNoErrs(t, onComms(t, n, algo.Default(), false, func(c *comm) error { return broadcastTree(c, bufs[c.rank], root) }))
			for r := range bufs {
				require.Equal(t, algoInput(root, count), toI64(bufs[r]), "rank %d, root %d", r, root)
			}
		}
	})
}
