package libgodist

import (
	"testing"

	"github.com/godist/godist/libgodist/algo"
)

func TestAllReduceRingDirect(t *testing.T) {
	checkAllReduceAlgo(t, 1, algo.Default(), allReduceRingDirect)
}
