package reduce

import "fmt"

// Scale multiplies every element of buf by factor: PREMUL_SUM's
// pre-multiplication. Only floating-point and complex dtypes are accepted;
// complex elements have both parts multiplied by the real factor. The
// arithmetic is done in the element's own precision: factor is converted to
// float32 for float32 and complex64, and float16/bfloat16 elements are
// widened to float32, multiplied by float32(factor) and rounded once. Other
// dtypes give an error wrapping ErrUnsupported.
func Scale(dt DType, buf []byte, factor float64) error {
	if err := checkBuf(dt, buf); err != nil {
		return err
	}
	switch dt {
	case Float32, Complex64:
		f := float32(factor)
		v := view[float32](buf[wideScale(mulScalarF32AVX2, buf, f):])
		for i := range v {
			v[i] *= f
		}
	case Float64, Complex128:
		v := view[float64](buf[wideScale(mulScalarF64AVX2, buf, factor):])
		for i := range v {
			v[i] *= factor
		}
	case Float16, BFloat16:
		scaleHalf(dt == BFloat16, view[uint16](buf), float32(factor))
	default:
		return unsupportedf("reduce: cannot scale %s tensors (PREMUL_SUM needs a floating-point or complex dtype)", dt)
	}
	return nil
}

// Divide divides every element of buf by n: AVG's final step. n must be at
// least 1. Floating-point and complex elements become x / float(n) in the
// element's precision (float16/bfloat16 are computed in float32 and rounded
// once; complex parts are divided separately). Integers use truncating
// division toward zero, like C (-7 / 2 = -3), computed exactly whatever n.
// Bool gives an error wrapping ErrUnsupported.
func Divide(dt DType, buf []byte, n int) error {
	if err := checkBuf(dt, buf); err != nil {
		return err
	}
	if dt == Bool {
		return checkErrs[Avg][Bool]
	}
	if n < 1 {
		return fmt.Errorf("reduce: cannot divide %s tensors by %d (need n >= 1)", dt, n)
	}
	if n == 1 {
		return nil // x / 1 == x for every dtype, NaN payloads included
	}
	switch dt {
	case Float32, Complex64:
		f := float32(n)
		v := view[float32](buf[wideScale(divScalarF32AVX2, buf, f):])
		for i := range v {
			v[i] /= f
		}
	case Float64, Complex128:
		f := float64(n)
		v := view[float64](buf[wideScale(divScalarF64AVX2, buf, f):])
		for i := range v {
			v[i] /= f
		}
	case Float16, BFloat16:
		divideHalf(dt == BFloat16, view[uint16](buf), float32(n))
	case Int8:
		divInt[int8](buf, n)
	case Uint8:
		divInt[uint8](buf, n)
	case Int16:
		divInt[int16](buf, n)
	case Int32:
		divInt[int32](buf, n)
	case Int64:
		divInt[int64](buf, n)
	}
	return nil
}

// divInt divides by n >= 2 with truncation toward zero. The division is
// done in int64, so any n is exact (a divisor beyond the range of T simply
// gives 0) and the quotient, no larger in magnitude than the dividend, always
// fits back into T.
func divInt[T integer](buf []byte, n int) {
	v := view[T](buf)
	d := int64(n)
	for i := range v {
		v[i] = T(int64(v[i]) / d)
	}
}

// checkBuf validates dt and the length of buf for Scale and Divide.
func checkBuf(dt DType, buf []byte) error {
	if dt >= numDTypes {
		return Check(Sum, dt)
	}
	if len(buf)%dtypes[dt].size != 0 {
		return fmt.Errorf("reduce: %s: length %d is not a multiple of the element size %d", dt, len(buf), dtypes[dt].size)
	}
	return nil
}
