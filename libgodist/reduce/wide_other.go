//go:build !amd64 || purego

package reduce

// No vector kernels for wide elements: the names exist so the Go kernels
// compile everywhere, and wide reports that it did nothing.

type wideKernel = func(z, x, y *byte, n int)

var (
	addF32AVX2, mulF32AVX2, minF32AVX2, maxF32AVX2 wideKernel
	addF64AVX2, mulF64AVX2, minF64AVX2, maxF64AVX2 wideKernel
	addI8AVX2, addI16AVX2, addI32AVX2, addI64AVX2  wideKernel
	mulI16AVX2, mulI32AVX2                         wideKernel
	minI8AVX2, maxI8AVX2, minU8AVX2, maxU8AVX2     wideKernel
	minI16AVX2, maxI16AVX2, minI32AVX2, maxI32AVX2 wideKernel
	minI64AVX2, maxI64AVX2                         wideKernel
	andAVX2, orAVX2, xorAVX2                       wideKernel

	mulScalarF32AVX2, divScalarF32AVX2 func(z *byte, n int, f float32)
	mulScalarF64AVX2, divScalarF64AVX2 func(z *byte, n int, f float64)
)

func wideScale[F float32 | float64](k func(z *byte, n int, f F), d []byte, f F) int { return 0 }

func wide(k wideKernel, d, a, b []byte) int { return 0 }
