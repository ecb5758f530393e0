package libgodist

import "testing"

func TestAllReduceRD(t *testing.T) { checkAllReduceAlgo(t, 1, DefaultTuning(), allReduceRD) }
