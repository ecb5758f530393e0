//go:build amd64 && !purego

package reduce

// AVX2 kernel for bfloat16 SUM: eight elements per step, the same
// arithmetic as the Go loop (widen exactly, add in float32, round to
// nearest-even, canonical NaN), so results are bitwise identical.

//go:noescape
func addBF16AVX2(z, x, y *uint16, n int)

func cpuid(leaf, sub uint32) (a, b, c, d uint32)
func xgetbv() (a, d uint32)

// hasAVX2 reports whether the CPU and the OS support AVX2.
var hasAVX2 = detectAVX2()

func detectAVX2() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, c1, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if c1&osxsave == 0 || c1&avx == 0 {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 { // XMM and YMM state enabled
		return false
	}
	_, b7, _, _ := cpuid(7, 0)
	return b7&(1<<5) != 0
}

// addBF16Vec adds the leading multiple of eight elements with AVX2 and
// returns how many it did.
func addBF16Vec(z, x, y []uint16) int {
	n := len(z) &^ 7
	if !useAVX2 || n == 0 {
		return 0
	}
	addBF16AVX2(&z[0], &x[0], &y[0], n)
	return n
}

// useAVX2 selects the AVX2 kernels; tests switch it off to check the Go
// loops against them.
var useAVX2 = hasAVX2
