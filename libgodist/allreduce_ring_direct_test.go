package libgodist

import "testing"

func TestAllReduceRingDirect(t *testing.T) {
	checkAllReduceAlgo(t, 1, DefaultTuning(), allReduceRingDirect)
}
