package reduce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var allDTypes = []DType{Float16, BFloat16, Float32, Float64, Complex64, Complex128, Int8, Uint8, Int16, Int32, Int64, Bool}
var allOps = []Op{Sum, Avg, Product, Min, Max, BAnd, BOr, BXor, PremulSum}

func TestDTypeTable(t *testing.T) {
	tests := []struct {
		dt   DType
		name string
		size int
	}{
		{Float16, "float16", 2}, {BFloat16, "bfloat16", 2}, {Float32, "float32", 4}, {Float64, "float64", 8},
		{Complex64, "complex64", 8}, {Complex128, "complex128", 16}, {Int8, "int8", 1}, {Uint8, "uint8", 1},
		{Int16, "int16", 2}, {Int32, "int32", 4}, {Int64, "int64", 8}, {Bool, "bool", 1},
	}
	require.Len(t, tests, len(allDTypes))
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, DType(i), tc.dt)
			assert.Equal(t, tc.name, tc.dt.String())
			assert.Equal(t, tc.size, tc.dt.Size())
			assert.True(t, tc.dt.Valid())
		})
	}
	for _, bad := range []DType{12, 13, 200, 255} {
		assert.False(t, bad.Valid())
		assert.Equal(t, 0, bad.Size())
		assert.Equal(t, fmt.Sprintf("dtype(%d)", bad), bad.String())
	}
}

func TestOpString(t *testing.T) {
	want := []string{"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"}
	for i, name := range want {
		assert.Equal(t, name, Op(i).String())
		assert.True(t, Op(i).Valid())
	}
	assert.Equal(t, []Op{Sum, Avg, Product, Min, Max, BAnd, BOr, BXor, PremulSum}, allOps)
	assert.Equal(t, "op(9)", Op(9).String())
	assert.False(t, Op(9).Valid())
}

// supported is the semantics table written out by hand, independently of
// allowed(): for each dtype, the ops that are defined.
var supported = map[DType]string{
	Float16:    "SUM AVG PRODUCT MIN MAX PREMUL_SUM",
	BFloat16:   "SUM AVG PRODUCT MIN MAX PREMUL_SUM",
	Float32:    "SUM AVG PRODUCT MIN MAX PREMUL_SUM",
	Float64:    "SUM AVG PRODUCT MIN MAX PREMUL_SUM",
	Complex64:  "SUM AVG PRODUCT PREMUL_SUM",
	Complex128: "SUM AVG PRODUCT PREMUL_SUM",
	Int8:       "SUM AVG PRODUCT MIN MAX BAND BOR BXOR",
	Uint8:      "SUM AVG PRODUCT MIN MAX BAND BOR BXOR",
	Int16:      "SUM AVG PRODUCT MIN MAX BAND BOR BXOR",
	Int32:      "SUM AVG PRODUCT MIN MAX BAND BOR BXOR",
	Int64:      "SUM AVG PRODUCT MIN MAX BAND BOR BXOR",
	Bool:       "SUM PRODUCT MIN MAX BAND BOR BXOR",
}

func isSupported(op Op, dt DType) bool {
	for _, s := range strings.Fields(supported[dt]) {
		if s == op.String() {
			return true
		}
	}
	return false
}

func TestCheck(t *testing.T) {
	for _, op := range allOps {
		for _, dt := range allDTypes {
			t.Run(op.String()+"/"+dt.String(), func(t *testing.T) {
				err := Check(op, dt)
				if isSupported(op, dt) {
					require.NoError(t, err)
					return
				}
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrUnsupported)
				assert.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("reduce: %s is not defined for %s tensors", op, dt)), err.Error())
				// Combine reports the same error, even for empty buffers.
				assert.Equal(t, err, Combine(op, dt, nil, nil))
			})
		}
	}
	assert.EqualError(t, Check(Max, Complex64), "reduce: MAX is not defined for complex64 tensors")
	assert.EqualError(t, Check(BAnd, Float32), "reduce: BAND is not defined for float32 tensors (use an integer or bool dtype)")
	assert.EqualError(t, Check(PremulSum, Int32), "reduce: PREMUL_SUM is not defined for int32 tensors (use a floating-point or complex dtype)")
	assert.EqualError(t, Check(Avg, Bool), "reduce: AVG is not defined for bool tensors")
	for _, err := range []error{Check(Op(9), Float32), Check(Sum, DType(12)), Check(Op(255), DType(255))} {
		assert.ErrorIs(t, err, ErrUnsupported)
	}
	assert.Contains(t, Check(Op(9), Float32).Error(), "unknown reduce op 9")
	assert.Contains(t, Check(Sum, DType(12)).Error(), "unknown dtype 12")
}

