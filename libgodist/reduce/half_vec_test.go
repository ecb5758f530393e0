package reduce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tests of the float16/bfloat16 vector kernels (half_amd64.s) against the Go
// loops, which TestCombineMatchesReference and friends check against the
// math/big reference. Every comparison runs the same inputs with the vector
// kernels on and off and wants identical bytes; where the CPU has no vector
// kernels both runs take the Go loops and the tests still check them
// against the reference.

// withVec runs f with the vector kernels on (as far as the CPU has them) or
// off.
func withVec(on bool, f func()) {
	defer func() { useAVX2, useF16C = hasAVX2, hasF16C }()
	useAVX2, useF16C = on && hasAVX2, on && hasF16C
	f()
}

var (
	f16Edge = []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x03ff, 0x83ff, 0x0400, 0x8400, 0x0401,
		0x7bff, 0xfbff, 0x7bfe, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfc01, 0x7dff, 0x7fff, 0xffff,
		0x3c00, 0xbc00, 0x3c01, 0xbc01, 0x3bff, 0x0200, 0x1400, 0x1000, 0x5bff, 0x5c00, 0x7800, 0x2400}
	bf16Edge = []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x8080, 0x0081,
		0x7f7f, 0xff7f, 0x7f7e, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xff81, 0x7fc1, 0x7fff, 0xffff,
		0x3f80, 0xbf80, 0x3f81, 0xbf81, 0x3f7f, 0x4000, 0x3b80, 0x0040, 0x1f80, 0x5f80, 0x7f00, 0x2000}
)

func halfEdges(dt DType) []uint16 {
	if dt == Float16 {
		return f16Edge
	}
	return bf16Edge
}

func putHalves(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, u := range v {
		binary.LittleEndian.PutUint16(b[2*i:], u)
	}
	return b
}

// halfPairs returns every pair of edge values, every pattern paired with a
// random one and with a neighbour and its negation, then random pairs.
func halfPairs(dt DType, r *rand.Rand) (xs, ys []uint16) {
	edge := halfEdges(dt)
	for _, a := range edge {
		for _, b := range edge {
			xs, ys = append(xs, a), append(ys, b)
		}
	}
	for p := range 1 << 16 {
		h := uint16(p)
		xs = append(xs, h, h, h, h)
		ys = append(ys, uint16(r.Uint32()), h^0x8000, h+1, edge[r.IntN(len(edge))])
	}
	for range 4096 {
		xs, ys = append(xs, uint16(r.Uint32())), append(ys, uint16(r.Uint32()))
	}
	return xs, ys
}

// checkVecCombine runs op on a and b with the vector kernels on and wants
// want, the Go loops' result: on the whole buffers, with the operands
// swapped, on unaligned buffers, in place on either operand, and on every
// length from 1 to 67 elements at nine starting elements (so the vector
// part and the Go tail vary); with ref, the first of each also against the
// reference.
func checkVecCombine(t *testing.T, op Op, dt DType, a, b, want []byte, ref bool) {
	t.Helper()
	run := func(dst, a, b []byte) {
		withVec(true, func() { require.NoError(t, Combine3(op, dt, dst, a, b)) })
	}
	got := make([]byte, len(a))
	run(got, a, b)
	requireSameBytes(t, dt, want, got, a, b)
	run(got, b, a)
	requireSameBytes(t, dt, want, got, a, b)
	ua, ub, ud := unaligned(a), unaligned(b), unaligned(make([]byte, len(a)))
	run(ud, ua, ub)
	requireSameBytes(t, dt, want, ud, a, b)
	ip := bytes.Clone(a)
	run(ip, ip, b)
	requireSameBytes(t, dt, want, ip, a, b)
	ip = bytes.Clone(b)
	run(ip, a, ip)
	requireSameBytes(t, dt, want, ip, a, b)
	sz := dt.Size()
	for off := 0; off <= 8; off++ {
		for n := 1; n <= 67; n++ {
			lo, hi := sz*(off*97), sz*(off*97+n)
			sa, sb := unaligned(a[lo:hi]), b[lo:hi]
			d := make([]byte, hi-lo)
			run(d, sa, sb)
			requireSameBytes(t, dt, want[lo:hi], d, sa, sb)
			ip := bytes.Clone(sb)
			run(ip, sa, ip)
			requireSameBytes(t, dt, want[lo:hi], ip, sa, sb)
			if ref && off == 0 {
				requireSameBytes(t, dt, refCombine(op, dt, sa, sb), d, sa, sb)
			}
		}
	}
}

// unaligned copies b to a buffer starting at an odd address.
func unaligned(b []byte) []byte {
	return append(make([]byte, 1, len(b)+1), b...)[1:]
}

