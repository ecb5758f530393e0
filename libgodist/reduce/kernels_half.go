package reduce

// float16 and bfloat16 kernels. SUM and PRODUCT widen both operands to
// float32 (exactly), do the operation in float32 and round the result to
// nearest-even once; f32to16/f32tobf16 write the canonical NaN. MIN and MAX
// pick one operand's bits (see pickMin). Where the CPU has them, vector
// kernels (half_amd64.s) do the leading multiple of eight elements with the
// same arithmetic, and the Go loops below do the rest.

// skip2 drops the first k two-byte elements of d, a and b.
func skip2(k int, d, a, b []byte) ([]byte, []byte, []byte) {
	return d[2*k:], a[2*k:], b[2*k:]
}

func addF16(d, a, b []byte) {
	d, a, b = skip2(addF16Vec(view[uint16](d), view[uint16](a), view[uint16](b)), d, a, b)
	z, zt := blocks[uint16](d)
	x, xt := blocks[uint16](a)
	y, yt := blocks[uint16](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		r0, r1 := f16to32(xx[0])+f16to32(yy[0]), f16to32(xx[1])+f16to32(yy[1])
		r2, r3 := f16to32(xx[2])+f16to32(yy[2]), f16to32(xx[3])+f16to32(yy[3])
		zz[0], zz[1], zz[2], zz[3] = f32to16(r0), f32to16(r1), f32to16(r2), f32to16(r3)
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = f32to16(f16to32(xt[i]) + f16to32(yt[i]))
	}
}

func mulF16(d, a, b []byte) {
	d, a, b = skip2(mulF16Vec(view[uint16](d), view[uint16](a), view[uint16](b)), d, a, b)
	z, zt := blocks[uint16](d)
	x, xt := blocks[uint16](a)
	y, yt := blocks[uint16](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		r0, r1 := f16to32(xx[0])*f16to32(yy[0]), f16to32(xx[1])*f16to32(yy[1])
		r2, r3 := f16to32(xx[2])*f16to32(yy[2]), f16to32(xx[3])*f16to32(yy[3])
		zz[0], zz[1], zz[2], zz[3] = f32to16(r0), f32to16(r1), f32to16(r2), f32to16(r3)
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = f32to16(f16to32(xt[i]) * f16to32(yt[i]))
	}
}

func addBF16(d, a, b []byte) {
	d, a, b = skip2(addBF16Vec(view[uint16](d), view[uint16](a), view[uint16](b)), d, a, b)
	z, zt := blocks[uint16](d)
	x, xt := blocks[uint16](a)
	y, yt := blocks[uint16](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		r0, r1 := bf16to32(xx[0])+bf16to32(yy[0]), bf16to32(xx[1])+bf16to32(yy[1])
		r2, r3 := bf16to32(xx[2])+bf16to32(yy[2]), bf16to32(xx[3])+bf16to32(yy[3])
		zz[0], zz[1], zz[2], zz[3] = f32tobf16(r0), f32tobf16(r1), f32tobf16(r2), f32tobf16(r3)
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = f32tobf16(bf16to32(xt[i]) + bf16to32(yt[i]))
	}
}

func mulBF16(d, a, b []byte) {
	d, a, b = skip2(mulBF16Vec(view[uint16](d), view[uint16](a), view[uint16](b)), d, a, b)
	z, zt := blocks[uint16](d)
	x, xt := blocks[uint16](a)
	y, yt := blocks[uint16](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		r0, r1 := bf16to32(xx[0])*bf16to32(yy[0]), bf16to32(xx[1])*bf16to32(yy[1])
		r2, r3 := bf16to32(xx[2])*bf16to32(yy[2]), bf16to32(xx[3])*bf16to32(yy[3])
		zz[0], zz[1], zz[2], zz[3] = f32tobf16(r0), f32tobf16(r1), f32tobf16(r2), f32tobf16(r3)
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = f32tobf16(bf16to32(xt[i]) * bf16to32(yt[i]))
	}
}

const (
	infF16  = 0x7c00
	infBF16 = 0x7f80
)

func minF16(d, a, b []byte) {
	d, a, b = skip2(minHalfVec(view[uint16](d), view[uint16](a), view[uint16](b), infF16, nanF16), d, a, b)
	minFloat[int16](d, a, b, 0x7fff, infF16, int16(nanF16))
}

func maxF16(d, a, b []byte) {
	d, a, b = skip2(maxHalfVec(view[uint16](d), view[uint16](a), view[uint16](b), infF16, nanF16), d, a, b)
	maxFloat[int16](d, a, b, 0x7fff, infF16, int16(nanF16))
}

func minBF16(d, a, b []byte) {
	d, a, b = skip2(minHalfVec(view[uint16](d), view[uint16](a), view[uint16](b), infBF16, nanBF16), d, a, b)
	minFloat[int16](d, a, b, 0x7fff, infBF16, int16(nanBF16))
}

func maxBF16(d, a, b []byte) {
	d, a, b = skip2(maxHalfVec(view[uint16](d), view[uint16](a), view[uint16](b), infBF16, nanBF16), d, a, b)
	maxFloat[int16](d, a, b, 0x7fff, infBF16, int16(nanBF16))
}

// scaleHalf sets v[i] = round(v[i] * f) for float16 (bf false) or bfloat16.
func scaleHalf(bf bool, v []uint16, f float32) {
	if bf {
		v = v[mulScalarBF16Vec(v, f):]
		for i := range v {
			v[i] = f32tobf16(bf16to32(v[i]) * f)
		}
		return
	}
	v = v[mulScalarF16Vec(v, f):]
	for i := range v {
		v[i] = f32to16(f16to32(v[i]) * f)
	}
}

// divideHalf sets v[i] = round(v[i] / f) for float16 (bf false) or bfloat16.
func divideHalf(bf bool, v []uint16, f float32) {
	if bf {
		v = v[divScalarBF16Vec(v, f):]
		for i := range v {
			v[i] = f32tobf16(bf16to32(v[i]) / f)
		}
		return
	}
	v = v[divScalarF16Vec(v, f):]
	for i := range v {
		v[i] = f32to16(f16to32(v[i]) / f)
	}
}
