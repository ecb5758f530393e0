package reduce

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refScaleDivide multiplies (scale) or divides every float element (both
// parts of complex) by factor and returns the expected bits; integer
// dtypes are not handled here.
func refScaleDivide(dt DType, in []byte, scale bool, factor float64, n int) []byte {
	out := bytes.Clone(in)
	part := partOf(dt)
	cnt := len(in) / part.Size()
	for i := 0; i < cnt; i++ {
		u := getU(part, in, i)
		switch part {
		case Float32:
			x := float64(math.Float32frombits(uint32(u)))
			var r float64
			if scale {
				r = refMul(x, float64(float32(factor)), to32)
			} else {
				r = refDiv(x, n, to32)
			}
			putU(part, out, i, uint64(math.Float32bits(float32(r))))
		case Float64:
			x := math.Float64frombits(u)
			var r float64
			if scale {
				r = refMul(x, factor, to64)
			} else {
				r = refDiv(x, n, to64)
			}
			putU(part, out, i, math.Float64bits(r))
		case Float16, BFloat16:
			f := refF16
			if part == BFloat16 {
				f = refBF16
			}
			x := f.decode(uint16(u))
			var r float64
			if scale {
				r = refMul(x, float64(float32(factor)), to32)
			} else {
				r = refDiv(x, n, to32)
			}
			if math.IsNaN(r) {
				putU(part, out, i, uint64(f.infBits()|1)) // any NaN; compared by isNaN
			} else {
				putU(part, out, i, uint64(f.round(r)))
			}
		}
	}
	return out
}

// sameFloats compares float buffers treating any two NaNs as equal.
func sameFloats(t *testing.T, dt DType, want, got []byte) {
	t.Helper()
	part := partOf(dt)
	isNaN := func(u uint64) bool {
		switch part {
		case Float16:
			return refF16.isNaN(uint16(u))
		case BFloat16:
			return refBF16.isNaN(uint16(u))
		case Float32:
			return math.IsNaN(float64(math.Float32frombits(uint32(u))))
		}
		return math.IsNaN(math.Float64frombits(u))
	}
	for i := 0; i < len(want)/part.Size(); i++ {
		w, g := getU(part, want, i), getU(part, got, i)
		if w != g && !(isNaN(w) && isNaN(g)) {
			t.Fatalf("element %d: want %x got %x", i, w, g)
		}
	}
}

func TestScale(t *testing.T) {
	factors := []float64{0.5, 2, 1.0 / 3, -0.125, 0, math.Inf(1), 1e-30, 1e30, 0.1, 3.0000001}
	for _, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			buf := make([]byte, 8*dt.Size())
			if dt.kind() == kindInt || dt == Bool {
				err := Scale(dt, buf, 2)
				require.ErrorIs(t, err, ErrUnsupported)
				return
			}
			r := rand.New(rand.NewPCG(3, uint64(dt)))
			for _, f := range factors {
				in, _ := genBufs(r, dt, 257)
				got := bytes.Clone(in)
				require.NoError(t, Scale(dt, got, f))
				sameFloats(t, dt, refScaleDivide(dt, in, true, f, 0), got)
			}
			require.NoError(t, Scale(dt, nil, 2))
		})
	}
	// Complex: both parts scaled by the real factor.
	c := make([]byte, 16)
	binary.LittleEndian.PutUint64(c, math.Float64bits(1.5))
	binary.LittleEndian.PutUint64(c[8:], math.Float64bits(-4))
	require.NoError(t, Scale(Complex128, c, 2))
	assert.Equal(t, 3.0, math.Float64frombits(binary.LittleEndian.Uint64(c)))
	assert.Equal(t, -8.0, math.Float64frombits(binary.LittleEndian.Uint64(c[8:])))
	assert.ErrorIs(t, Scale(DType(12), nil, 1), ErrUnsupported)
}

func TestDivide(t *testing.T) {
	ns := []int{1, 2, 3, 7, 10, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<31 - 1, 1 << 31, 1<<62 + 3, math.MaxInt}
	for _, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			buf := make([]byte, 8*dt.Size())
			if dt == Bool {
				require.ErrorIs(t, Divide(dt, buf, 2), ErrUnsupported)
				return
			}
			require.Error(t, Divide(dt, buf, 0))
			require.Error(t, Divide(dt, buf, -2))
			require.NoError(t, Divide(dt, nil, 3))
			r := rand.New(rand.NewPCG(4, uint64(dt)))
			for _, n := range ns {
				in, _ := genBufs(r, dt, 257)
				got := bytes.Clone(in)
				require.NoError(t, Divide(dt, got, n))
				if dt.kind() != kindInt {
					sameFloats(t, dt, refScaleDivide(dt, in, false, 0, n), got)
					continue
				}
				for i := 0; i < len(in)/dt.Size(); i++ {
					bits := uint(8 * dt.Size())
					u := getU(dt, in, i)
					var want uint64
					if dt == Uint8 {
						want = u / uint64(n)
					} else {
						x := int64(u<<(64-bits)) >> (64 - bits) // sign-extend
						// Truncating division computed without Go's operator.
						q := uint64(abs64(x)) / uint64(n)
						if x < 0 {
							q = -q
						}
						want = q
					}
					mask := uint64(1)<<bits - 1
					require.Equal(t, want&mask, getU(dt, got, i), "%v / %d elem %x", dt, n, u)
				}
			}
		})
	}
	// The classic cases.
	ints := []int32{-7, 7, -1, 1, -8, math.MinInt32, math.MaxInt32}
	buf := make([]byte, 4*len(ints))
	for i, v := range ints {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(v))
	}
	require.NoError(t, Divide(Int32, buf, 2))
	var got []int32
	for i := range ints {
		got = append(got, int32(binary.LittleEndian.Uint32(buf[4*i:])))
	}
	assert.Equal(t, []int32{-3, 3, 0, 0, -4, math.MinInt32 / 2, math.MaxInt32 / 2}, got)
	i8 := []byte{0x80, 0x7f, 0xf9} // -128, 127, -7
	require.NoError(t, Divide(Int8, i8, 128))
	assert.Equal(t, []byte{0xff, 0, 0}, i8) // -1, 0, 0
	f := make([]byte, 4)
	binary.LittleEndian.PutUint32(f, math.Float32bits(1))
	require.NoError(t, Divide(Float32, f, 3))
	assert.Equal(t, float32(1)/3, math.Float32frombits(binary.LittleEndian.Uint32(f)))
	assert.ErrorIs(t, Divide(DType(12), nil, 1), ErrUnsupported)
}

func abs64(x int64) uint64 {
	if x < 0 {
		return -uint64(x)
	}
	return uint64(x)
}
