package reduce

import "math"

// Canonical quiet NaNs. Every NaN produced by Combine/Combine3 is written as
// one of these (positive sign, quiet bit only), so results are bitwise
// identical whatever the operand order, NaN payloads or CPU architecture.
const (
	nanF16  uint16 = 0x7e00
	nanBF16 uint16 = 0x7fc0
	nanF32  uint32 = 0x7fc00000
	nanF64  uint64 = 0x7ff8000000000000
)

// Float16ToFloat32 converts IEEE 754 binary16 bits to float32. The
// conversion is exact; NaN payloads are kept bit for bit.
func Float16ToFloat32(h uint16) float32 { return f16to32(h) }

// Float32ToFloat16 rounds f to the nearest IEEE 754 binary16 value, ties to
// even, and returns its bits. Values too large become ±Inf, values too small
// become subnormals or ±0. NaN stays NaN: the result is quiet and keeps the
// sign and the top 9 payload bits.
func Float32ToFloat16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16)&0x8000 | 0x7e00 | uint16(u>>13)&0x3ff
	}
	return f32to16(f)
}

// BFloat16ToFloat32 converts bfloat16 bits to float32 (exact).
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBFloat16 rounds f to the nearest bfloat16 value, ties to even,
// and returns its bits. NaN stays NaN: the result is quiet and keeps the sign
// and the top payload bits.
func Float32ToBFloat16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return f32tobf16(f)
}

// f16to32 converts binary16 bits to float32 exactly (after F. Giesen,
// "half_to_float_fast"). Subnormals are normalised with one exact float32
// subtraction.
func f16to32(h uint16) float32 {
	const shiftedExp = 0x7c00 << 13
	o := uint32(h&0x7fff) << 13
	exp := o & shiftedExp
	o += (127 - 15) << 23
	if exp == shiftedExp { // Inf or NaN: exponent 31 -> 255
		o += (128 - 16) << 23
	} else if exp == 0 { // zero or subnormal
		o += 1 << 23
		o = math.Float32bits(math.Float32frombits(o) - 0x1p-14)
	}
	return math.Float32frombits(o | uint32(h&0x8000)<<16)
}

// f32to16 rounds f to binary16 with ties to even (after F. Giesen,
// "float_to_half_fast3_rtne"). Any NaN becomes the canonical nanF16, which is
// what the kernels want; Float32ToFloat16 keeps payloads instead. It is kept
// small enough to be inlined into the kernels.
func f32to16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	u &= 0x7fffffff
	if u > 0x7f800000 {
		return nanF16
	}
	if u < (127-14)<<23 { // below 2^-14, the smallest normal binary16
		// Adding 0.5 aligns f to a float32 whose ulp is 2^-24, the binary16
		// subnormal step, so the FPU does the round-to-nearest-even; the low
		// bits are then the binary16 subnormal (0x400 = the smallest normal,
		// which is also the right encoding).
		return sign | uint16(math.Float32bits(math.Float32frombits(u)+0.5)-0x3f000000)
	}
	// Normal range: rebias the exponent and round the 13 dropped mantissa
	// bits to nearest-even. Clamping to 65536 (which rounds to 0x7c00) turns
	// every larger value and Inf into Inf; values from 65520 up round to
	// Inf by the carry into the exponent.
	u = min(u, (127+16)<<23)
	return sign | uint16((u-(127-15)<<23+0xfff+(u>>13)&1)>>13)
}

// f32tobf16 rounds f to bfloat16 with ties to even. Any NaN becomes the
// canonical nanBF16.
func f32tobf16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return nanBF16
	}
	u += 0x7fff + (u>>16)&1 // overflow of the largest finite values gives Inf
	return uint16(u >> 16)
}

func bf16to32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
