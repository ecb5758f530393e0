package nccl

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
)

// TestRules checks Rules, which python/godist/_nccl.py checks its inputs
// with, against torch's nccl backend: no int16 or complex type, no
// bitwise op, PREMUL_SUM on floating point only, and bool reduced with
// SUM, PRODUCT, MIN and MAX (as MAX and MIN).
func TestRules(t *testing.T) {
	all := []reduce.Op{reduce.Sum, reduce.Avg, reduce.Product, reduce.Min, reduce.Max}
	float := append(append([]reduce.Op{}, all...), reduce.PremulSum)
	want := map[reduce.DType][]reduce.Op{
		reduce.Float16: float, reduce.BFloat16: float, reduce.Float32: float, reduce.Float64: float,
		reduce.Int8: all, reduce.Uint8: all, reduce.Int32: all, reduce.Int64: all,
		reduce.Bool: {reduce.Sum, reduce.Product, reduce.Min, reduce.Max},
	}
	ops, complexOps := Rules()
	assert.Equal(t, want, ops)
	assert.Equal(t, []reduce.Op{reduce.Sum, reduce.Avg, reduce.PremulSum}, complexOps)
	for d := reduce.DType(0); d.Valid(); d++ {
		for o := reduce.Op(0); o.Valid(); o++ {
			if err := Reduces(o, d); err != nil {
				require.True(t, errors.Is(err, backend.ErrUnsupported), "%v on %v: %v", o, d, err)
			}
		}
	}
}
