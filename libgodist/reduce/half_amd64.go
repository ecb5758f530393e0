//go:build amd64 && !purego

package reduce

// Vector kernels for float16 and bfloat16 (half_amd64.s): AVX2 for bfloat16
// and for MIN/MAX of both, AVX2 plus F16C (VCVTPH2PS/VCVTPS2PH) for float16.
// Each does the same arithmetic as the Go loop it stands in for (widen
// exactly, one float32 operation, canonical NaN, round to nearest-even), so
// results are bitwise identical. The assembly handles the leading multiple
// of eight elements; the Go loops do the rest and everything on CPUs
// without these extensions.

//go:noescape
func addBF16AVX2(z, x, y *uint16, n int)

//go:noescape
func mulBF16AVX2(z, x, y *uint16, n int)

//go:noescape
func mulScalarBF16AVX2(z *uint16, n int, f float32)

//go:noescape
func divScalarBF16AVX2(z *uint16, n int, f float32)

//go:noescape
func addF16F16C(z, x, y *uint16, n int)

//go:noescape
func mulF16F16C(z, x, y *uint16, n int)

//go:noescape
func mulScalarF16F16C(z *uint16, n int, f float32)

//go:noescape
func divScalarF16F16C(z *uint16, n int, f float32)

//go:noescape
func minHalfAVX2(z, x, y *uint16, n int, inf, nan uint16)

//go:noescape
func maxHalfAVX2(z, x, y *uint16, n int, inf, nan uint16)

func cpuid(leaf, sub uint32) (a, b, c, d uint32)
func xgetbv() (a, d uint32)

// hasAVX2 reports whether the CPU and the OS support AVX2; hasF16C whether
// they also support F16C.
var hasAVX2, hasF16C = detectAVX2()

func detectAVX2() (avx2, f16c bool) {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false, false
	}
	_, _, c1, _ := cpuid(1, 0)
	const osxsave, avx, f16 = 1 << 27, 1 << 28, 1 << 29
	if c1&osxsave == 0 || c1&avx == 0 {
		return false, false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 { // XMM and YMM state enabled
		return false, false
	}
	_, b7, _, _ := cpuid(7, 0)
	avx2 = b7&(1<<5) != 0
	return avx2, avx2 && c1&f16 != 0
}

// useAVX2 and useF16C select the vector kernels; tests switch them off to
// check the Go loops against them.
var useAVX2, useF16C = hasAVX2, hasF16C

// vecBinary runs the three-operand kernel k on the leading multiple of
// eight elements if use is set and returns how many it did.
func vecBinary(use bool, k func(z, x, y *uint16, n int), z, x, y []uint16) int {
	n := len(z) &^ 7
	if !use || n == 0 {
		return 0
	}
	_, _ = x[n-1], y[n-1]
	k(&z[0], &x[0], &y[0], n)
	return n
}

// vecScalar runs the in-place kernel k like vecBinary.
func vecScalar(use bool, k func(z *uint16, n int, f float32), z []uint16, f float32) int {
	n := len(z) &^ 7
	if !use || n == 0 {
		return 0
	}
	k(&z[0], n, f)
	return n
}

func addBF16Vec(z, x, y []uint16) int { return vecBinary(useAVX2, addBF16AVX2, z, x, y) }
func mulBF16Vec(z, x, y []uint16) int { return vecBinary(useAVX2, mulBF16AVX2, z, x, y) }
func addF16Vec(z, x, y []uint16) int  { return vecBinary(useF16C, addF16F16C, z, x, y) }
func mulF16Vec(z, x, y []uint16) int  { return vecBinary(useF16C, mulF16F16C, z, x, y) }

func mulScalarBF16Vec(z []uint16, f float32) int {
	return vecScalar(useAVX2, mulScalarBF16AVX2, z, f)
}
func divScalarBF16Vec(z []uint16, f float32) int {
	return vecScalar(useAVX2, divScalarBF16AVX2, z, f)
}
func mulScalarF16Vec(z []uint16, f float32) int { return vecScalar(useF16C, mulScalarF16F16C, z, f) }
func divScalarF16Vec(z []uint16, f float32) int { return vecScalar(useF16C, divScalarF16F16C, z, f) }

// minHalfVec and maxHalfVec do MIN/MAX of float16 (inf 0x7c00) or bfloat16
// (inf 0x7f80) bit patterns like pickMin/pickMax.
func minHalfVec(z, x, y []uint16, inf, nan uint16) int {
	n := len(z) &^ 7
	if !useAVX2 || n == 0 {
		return 0
	}
	_, _ = x[n-1], y[n-1]
	minHalfAVX2(&z[0], &x[0], &y[0], n, inf, nan)
	return n
}

func maxHalfVec(z, x, y []uint16, inf, nan uint16) int {
	n := len(z) &^ 7
	if !useAVX2 || n == 0 {
		return 0
	}
	_, _ = x[n-1], y[n-1]
	maxHalfAVX2(&z[0], &x[0], &y[0], n, inf, nan)
	return n
}