// ---- random data -------------------------------------------------------------

var (
	f32Specials = []uint32{
		0, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, // 0 -0 1 -1 inf -inf
		0x7fc00000, 0xffc00000, 0x7fc12345, 0x7f800001, 0xff812345, // NaNs: quiet, negative, payload, signaling
		1, 0x80000001, 0x007fffff, 0x807fffff, 0x00800000, 0x80800000, // subnormals, smallest normals
		0x7f7fffff, 0xff7fffff, 0x7f000000, 0x47800000, 0x477ff000, 0x477fe000, // max, 2^127, 65536, 65520, 65504
		0x33800000, 0x33000000, 0x387fc000, 0x38800000, // 2^-24, 2^-25, f16 subnormal edge
	}
	f64Specials = []uint64{
		0, 1 << 63, 0x3ff0000000000000, 0xbff0000000000000, 0x7ff0000000000000, 0xfff0000000000000,
		0x7ff8000000000000, 0xfff8000000000000, 0x7ff8000000012345, 0x7ff0000000000001,
		1, 1<<63 | 1, 0x000fffffffffffff, 0x0010000000000000, 0x8010000000000000,
		0x7fefffffffffffff, 0xffefffffffffffff, 0x7fe0000000000000,
	}
)

// partOf is the element type of dt's parts: float32/float64 for complex
// dtypes, dt itself otherwise.
func partOf(dt DType) DType {
	switch dt {
	case Complex64:
		return Float32
	case Complex128:
		return Float64
	}
	return dt
}

// genElem returns the bits of one random element of dt (for complex, of one
// part); callers pass the float32/float64 part dtype.
func genElem(r *rand.Rand, dt DType) uint64 {
	switch dt {
	case Float16, BFloat16:
		return uint64(uint16(r.Uint32()))
	case Float32:
		switch r.IntN(4) {
		case 0:
			return uint64(f32Specials[r.IntN(len(f32Specials))])
		case 1:
			return uint64(r.Uint32())
		default:
			return uint64(math.Float32bits(float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(9)-4)))))
		}
	case Float64:
		switch r.IntN(4) {
		case 0:
			return f64Specials[r.IntN(len(f64Specials))]
		case 1:
			return r.Uint64()
		default:
			return math.Float64bits(r.NormFloat64() * math.Pow(10, float64(r.IntN(9)-4)))
		}
	case Bool:
		switch r.IntN(4) {
		case 0, 1:
			return 0
		case 2:
			return 1
		default:
			return uint64(r.IntN(255) + 1)
		}
	default: // integers
		bits := 8 * dt.Size()
		switch r.IntN(4) {
		case 0: // extremes
			ext := []uint64{0, 1, math.MaxUint64, 1<<(bits-1) - 1, 1 << (bits - 1), 2, math.MaxUint64 - 1}
			return ext[r.IntN(len(ext))]
		case 1: // small, possibly negative
			return uint64(int64(r.IntN(21) - 10))
		default:
			return r.Uint64()
		}
	}
}

// genBufs returns two random buffers of n elements. Some elements of b are
// related to a (equal, negated, same magnitude) to hit ties and cancellation.
func genBufs(r *rand.Rand, dt DType, n int) (a, b []byte) {
	part := partOf(dt)
	parts := dt.Size() / part.Size()
	a = make([]byte, n*dt.Size())
	b = make([]byte, n*dt.Size())
	signBit := uint64(1) << (8*part.Size() - 1)
	for i := 0; i < n*parts; i++ {
		x := genElem(r, part)
		var y uint64
		switch r.IntN(8) {
		case 0:
			y = x
		case 1:
			if part == Bool {
				y = genElem(r, part)
			} else {
				y = x ^ signBit // negated float, or far away int
			}
		case 2:
			if part.kind() == kindInt {
				y = -x // two's complement negation
			} else {
				y = genElem(r, part)
			}
		default:
			y = genElem(r, part)
		}
		putU(part, a, i, x)
		putU(part, b, i, y)
	}
	return a, b
}

func combine3(t *testing.T, op Op, dt DType, a, b []byte) []byte {
	t.Helper()
	out := make([]byte, len(a))
	require.NoError(t, Combine3(op, dt, out, a, b))
	return out
}

