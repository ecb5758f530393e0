package libgodist

import (
	"testing"

	"github.com/godist/godist/libgodist/algo"
)

func TestAllReduceRD(t *testing.T) { checkAllReduceAlgo(t, 1, algo.Default(), allReduceRD) }
