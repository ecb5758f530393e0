package reduce

import (
	"fmt"
	"unsafe"
)

// kernel computes d[i] = a[i] (op) b[i] over raw bytes. Callers guarantee:
// len(d) == len(a) == len(b) > 0, the length is a multiple of the element
// size, and d is either exactly a, exactly b, or disjoint from both (a and b
// may overlap each other arbitrarily since they are only read).
type kernel func(d, a, b []byte)

// kernels is the dispatch table. A nil entry means the pair is unsupported;
// entries for Avg and PremulSum are the Sum kernels.
var kernels = func() (t [numOps][numDTypes]kernel) {
	perDType := [numDTypes][numOps]kernel{
		Int8:       {Sum: vec(addI8AVX2, addI8), Product: mulInt[int8], Min: vec(minI8AVX2, minI8), Max: vec(maxI8AVX2, maxI8)},
		Uint8:      {Sum: vec(addI8AVX2, addI8), Product: mulInt[uint8], Min: vec(minU8AVX2, minU8), Max: vec(maxU8AVX2, maxU8)},
		Int16:      {Sum: vec(addI16AVX2, addI16), Product: vec(mulI16AVX2, mulInt[int16]), Min: vec(minI16AVX2, minI16), Max: vec(maxI16AVX2, maxI16)},
		Int32:      {Sum: vec(addI32AVX2, addInt[int32]), Product: vec(mulI32AVX2, mulInt[int32]), Min: vec(minI32AVX2, minInt[int32]), Max: vec(maxI32AVX2, maxInt[int32])},
		Int64:      {Sum: vec(addI64AVX2, addInt[int64]), Product: mulInt[int64], Min: vec(minI64AVX2, minInt[int64]), Max: vec(maxI64AVX2, maxInt[int64])},
		Bool:       {Sum: orBool, Product: andBool, Min: andBool, Max: orBool, BAnd: andBool, BOr: orBool, BXor: xorBool},
		Float16:    {Sum: addF16, Product: mulF16, Min: minF16, Max: maxF16},
		BFloat16:   {Sum: addBF16, Product: mulBF16, Min: minBF16, Max: maxBF16},
		Float32:    {Sum: vec(addF32AVX2, addF32), Product: vec(mulF32AVX2, mulF32), Min: vec(minF32AVX2, minF32), Max: vec(maxF32AVX2, maxF32)},
		Float64:    {Sum: vec(addF64AVX2, addF64), Product: vec(mulF64AVX2, mulF64), Min: vec(minF64AVX2, minF64), Max: vec(maxF64AVX2, maxF64)},
		Complex64:  {Sum: vec(addF32AVX2, addF32), Product: mulC64}, // complex sum is a float sum of both parts
		Complex128: {Sum: vec(addF64AVX2, addF64), Product: mulC128},
	}
	for dt := DType(0); dt < numDTypes; dt++ {
		k := perDType[dt]
		if dt.kind() == kindInt {
			// Bitwise operators do not care about lanes or signedness.
			k[BAnd], k[BOr], k[BXor] = vec(andAVX2, andBytes), vec(orAVX2, orBytes), vec(xorAVX2, xorBytes)
		}
		k[Avg], k[PremulSum] = k[Sum], k[Sum]
		for op := Op(0); op < numOps; op++ {
			if allowed(op, dt) {
				if k[op] == nil {
					panic(fmt.Sprintf("reduce: no kernel for %v %v", op, dt))
				}
				t[op][dt] = k[op]
			}
		}
	}
	return t
}()

// vec returns a kernel that runs the vector kernel v (wide_amd64.s) over
// the leading multiple of 32 bytes, where the CPU has it, and the Go loop g
// over the rest (or everything). v does g's exact arithmetic.
func vec(v wideKernel, g kernel) kernel {
	return func(d, a, b []byte) {
		if n := wide(v, d, a, b); n < len(d) {
			g(d[n:], a[n:], b[n:])
		}
	}
}

// Combine sets dst[i] = dst[i] (op) src[i] for every element. dst and src are
// raw little-endian bytes of dtype dt of equal length, a multiple of
// dt.Size(). Avg and PremulSum combine with Sum (their other steps are Divide
// and Scale). src may be dst itself but must not partially overlap it.
// Combine does not allocate.
func Combine(op Op, dt DType, dst, src []byte) error {
	return Combine3(op, dt, dst, dst, src)
}

// Combine3 sets dst[i] = a[i] (op) b[i]. dst may be exactly a or exactly b
// (same start and length) but must not partially overlap either of them; a
// and b may overlap each other freely. Combine3 does not allocate.
func Combine3(op Op, dt DType, dst, a, b []byte) error {
	if op >= numOps || dt >= numDTypes {
		return Check(op, dt)
	}
	k := kernels[op][dt]
	if k == nil {
		return checkErrs[op][dt]
	}
	n := len(dst)
	if len(a) != n || len(b) != n {
		return fmt.Errorf("reduce: %s %s: buffer lengths differ (dst %d, a %d, b %d bytes)", op, dt, n, len(a), len(b))
	}
	if n%dtypes[dt].size != 0 {
		return fmt.Errorf("reduce: %s %s: length %d is not a multiple of the element size %d", op, dt, n, dtypes[dt].size)
	}
	if n == 0 {
		return nil
	}
	if partialOverlap(dst, a) || partialOverlap(dst, b) {
		return fmt.Errorf("reduce: %s %s: dst partially overlaps an input", op, dt)
	}
	k(dst, a, b)
	return nil
}

// combiners holds Combine3 bound to each op and dtype, made once, so that
// a caller handing a combine function on per op allocates nothing.
var combiners = func() (t [numOps][numDTypes]func(dst, a, b []byte) error) {
	for op := Op(0); op < numOps; op++ {
		for dt := DType(0); dt < numDTypes; dt++ {
			t[op][dt] = func(dst, a, b []byte) error { return Combine3(op, dt, dst, a, b) }
		}
	}
	return t
}()

// Combiner returns Combine3 bound to op and dt. For a known op and dtype it
// returns the same function every time and does not allocate.
func Combiner(op Op, dt DType) func(dst, a, b []byte) error {
	if op < numOps && dt < numDTypes {
		return combiners[op][dt]
	}
	return func(dst, a, b []byte) error { return Combine3(op, dt, dst, a, b) }
}

// partialOverlap reports whether the non-empty slices x and y share memory
// without starting at the same address.
func partialOverlap(x, y []byte) bool {
	px := uintptr(unsafe.Pointer(unsafe.SliceData(x)))
	py := uintptr(unsafe.Pointer(unsafe.SliceData(y)))
	return px != py && px < py+uintptr(len(y)) && py < px+uintptr(len(x))
}

// view reinterprets the bytes of b as a []T; len(b) must be a multiple of
// unsafe.Sizeof(T), and an empty b gives a nil view. Buffers are expected to
// be aligned to the element size (torch's are), but amd64 and arm64 also
// handle unaligned ones.
func view[T any](b []byte) []T {
	var z T
	if len(b) < int(unsafe.Sizeof(z)) {
		return nil // also keeps checkptr happy: no pointer to a too-small object
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))/unsafe.Sizeof(z))
}

// blocks splits b into a view of whole blocks of four T and a view of the
// remaining (at most three) T. Kernels loop over the blocks with constant
// indices, which unrolls the loop four times without bounds checks.
func blocks[T any](b []byte) ([][4]T, []T) {
	var z T
	n := len(b) &^ (4*int(unsafe.Sizeof(z)) - 1)
	return view[[4]T](b[:n]), view[T](b[n:])
}