// requireSameBytes compares element by element so failures name the element.
func requireSameBytes(t *testing.T, dt DType, want, got, a, b []byte) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	sz := dt.Size()
	for i := 0; i < len(want); i += sz {
		if !bytes.Equal(want[i:i+sz], got[i:i+sz]) {
			t.Fatalf("element %d: a=%x b=%x want %x got %x", i/sz, a[i:i+sz], b[i:i+sz], want[i:i+sz], got[i:i+sz])
		}
	}
}

var testLens = []int{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 4099}

func TestCombineMatchesReference(t *testing.T) {
	for _, op := range allOps {
		for _, dt := range allDTypes {
			if !isSupported(op, dt) {
				continue
			}
			t.Run(op.String()+"/"+dt.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(op), uint64(dt)))
				for _, n := range testLens {
					a, b := genBufs(r, dt, n)
					want := refCombine(op, dt, a, b)
					requireSameBytes(t, dt, want, combine3(t, op, dt, a, b), a, b)
					// Two-operand form.
					dst := bytes.Clone(a)
					require.NoError(t, Combine(op, dt, dst, b))
					requireSameBytes(t, dt, want, dst, a, b)
				}
			})
		}
	}
}

// TestCombineAllBytePairs runs every pair of byte values (and, for 16-bit
// dtypes, a spread of pairs) through every op of the 1- and 2-byte dtypes.
func TestCombineAllBytePairs(t *testing.T) {
	for _, dt := range []DType{Int8, Uint8, Bool, Int16, Float16, BFloat16} {
		for _, op := range allOps {
			if !isSupported(op, dt) {
				continue
			}
			t.Run(op.String()+"/"+dt.String(), func(t *testing.T) {
				a := make([]byte, 0, 2*65536)
				b := make([]byte, 0, 2*65536)
				for i := 0; i < 256; i++ {
					for j := 0; j < 256; j++ {
						if dt.Size() == 1 {
							a, b = append(a, byte(i)), append(b, byte(j))
							continue
						}
						// High bytes from i, j; low bytes a hash of both.
						a = binary.LittleEndian.AppendUint16(a, uint16(i)<<8|uint16(i*7+j*13))
						b = binary.LittleEndian.AppendUint16(b, uint16(j)<<8|uint16(i*11+j*5))
					}
				}
				want := refCombine(op, dt, a, b)
				requireSameBytes(t, dt, want, combine3(t, op, dt, a, b), a, b)
			})
		}
	}
}

// TestCombineSpecialPairs runs every pair of special values through the
// float kernels.
func TestCombineSpecialPairs(t *testing.T) {
	type gen struct {
		dt    DType
		part  DType
		elems []uint64
	}
	f32 := make([]uint64, len(f32Specials))
	for i, v := range f32Specials {
		f32[i] = uint64(v)
	}
	var f16 []uint64
	for _, v := range []uint16{0, 0x8000, 1, 0x8001, 0x3ff, 0x400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe01, 0x3c00, 0xbc00, 0x3c01, 0x0200} {
		f16 = append(f16, uint64(v))
	}
	var bf16 []uint64
	for _, v := range []uint16{0, 0x8000, 1, 0x8001, 0x7f, 0x80, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x3f80, 0xbf80, 0x3f81} {
		bf16 = append(bf16, uint64(v))
	}
	gens := []gen{
		{Float16, Float16, f16}, {BFloat16, BFloat16, bf16}, {Float32, Float32, f32}, {Float64, Float64, f64Specials},
		{Complex64, Float32, f32}, {Complex128, Float64, f64Specials},
	}
	for _, g := range gens {
		for _, op := range []Op{Sum, Product, Min, Max} {
			if !isSupported(op, g.dt) {
				continue
			}
			t.Run(op.String()+"/"+g.dt.String(), func(t *testing.T) {
				m := len(g.elems)
				// Every ordered pair (and, for complex, every pair in each part).
				n := m * m
				a := make([]byte, n*g.part.Size())
				b := make([]byte, n*g.part.Size())
				for i := 0; i < m; i++ {
					for j := 0; j < m; j++ {
						putU(g.part, a, i*m+j, g.elems[i])
						putU(g.part, b, i*m+j, g.elems[j])
					}
				}
				if g.dt.Size() != g.part.Size() && n%2 == 1 {
					a, b = append(a, a[:g.part.Size()]...), append(b, b[:g.part.Size()]...)
				}
				want := refCombine(op, g.dt, a, b)
				requireSameBytes(t, g.dt, want, combine3(t, op, g.dt, a, b), a, b)
			})
		}
	}
}

