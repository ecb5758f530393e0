package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
)

// TestBroadcastPipelinedSegments runs the tree with concurrent children in
// 64-byte segments and whole, from every root.
func TestBroadcastPipelinedSegments(t *testing.T) {
	forSizes(t, 1, func(t *testing.T, n, count int) {
		for _, seg := range []int{64, 8 * count} {
			for root := range n {
				bufs := make([][]byte, n)
				for r := range bufs {
					bufs[r] = i64s(algoInput(r, count)...)
				}
				requireNoErrs(t, onComms(t, n, algo.Default(), false, func(c *comm) error {
					return broadcastPipelined(c, bufs[c.rank], root, max(seg, 1))
				}))
				for r := range bufs {
					require.Equal(t, algoInput(root, count), toI64(bufs[r]), "rank %d, root %d, seg %d", r, root, seg)
				}
			}
		}
	})
}
