package reduce

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tests of the vector kernels for 8- to 64-bit elements (wide_amd64.s)
// against the Go loops, which TestCombineMatchesReference and
// TestCombineSpecialPairs check against the math/big reference. As in
// half_vec_test.go, every comparison runs the same inputs with the vector
// kernels on and off and wants identical bytes.

// widePairs returns two buffers of n elements of dt: every pair of the
// dtype's special values first (floats), then random elements from genBufs.
func widePairs(r *rand.Rand, dt DType, n int) (a, b []byte) {
	part := partOf(dt)
	var specials []uint64
	switch part {
	case Float32:
		for _, v := range f32Specials {
			specials = append(specials, uint64(v))
		}
	case Float64:
		specials = f64Specials
	}
	a, b = genBufs(r, dt, n)
	k := 0
	for _, x := range specials {
		for _, y := range specials {
			if (k+1)*part.Size() > len(a) {
				return a, b
			}
			putU(part, a, k, x)
			putU(part, b, k, y)
			k++
		}
	}
	return a, b
}

// TestWideVectorCombine compares the vector and Go kernels for every
// operation on 8- to 64-bit elements: special value pairs and random
// values, every length from 1 to 67 elements at several starting elements
// (so the vector part and the Go tail vary), unaligned buffers, in place on
// either operand and with the operands swapped.
func TestWideVectorCombine(t *testing.T) {
	dts := []DType{Int8, Uint8, Int16, Int32, Int64, Float32, Float64, Complex64, Complex128}
	for _, dt := range dts {
		for _, op := range allOps {
			if Check(op, dt) != nil {
				continue
			}
			t.Run(op.String()+"/"+dt.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(op)+100, uint64(dt)))
				n := 40000 / dt.Size() * 2
				a, b := widePairs(r, dt, n)
				want := make([]byte, len(a))
				withVec(false, func() { require.NoError(t, Combine3(op, dt, want, a, b)) })
				requireSameBytes(t, dt, refCombine(op, dt, a[:4096], b[:4096]), want[:4096], a[:4096], b[:4096])

				checkVecCombine(t, op, dt, a, b, want, false)
			})
		}
	}
}

// TestWideVectorScaleDivide compares the vector and Go loops of Scale and
// Divide for float32 and float64 (and so complex) on special and random
// values, for factors across the whole range, NaN and infinities included.
func TestWideVectorScaleDivide(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	factors := []float64{1, -1, 0.5, 2, 1.0 / 3, -0.1, 0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(),
		1e-30, 1e30, 0x1p-1000, 0x1p1000, 1e-45, 5e-324, math.MaxFloat32, math.MaxFloat64}
	for range 16 {
		factors = append(factors, float64(math.Float32frombits(r.Uint32())), math.Float64frombits(r.Uint64()))
	}
	ns := []int{2, 3, 7, 10, 127, 1000, 1 << 20, 1<<31 - 1, math.MaxInt}
	steps := scaleDivideSteps(factors, ns)
	for _, dt := range []DType{Float32, Float64, Complex64, Complex128} {
		in, _ := widePairs(r, dt, 20011)
		for _, s := range steps {
			want := bytes.Clone(in)
			withVec(false, func() { require.NoError(t, s.f(dt, want)) })
			got := unaligned(in)
			withVec(true, func() { require.NoError(t, s.f(dt, got)) })
			requireSameBytes(t, dt, want, got, in, in)
			sz := dt.Size()
			for m := 1; m <= 67; m++ {
				lo := sz * (m * 131)
				part := bytes.Clone(in[lo : lo+sz*m])
				withVec(true, func() { require.NoError(t, s.f(dt, part)) })
				require.Equal(t, want[lo:lo+sz*m], part, "%s %s n=%d", dt, s.name, m)
			}
		}
	}
}