func TestCombineCommutative(t *testing.T) {
	for _, op := range allOps {
		for _, dt := range allDTypes {
			if !isSupported(op, dt) {
				continue
			}
			t.Run(op.String()+"/"+dt.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(op)+100, uint64(dt)))
				for _, n := range []int{1, 3, 8, 37, 1000} {
					a, b := genBufs(r, dt, n)
					requireSameBytes(t, dt, combine3(t, op, dt, a, b), combine3(t, op, dt, b, a), a, b)
				}
			})
		}
	}
}

func TestCombine3Aliasing(t *testing.T) {
	for _, op := range allOps {
		for _, dt := range allDTypes {
			if !isSupported(op, dt) {
				continue
			}
			t.Run(op.String()+"/"+dt.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(op)+200, uint64(dt)))
				a, b := genBufs(r, dt, 67)
				want := combine3(t, op, dt, a, b)

				d := bytes.Clone(a)
				require.NoError(t, Combine3(op, dt, d, d, b))
				assert.Equal(t, want, d, "dst aliases a")

				d = bytes.Clone(b)
				require.NoError(t, Combine3(op, dt, d, a, d))
				assert.Equal(t, want, d, "dst aliases b")

				d = bytes.Clone(a)
				require.NoError(t, Combine3(op, dt, d, d, d))
				assert.Equal(t, combine3(t, op, dt, a, a), d, "dst, a and b all the same")

				d = bytes.Clone(a)
				require.NoError(t, Combine(op, dt, d, d))
				assert.Equal(t, combine3(t, op, dt, a, a), d, "Combine(dst, dst)")

				// a and b may overlap each other arbitrarily.
				sz := dt.Size()
				buf := append(bytes.Clone(a), b[:sz]...)
				out := make([]byte, len(a))
				require.NoError(t, Combine3(op, dt, out, buf[:len(a)], buf[sz:]))
				assert.Equal(t, combine3(t, op, dt, bytes.Clone(buf[:len(a)]), bytes.Clone(buf[sz:])), out)

				// Partial overlap of dst with an input is refused and leaves dst alone.
				buf = append(bytes.Clone(a), b[:sz]...)
				orig := bytes.Clone(buf)
				assert.Error(t, Combine3(op, dt, buf[sz:], buf[:len(a)], b))
				assert.Error(t, Combine3(op, dt, buf[:len(a)], a, buf[sz:]))
				assert.Error(t, Combine(op, dt, buf[:len(a)], buf[sz:]))
				assert.Equal(t, orig, buf)
			})
		}
	}
}

func TestCombineLengths(t *testing.T) {
	for _, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			sz := dt.Size()
			// Zero length: nothing to do, any nil/empty mix.
			require.NoError(t, Combine(Sum, dt, nil, nil))
			require.NoError(t, Combine(Sum, dt, []byte{}, nil))
			require.NoError(t, Combine3(Sum, dt, nil, []byte{}, nil))
			// Mismatched lengths.
			err := Combine(Sum, dt, make([]byte, 2*sz), make([]byte, sz))
			require.Error(t, err)
			assert.NotErrorIs(t, err, ErrUnsupported)
			assert.Error(t, Combine3(Sum, dt, make([]byte, sz), make([]byte, sz), make([]byte, 2*sz)))
			assert.Error(t, Combine3(Sum, dt, make([]byte, sz), make([]byte, 2*sz), make([]byte, sz)))
			assert.Error(t, Combine3(Sum, dt, make([]byte, sz), nil, make([]byte, sz)))
			// Not a multiple of the element size.
			if sz > 1 {
				for _, n := range []int{1, sz + 1, 3*sz - 1} {
					assert.Error(t, Combine(Sum, dt, make([]byte, n), make([]byte, n)), "length %d", n)
					assert.Error(t, Scale(dt, make([]byte, n), 2))
					assert.Error(t, Divide(dt, make([]byte, n), 2))
				}
			}
		})
	}
	assert.ErrorIs(t, Combine(Op(9), Float32, nil, nil), ErrUnsupported)
	assert.ErrorIs(t, Combine(Sum, DType(12), make([]byte, 4), make([]byte, 4)), ErrUnsupported)
	assert.ErrorIs(t, Combine3(Op(200), DType(200), nil, nil, nil), ErrUnsupported)
}

