//go:build amd64 && !purego

package reduce

// AVX2 kernels for 8- to 64-bit elements (wide_amd64.s). Each does the same
// arithmetic as the Go loop it stands in for, so results are bitwise
// identical; the assembly handles the leading multiple of 32 bytes and the
// Go loops do the rest, and everything on CPUs without AVX2 (useAVX2, see
// half_amd64.go).

// wideKernel computes z = x (op) y over n bytes, n a positive multiple of 32.
type wideKernel = func(z, x, y *byte, n int)

//go:noescape
func addF32AVX2(z, x, y *byte, n int)

//go:noescape
func mulF32AVX2(z, x, y *byte, n int)

//go:noescape
func minF32AVX2(z, x, y *byte, n int)

//go:noescape
func maxF32AVX2(z, x, y *byte, n int)

//go:noescape
func addF64AVX2(z, x, y *byte, n int)

//go:noescape
func mulF64AVX2(z, x, y *byte, n int)

//go:noescape
func minF64AVX2(z, x, y *byte, n int)

//go:noescape
func maxF64AVX2(z, x, y *byte, n int)

//go:noescape
func addI8AVX2(z, x, y *byte, n int)

//go:noescape
func addI16AVX2(z, x, y *byte, n int)

//go:noescape
func addI32AVX2(z, x, y *byte, n int)

//go:noescape
func addI64AVX2(z, x, y *byte, n int)

//go:noescape
func mulI16AVX2(z, x, y *byte, n int)

//go:noescape
func mulI32AVX2(z, x, y *byte, n int)

//go:noescape
func minI8AVX2(z, x, y *byte, n int)

//go:noescape
func maxI8AVX2(z, x, y *byte, n int)

//go:noescape
func minU8AVX2(z, x, y *byte, n int)

//go:noescape
func maxU8AVX2(z, x, y *byte, n int)

//go:noescape
func minI16AVX2(z, x, y *byte, n int)

//go:noescape
func maxI16AVX2(z, x, y *byte, n int)

//go:noescape
func minI32AVX2(z, x, y *byte, n int)

//go:noescape
func maxI32AVX2(z, x, y *byte, n int)

//go:noescape
func minI64AVX2(z, x, y *byte, n int)

//go:noescape
func maxI64AVX2(z, x, y *byte, n int)

//go:noescape
func andAVX2(z, x, y *byte, n int)

//go:noescape
func orAVX2(z, x, y *byte, n int)

//go:noescape
func xorAVX2(z, x, y *byte, n int)

//go:noescape
func mulScalarF32AVX2(z *byte, n int, f float32)

//go:noescape
func divScalarF32AVX2(z *byte, n int, f float32)

//go:noescape
func mulScalarF64AVX2(z *byte, n int, f float64)

//go:noescape
func divScalarF64AVX2(z *byte, n int, f float64)

// wide runs k over the leading multiple of 32 bytes of d, a and b (equal
// lengths) if AVX2 is in use and returns how many bytes it did.
func wide(k wideKernel, d, a, b []byte) int {
	n := len(d) &^ 31
	if !useAVX2 || n == 0 {
		return 0
	}
	_, _ = a[n-1], b[n-1]
	k(&d[0], &a[0], &b[0], n)
	return n
}

// wideScale runs an in-place scale kernel like wide.
func wideScale[F float32 | float64](k func(z *byte, n int, f F), d []byte, f F) int {
	n := len(d) &^ 31
	if !useAVX2 || n == 0 {
		return 0
	}
	k(&d[0], n, f)
	return n
}
