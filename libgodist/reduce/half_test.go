package reduce

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHalfRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    *smallFmt
		to   func(uint16) float32
		from func(float32) uint16
	}{
		{"float16", refF16, Float16ToFloat32, Float32ToFloat16},
		{"bfloat16", refBF16, BFloat16ToFloat32, Float32ToBFloat16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for p := 0; p < 1<<16; p++ {
				h := uint16(p)
				v := tc.to(h)
				if tc.f.isNaN(h) {
					require.True(t, v != v, "%04x -> %v", h, v)
					back := tc.from(v)
					require.True(t, tc.f.isNaN(back), "%04x -> %x", h, back)
					require.Equal(t, h&0x8000, back&0x8000, "NaN sign of %04x", h)
					continue
				}
				ref := tc.f.decode(h)
				require.Equal(t, math.Float64bits(ref), math.Float64bits(float64(v)), "decode %04x", h)
				require.Equal(t, h, tc.from(v), "round trip %04x", h)
			}
		})
	}
	// Signaling NaN payloads come back quiet but NaN.
	assert.Equal(t, uint16(0x7e01), Float32ToFloat16(math.Float32frombits(0x7f802000)))
	assert.Equal(t, uint16(0x7fc1), Float32ToBFloat16(math.Float32frombits(0x7f810000)))
	assert.Equal(t, uint16(0x7fc0), Float32ToBFloat16(math.Float32frombits(0x7f800001)))
	assert.Equal(t, uint16(0x7e00), f32to16(math.Float32frombits(0xff812345)), "kernel conversion is canonical")
	assert.Equal(t, uint16(0x7fc0), f32tobf16(math.Float32frombits(0xff812345)), "kernel conversion is canonical")
}

// halfRoundingInputs returns float32 values around every rounding boundary
// of f (each midpoint between adjacent values, one float32 ulp either side,
// the values themselves) plus random float32 bit patterns.
func halfRoundingInputs(f *smallFmt, random int) []float32 {
	var in []float32
	next := func(x float32, d int) float32 {
		return math.Float32frombits(uint32(int32(math.Float32bits(x)) + int32(d)))
	}
	for p := 0; p+1 < len(f.finite); p++ {
		mid := float32((f.finite[p] + f.finite[p+1]) / 2) // exact: midpoints have few bits
		for _, v := range []float32{float32(f.finite[p]), mid, next(mid, 1), next(mid, -1)} {
			if math.IsInf(float64(v), 0) {
				continue
			}
			in = append(in, v, -v)
		}
	}
	r := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < random; i++ {
		in = append(in, math.Float32frombits(r.Uint32()))
	}
	in = append(in, float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.MaxFloat32, 65519.99, 65520, 65536, 1e-8, 2.98e-8, 2.99e-8)
	return in
}

func TestHalfRounding(t *testing.T) {
	random := 300000
	if testing.Short() {
		random = 20000
	}
	for _, tc := range []struct {
		name string
		f    *smallFmt
		conv []func(float32) uint16
	}{
		{"float16", refF16, []func(float32) uint16{Float32ToFloat16, f32to16}},
		{"bfloat16", refBF16, []func(float32) uint16{Float32ToBFloat16, f32tobf16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range halfRoundingInputs(tc.f, random) {
				if v != v {
					for _, conv := range tc.conv {
						require.True(t, tc.f.isNaN(conv(v)))
					}
					continue
				}
				want := tc.f.round(float64(v))
				for _, conv := range tc.conv {
					if got := conv(v); got != want {
						t.Fatalf("%g (%08x): want %04x got %04x", v, math.Float32bits(v), want, got)
					}
				}
			}
		})
	}
	// A few hand-checked values.
	assert.Equal(t, uint16(0x7bff), Float32ToFloat16(65504))
	assert.Equal(t, uint16(0x7bff), Float32ToFloat16(65519.996))
	assert.Equal(t, uint16(0x7c00), Float32ToFloat16(65520))
	assert.Equal(t, uint16(0x0001), Float32ToFloat16(0x1p-24))
	assert.Equal(t, uint16(0x0000), Float32ToFloat16(0x1p-25))        // tie to even (0)
	assert.Equal(t, uint16(0x0001), Float32ToFloat16(0x1.000002p-25)) // just above the tie
	assert.Equal(t, uint16(0x0002), Float32ToFloat16(0x1.8p-24))      // tie to even (2)
	assert.Equal(t, uint16(0x3c00), Float32ToFloat16(1+0x1p-11))      // tie to even
	assert.Equal(t, uint16(0x3c02), Float32ToFloat16(1+3*0x1p-11))    // tie to even
	assert.Equal(t, uint16(0x3f80), Float32ToBFloat16(1+0x1p-8))
	assert.Equal(t, uint16(0x3f82), Float32ToBFloat16(1+3*0x1p-8))
	assert.Equal(t, uint16(0x7f80), Float32ToBFloat16(math.MaxFloat32))
}
