// Package reduce holds the dtype table and the elementwise reduction kernels
// that every godist collective uses.
//
// Buffers are raw little-endian tensor bytes; a DType says how to read them
// and an Op (numbered like torch's ReduceOp.RedOpType) says how to combine
// them. Combine and Combine3 dispatch through a table indexed by
// [op][dtype] to tight, allocation-free typed loops over unsafe views of the
// bytes; on amd64 the float16 and bfloat16 kernels (and their Scale and
// Divide) use AVX2 and F16C where the CPU has them, with results bitwise
// identical to the Go loops. AVG and PREMUL_SUM combine with SUM; their
// extra steps are Divide (after the reduction) and Scale (before it).
//
// # Semantics
//
//	dtype                     SUM  AVG  PRODUCT  MIN  MAX  BAND BOR BXOR  PREMUL_SUM
//	float16 bfloat16
//	float32 float64           yes  yes  yes      yes  yes  -              yes
//	complex64 complex128      yes  yes  yes      -    -    -              yes
//	int8 uint8 int16
//	int32 int64               yes  yes  yes      yes  yes  yes            -
//	bool                      OR   -    AND      AND  OR   AND  OR  XOR   -
//
// Check reports the combinations marked "-" with an error wrapping
// ErrUnsupported.
//
// Integers: SUM and PRODUCT wrap around (two's complement); MIN/MAX are
// numeric; BAND/BOR/BXOR are bitwise. AVG sums, then Divide truncates toward
// zero like C (-7/2 = -3).
//
// Bool: one byte per element; any nonzero byte is true and results are
// always written as 0 or 1.
//
// Floating point: float32 and float64 use native IEEE arithmetic. float16
// and bfloat16 operands are widened to float32 (exactly), the operation is
// done in float32 and the result rounded to nearest-even once. MIN and MAX
// propagate NaN (like torch.minimum/torch.maximum) and order -0 < +0, so
// min(-0, +0) = -0 and max(-0, +0) = +0 in either order.
//
// Complex: pairs of floats (real, imaginary). SUM adds the parts; PRODUCT is
// (ar*br - ai*bi) + (ar*bi + ai*br)i with every product explicitly rounded,
// so no FMA contraction can happen on any architecture.
//
// NaN: every NaN that Combine and Combine3 write is the canonical quiet NaN
// of its type (0x7e00, 0x7fc0, 0x7fc00000, 0x7ff8000000000000), whatever the
// operands' payloads and signs. (Scale and Divide are elementwise and
// deterministic, so they leave float32/float64 NaN payloads alone.)
//
// Float16ToFloat32, Float32ToFloat16, BFloat16ToFloat32 and
// Float32ToBFloat16 expose the conversions the kernels use (round to
// nearest-even; NaN stays NaN).
//
// Determinism: every kernel is bitwise commutative, i.e. Combine3(dst, a, b)
// and Combine3(dst, b, a) write identical bytes, and the results do not
// depend on the CPU architecture, so all ranks of a collective end up with
// bitwise identical tensors.
//
// Scale multiplies floating-point and complex buffers by a real factor in
// the element's precision (float16/bfloat16 via float32, rounded once).
// Divide divides by an element count n >= 1: x / float(n) for floating-point
// and complex (float16/bfloat16 via float32, rounded once), truncating
// division for integers, an error for bool.
//
// Buffers should be aligned to their element size, as torch's are; on amd64
// and arm64 unaligned buffers work too, just a little slower.
package reduce