// TestHalfVectorCombine compares the vector and Go kernels for float16 and
// bfloat16 SUM, PRODUCT, MIN and MAX on edge values, on every bit pattern
// and on random values: the whole buffer, every length from 1 to 67 at
// every starting element from 0 to 8 (so the vector part and the Go tail
// vary), unaligned buffers, in place on either operand and with the
// operands swapped. Short prefixes are also checked against the reference.
func TestHalfVectorCombine(t *testing.T) {
	for _, dt := range []DType{Float16, BFloat16} {
		for _, op := range []Op{Sum, Product, Min, Max, Avg, PremulSum} {
			t.Run(op.String()+"/"+dt.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(op), uint64(dt)))
				xs, ys := halfPairs(dt, r)
				a, b := putHalves(xs), putHalves(ys)
				want := make([]byte, len(a))
				withVec(false, func() { require.NoError(t, Combine3(op, dt, want, a, b)) })
				checkVecCombine(t, op, dt, a, b, want, true)

				// The edge pairs against the reference.
				ne := 2 * len(halfEdges(dt)) * len(halfEdges(dt))
				requireSameBytes(t, dt, refCombine(op, dt, a[:ne], b[:ne]), want[:ne], a[:ne], b[:ne])
			})
		}
	}
}

// scaleStep is one Scale or Divide call of the vector-vs-loop tests.
type scaleStep struct {
	name string
	f    func(dt DType, buf []byte) error
}

// scaleDivideSteps is Scale by every factor, then Divide by every n.
func scaleDivideSteps(factors []float64, ns []int) []scaleStep {
	var steps []scaleStep
	for _, f := range factors {
		steps = append(steps, scaleStep{fmt.Sprintf("Scale(%g)", f), func(dt DType, buf []byte) error { return Scale(dt, buf, f) }})
	}
	for _, n := range ns {
		steps = append(steps, scaleStep{fmt.Sprintf("Divide(%d)", n), func(dt DType, buf []byte) error { return Divide(dt, buf, n) }})
	}
	return steps
}

// TestHalfVectorScaleDivide compares the vector and Go loops of Scale and
// Divide for float16 and bfloat16 on every bit pattern, for factors that
// send results over the whole float32 range (random bit patterns included),
// and odd lengths; a few are checked against the reference.
func TestHalfVectorScaleDivide(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	factors := []float64{1, -1, 0.5, 2, 1.0 / 3, -0.1, 0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(),
		1e-30, 1e30, 0x1p-20, 0x1p-40, 0x1p100, 65504, 1.0 / 65504, 3.0000001, 1e-45, math.MaxFloat32}
	for range 24 {
		factors = append(factors, float64(math.Float32frombits(r.Uint32())))
	}
	ns := []int{2, 3, 7, 10, 127, 1000, 1 << 20, 1<<31 - 1, math.MaxInt}
	var all []uint16
	for p := range 1 << 16 {
		all = append(all, uint16(p))
	}
	all = append(all, 0x3c00, 0x1234, 0xabcd) // 65539 elements: a tail of 3
	in := putHalves(all)
	steps := scaleDivideSteps(factors, ns)
	for _, dt := range []DType{Float16, BFloat16} {
		for _, s := range steps {
			want := bytes.Clone(in)
			withVec(false, func() { require.NoError(t, s.f(dt, want)) })
			got := unaligned(in)
			withVec(true, func() { require.NoError(t, s.f(dt, got)) })
			requireSameBytes(t, dt, want, got, in, in)
			for n := 1; n <= 67; n++ {
				lo := 2 * (n * 131)
				part := bytes.Clone(in[lo : lo+2*n])
				withVec(true, func() { require.NoError(t, s.f(dt, part)) })
				require.Equal(t, want[lo:lo+2*n], part, "%s %s n=%d", dt, s.name, n)
			}
		}
		// Reference check on a random sample.
		for _, f := range []float64{1.0 / 3, -7.5, 1e-30} {
			part := bytes.Clone(in[2*1000 : 2*1257])
			got := bytes.Clone(part)
			require.NoError(t, Scale(dt, got, f))
			sameFloats(t, dt, refScaleDivide(dt, part, true, f, 0), got)
		}
		part := bytes.Clone(in[2*30000 : 2*30257])
		got := bytes.Clone(part)
		require.NoError(t, Divide(dt, got, 3))
		sameFloats(t, dt, refScaleDivide(dt, part, false, 0, 3), got)
	}
}

// TestHalfVectorAvailable documents which kernels this machine tests.
func TestHalfVectorAvailable(t *testing.T) {
	t.Logf("AVX2 kernels: %v, F16C kernels: %v", hasAVX2, hasF16C)
	if hasF16C {
		require.True(t, hasAVX2)
	}
}
