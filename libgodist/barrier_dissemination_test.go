package libgodist

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
)

// TestBarrierDissemination: no rank leaves the barrier before every rank
// has entered it.
func TestBarrierDissemination(t *testing.T) {
	for _, n := range algoSizes {
		var entered atomic.Int32
		seen := make([]int32, n)
		requireNoErrs(t, onComms(t, n, algo.Default(), false, func(c *comm) error {
			entered.Add(1)
			err := barrierDissemination(c)
			seen[c.rank] = entered.Load()
			return err
		}))
		for r, s := range seen {
			require.Equal(t, int32(n), s, "n %d: rank %d left the barrier early", n, r)
		}
	}
}
