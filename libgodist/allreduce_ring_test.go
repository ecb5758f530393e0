package libgodist

import "testing"

// TestAllReduceRing runs the pipelined ring with 64-byte segments, so a
// chunk travels in many segments, some of them shorter than the rest.
func TestAllReduceRing(t *testing.T) { checkAllReduceAlgo(t, 2, tinyTuning(), allReduceRing) }