// TestCombineSubslices runs kernels on unaligned sub-slices of a larger
// buffer, which is how collectives hand out chunks.
func TestCombineSubslices(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, dt := range allDTypes {
		for _, op := range allOps {
			if !isSupported(op, dt) {
				continue
			}
			a, b := genBufs(r, dt, 64)
			for _, off := range []int{1, 3} {
				n := len(a) - 8*dt.Size()
				sa := append(make([]byte, off), a...)[off : off+n]
				sb := append(make([]byte, off+1), b...)[off+1 : off+1+n]
				want := refCombine(op, dt, a[:n], b[:n])
				requireSameBytes(t, dt, want, combine3(t, op, dt, sa, sb), sa, sb)
			}
		}
	}
}

func TestNoAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, op := range allOps {
		for _, dt := range allDTypes {
			if !isSupported(op, dt) {
				continue
			}
			a, b := genBufs(r, dt, 129)
			dst := make([]byte, len(a))
			allocs := testing.AllocsPerRun(20, func() {
				_ = Combine3(op, dt, dst, a, b)
				_ = Combine(op, dt, dst, b)
				_ = Check(op, dt)
			})
			assert.Zero(t, allocs, "%v %v", op, dt)
		}
	}
	buf := make([]byte, 1024)
	assert.Zero(t, testing.AllocsPerRun(20, func() {
		_ = Scale(Float32, buf, 0.5)
		_ = Divide(Int32, buf, 3)
		_ = Check(Max, Complex64)
	}))
}

// ---- fuzzing -------------------------------------------------------------------

func FuzzCombine(f *testing.F) {
	f.Add(uint8(Sum), uint8(Float32), []byte{1, 2, 3, 4, 5, 6, 7, 8}, uint8(0))
	f.Add(uint8(Max), uint8(BFloat16), []byte{0xc0, 0x7f, 0x80, 0xff, 0, 0, 1, 0x80}, uint8(1))
	f.Add(uint8(Product), uint8(Complex64), make([]byte, 32), uint8(2))
	f.Add(uint8(BXor), uint8(Bool), []byte{0, 1, 2, 3, 4, 5}, uint8(3))
	f.Add(uint8(Avg), uint8(Int8), []byte{0x80, 0xff, 0x7f, 1}, uint8(4))
	f.Add(uint8(9), uint8(12), []byte{1}, uint8(5))
	f.Fuzz(func(t *testing.T, opb, dtb uint8, data []byte, mode uint8) {
		op, dt := Op(opb%10), DType(dtb%13)
		half := len(data) / 2
		a, b := data[:half], data[half:]
		if mode&1 == 0 && len(b) > len(a) {
			b = b[:len(a)] // usually make lengths match so kernels run
		}
		dst := make([]byte, len(a))
		err1 := Combine3(op, dt, dst, a, b)
		dst2 := make([]byte, len(b))
		err2 := Combine3(op, dt, dst2, b, a)
		if err1 == nil {
			require.NoError(t, err2)
			require.Equal(t, dst, dst2, "not commutative")
			if dt == Bool {
				for _, v := range dst {
					require.LessOrEqual(t, v, byte(1))
				}
			}
		}
		c := bytes.Clone(a)
		err3 := Combine(op, dt, c, b)
		require.Equal(t, err1 == nil, err3 == nil)
		if err1 == nil {
			require.Equal(t, dst, c)
		}
		_ = Combine3(op, dt, c, c, c)
		_ = Scale(dt, c, float64(int8(mode))/7)
		_ = Divide(dt, c, int(int8(mode)))
		if err := Check(op, dt); err != nil {
			require.ErrorIs(t, err, ErrUnsupported)
			require.True(t, errors.Is(err1, ErrUnsupported))
		}
	})
}

func TestCombiner(t *testing.T) {
	a, b := []byte{1, 2, 3, 4}, []byte{5, 6, 7, 8}
	for op := Op(0); op < numOps; op++ {
		for dt := DType(0); dt < numDTypes; dt++ {
			f := Combiner(op, dt)
			dst, want := make([]byte, 4), make([]byte, 4)
			require.Equal(t, Combine3(op, dt, want, a, b), f(dst, a, b), "%s %s", op, dt)
			require.Equal(t, want, dst, "%s %s", op, dt)
			require.Zero(t, testing.AllocsPerRun(10, func() { _ = Combiner(op, dt) }))
		}
	}
	require.Equal(t, Combine3(Op(99), Float32, a, a, b), Combiner(Op(99), Float32)(a, a, b), "an unknown op")
}
