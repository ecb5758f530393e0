package reduce

import "math"

// Floating-point and complex kernels.
//
// IEEE addition and multiplication are commutative, including signed zeros,
// except for which NaN payload comes out when both operands are NaN (x86
// returns the first operand's, arm64 may return the default NaN). Every NaN
// result is therefore replaced by the canonical quiet NaN, which makes all
// kernels bitwise commutative and architecture independent.

type float interface{ ~float32 | ~float64 }

// canon replaces a NaN by the canonical NaN.
func canon[T float](r, nan T) T {
	if r != r {
		r = nan
	}
	return r
}

func addFloat[T float](d, a, b []byte, nan T) {
	z, zt := blocks[T](d)
	x, xt := blocks[T](a)
	y, yt := blocks[T](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		r0, r1, r2, r3 := xx[0]+yy[0], xx[1]+yy[1], xx[2]+yy[2], xx[3]+yy[3]
		zz[0], zz[1], zz[2], zz[3] = canon(r0, nan), canon(r1, nan), canon(r2, nan), canon(r3, nan)
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = canon(xt[i]+yt[i], nan)
	}
}

func mulFloat[T float](d, a, b []byte, nan T) {
	z, zt := blocks[T](d)
	x, xt := blocks[T](a)
	y, yt := blocks[T](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		r0, r1, r2, r3 := xx[0]*yy[0], xx[1]*yy[1], xx[2]*yy[2], xx[3]*yy[3]
		zz[0], zz[1], zz[2], zz[3] = canon(r0, nan), canon(r1, nan), canon(r2, nan), canon(r3, nan)
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = canon(xt[i]*yt[i], nan)
	}
}

func addF32(d, a, b []byte) { addFloat(d, a, b, math.Float32frombits(nanF32)) }
func addF64(d, a, b []byte) { addFloat(d, a, b, math.Float64frombits(nanF64)) }
func mulF32(d, a, b []byte) { mulFloat(d, a, b, math.Float32frombits(nanF32)) }
func mulF64(d, a, b []byte) { mulFloat(d, a, b, math.Float64frombits(nanF64)) }

// Min and max work on the IEEE bit patterns viewed as signed integers S of
// the same width. key maps sign-magnitude to two's complement order
// (-Inf < ... < -0 < +0 < ... < +Inf), so an integer comparison picks the
// result, -0 < +0 makes min(-0, +0) = -0 and max(-0, +0) = +0 whatever the
// order, and the result is always one operand's exact bits (so float16 and
// bfloat16 need no conversion: rounding an operand is the identity). If
// either operand is NaN (|bits| > Inf) the result is the canonical NaN, like
// torch.minimum/torch.maximum.

type signed interface{ ~int16 | ~int32 | ~int64 }

func key[S signed](v, abs S) S {
	k := v
	if v < 0 {
		k = v ^ abs
	}
	return k
}

// pickMin returns the smaller of x and y by key, or nan if either is NaN.
func pickMin[S signed](x, y, abs, inf, nan S) S {
	r := x
	if key(y, abs) < key(x, abs) {
		r = y
	}
	if max(x&abs, y&abs) > inf {
		r = nan
	}
	return r
}

// pickMax returns the larger of x and y by key, or nan if either is NaN.
func pickMax[S signed](x, y, abs, inf, nan S) S {
	r := x
	if key(y, abs) > key(x, abs) {
		r = y
	}
	if max(x&abs, y&abs) > inf {
		r = nan
	}
	return r
}

func minFloat[S signed](d, a, b []byte, abs, inf, nan S) {
	z, zt := blocks[S](d)
	x, xt := blocks[S](a)
	y, yt := blocks[S](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = pickMin(xx[0], yy[0], abs, inf, nan), pickMin(xx[1], yy[1], abs, inf, nan),
			pickMin(xx[2], yy[2], abs, inf, nan), pickMin(xx[3], yy[3], abs, inf, nan)
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = pickMin(xt[i], yt[i], abs, inf, nan)
	}
}

func maxFloat[S signed](d, a, b []byte, abs, inf, nan S) {
	z, zt := blocks[S](d)
	x, xt := blocks[S](a)
	y, yt := blocks[S](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = pickMax(xx[0], yy[0], abs, inf, nan), pickMax(xx[1], yy[1], abs, inf, nan),
			pickMax(xx[2], yy[2], abs, inf, nan), pickMax(xx[3], yy[3], abs, inf, nan)
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = pickMax(xt[i], yt[i], abs, inf, nan)
	}
}

func minF32(d, a, b []byte) { minFloat[int32](d, a, b, 0x7fffffff, 0x7f800000, int32(nanF32)) }
func maxF32(d, a, b []byte) { maxFloat[int32](d, a, b, 0x7fffffff, 0x7f800000, int32(nanF32)) }
func minF64(d, a, b []byte) {
	minFloat[int64](d, a, b, 0x7fffffffffffffff, 0x7ff0000000000000, int64(nanF64))
}
func maxF64(d, a, b []byte) {
	maxFloat[int64](d, a, b, 0x7fffffffffffffff, 0x7ff0000000000000, int64(nanF64))
}

// Complex PRODUCT: (ar + ai i)(br + bi i) = (ar br - ai bi) + (ar bi + ai br) i.
// Every product is wrapped in an explicit conversion, which the Go spec
// guarantees rounds it, so no architecture fuses x*y+z into an FMA; with
// rounded products both parts are sums/differences of commutative terms, so
// swapping a and b gives the same bits.

func mulC64(d, a, b []byte) {
	nan := math.Float32frombits(nanF32)
	z := view[[2]float32](d)
	x := view[[2]float32](a)[:len(z)]
	y := view[[2]float32](b)[:len(z)]
	for i := range z {
		ar, ai, br, bi := x[i][0], x[i][1], y[i][0], y[i][1]
		re := float32(ar*br) - float32(ai*bi)
		im := float32(ar*bi) + float32(ai*br)
		z[i] = [2]float32{canon(re, nan), canon(im, nan)}
	}
}

func mulC128(d, a, b []byte) {
	nan := math.Float64frombits(nanF64)
	z := view[[2]float64](d)
	x := view[[2]float64](a)[:len(z)]
	y := view[[2]float64](b)[:len(z)]
	for i := range z {
		ar, ai, br, bi := x[i][0], x[i][1], y[i][0], y[i][1]
		re := float64(ar*br) - float64(ai*bi)
		im := float64(ar*bi) + float64(ai*br)
		z[i] = [2]float64{canon(re, nan), canon(im, nan)}
	}
}
