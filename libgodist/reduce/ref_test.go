package reduce

// Reference implementations for the tests. They are written independently of
// the kernels: elements are decoded with encoding/binary, floating-point
// results come from exact math/big arithmetic rounded once to the target
// format, float16/bfloat16 values are decoded with math.Ldexp and rounded by
// searching the sorted table of all finite values of the format.

import (
	"encoding/binary"
	"math"
	"math/big"
	"sort"
)

// ---- element access ---------------------------------------------------------

func getU(dt DType, b []byte, i int) uint64 {
	switch dt.Size() {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[4*i:]))
	case 8:
		return binary.LittleEndian.Uint64(b[8*i:])
	}
	panic("bad size")
}

func putU(dt DType, b []byte, i int, v uint64) {
	switch dt.Size() {
	case 1:
		b[i] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}

// ---- small float formats ----------------------------------------------------

// smallFmt describes float16 or bfloat16.
type smallFmt struct {
	expBits, mantBits int
	bias              int
	// finite holds the value of every non-negative finite bit pattern,
	// indexed by pattern, plus one more entry for the Inf pattern holding
	// the value the next binade would start at (used for rounding).
	finite []float64
}

func newSmallFmt(expBits, mantBits int) *smallFmt {
	f := &smallFmt{expBits: expBits, mantBits: mantBits, bias: 1<<(expBits-1) - 1}
	inf := (1<<expBits - 1) << mantBits
	for p := 0; p < inf; p++ {
		f.finite = append(f.finite, f.decode(uint16(p)))
	}
	f.finite = append(f.finite, math.Ldexp(1, 1<<(expBits-1))) // 2^(emax+1)
	return f
}

var (
	refF16  = newSmallFmt(5, 10)
	refBF16 = newSmallFmt(8, 7)
)

func (f *smallFmt) signBit() uint16 { return 1 << (f.expBits + f.mantBits) }
func (f *smallFmt) infBits() uint16 { return uint16((1<<f.expBits - 1) << f.mantBits) }

// decode returns the exact value of pattern h.
func (f *smallFmt) decode(h uint16) float64 {
	sign := 1.0
	if h&f.signBit() != 0 {
		sign = -1
	}
	e := int(h>>f.mantBits) & (1<<f.expBits - 1)
	m := int(h) & (1<<f.mantBits - 1)
	switch e {
	case 0:
		return sign * math.Ldexp(float64(m), 1-f.bias-f.mantBits)
	case 1<<f.expBits - 1:
		if m == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * math.Ldexp(float64(1<<f.mantBits+m), e-f.bias-f.mantBits)
}

func (f *smallFmt) isNaN(h uint16) bool {
	return h&^f.signBit() > f.infBits()
}

// round rounds v (not NaN) to the nearest pattern, ties to the even pattern,
// which for adjacent patterns is the one with the even mantissa.
func (f *smallFmt) round(v float64) uint16 {
	var sign uint16
	if math.Signbit(v) {
		sign = f.signBit()
		v = -v
	}
	top := f.finite[len(f.finite)-1]
	if v >= top {
		return sign | f.infBits()
	}
	// Largest p with finite[p] <= v.
	p := sort.Search(len(f.finite), func(i int) bool { return f.finite[i] > v }) - 1
	if f.finite[p] == v {
		return sign | uint16(p)
	}
	lo, hi := new(big.Float).SetFloat64(f.finite[p]), new(big.Float).SetFloat64(f.finite[p+1])
	mid := new(big.Float).SetPrec(2000).Add(lo, hi)
	twice := new(big.Float).SetPrec(2000).SetFloat64(v)
	twice.Add(twice, twice)
	switch c := twice.Cmp(mid); {
	case c < 0:
		return sign | uint16(p)
	case c > 0:
		return sign | uint16(p+1)
	}
	if p%2 == 0 {
		return sign | uint16(p)
	}
	return sign | uint16(p+1)
}

// ---- exact arithmetic rounded once -------------------------------------------

type target int

const (
	to32 target = iota
	to64
)

func roundBig(z *big.Float, t target) float64 {
	if t == to32 {
		f, _ := z.Float32()
		return float64(f)
	}
	f, _ := z.Float64()
	return f
}

func bigOf(x float64) *big.Float { return new(big.Float).SetPrec(2200).SetFloat64(x) }

// refAdd returns x+y correctly rounded to t (x and y must be representable).
func refAdd(x, y float64, t target) float64 {
	switch {
	case math.IsNaN(x) || math.IsNaN(y):
		return math.NaN()
	case math.IsInf(x, 0) && math.IsInf(y, 0):
		if x == y {
			return x
		}
		return math.NaN()
	case math.IsInf(x, 0):
		return x
	case math.IsInf(y, 0):
		return y
	case x == 0 && y == 0:
		if math.Signbit(x) && math.Signbit(y) {
			return math.Copysign(0, -1)
		}
		return 0
	}
	s := new(big.Float).SetPrec(2200).Add(bigOf(x), bigOf(y))
	if s.Sign() == 0 {
		return 0 // exact cancellation is +0 in round-to-nearest
	}
	return roundBig(s, t)
}

// refMul returns x*y correctly rounded to t.
func refMul(x, y float64, t target) float64 {
	neg := math.Signbit(x) != math.Signbit(y)
	sgn := func(v float64) float64 {
		if neg {
			return -v
		}
		return v
	}
	switch {
	case math.IsNaN(x) || math.IsNaN(y):
		return math.NaN()
	case math.IsInf(x, 0) || math.IsInf(y, 0):
		if x == 0 || y == 0 {
			return math.NaN()
		}
		return sgn(math.Inf(1))
	case x == 0 || y == 0:
		return sgn(0)
	}
	return roundBig(new(big.Float).SetPrec(2200).Mul(bigOf(x), bigOf(y)), t)
}

// refDiv returns x/n correctly rounded to t, for n >= 1.
func refDiv(x float64, n int, t target) float64 {
	d := float64(n)
	if t == to32 {
		d = float64(float32(n))
	}
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return x
	}
	q := new(big.Float).SetPrec(2200).Quo(bigOf(x), bigOf(d))
	return roundBig(q, t)
}

// refMinMax returns min or max with NaN propagation and -0 < +0.
func refMinMax(isMax bool, x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.NaN()
	}
	if x == 0 && y == 0 {
		negX, negY := math.Signbit(x), math.Signbit(y)
		if isMax {
			if negX && negY {
				return math.Copysign(0, -1)
			}
			return 0
		}
		if negX || negY {
			return math.Copysign(0, -1)
		}
		return 0
	}
	if isMax == (x > y) {
		return x
	}
	return y
}

// ---- the reference Combine ---------------------------------------------------

// refCombine returns the expected bytes of a (op) b. NaN results are the
// canonical NaN of the dtype.
func refCombine(op Op, dt DType, a, b []byte) []byte {
	out := make([]byte, len(a))
	n := len(a) / dt.Size()
	if op == Avg || op == PremulSum {
		op = Sum
	}
	switch dt {
	case Bool:
		for i := 0; i < n; i++ {
			x, y := a[i] != 0, b[i] != 0
			var r bool
			switch op {
			case Sum, Max, BOr:
				r = x || y
			case Product, Min, BAnd:
				r = x && y
			case BXor:
				r = x != y
			}
			if r {
				out[i] = 1
			}
		}
	case Int8, Uint8, Int16, Int32, Int64:
		bits := uint(8 * dt.Size())
		signed := dt != Uint8
		toBig := func(u uint64) *big.Int {
			v := new(big.Int).SetUint64(u)
			if signed && u>>(bits-1)&1 == 1 {
				v.Sub(v, new(big.Int).Lsh(big.NewInt(1), bits))
			}
			return v
		}
		mask := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), bits), big.NewInt(1))
		for i := 0; i < n; i++ {
			ux, uy := getU(dt, a, i), getU(dt, b, i)
			x, y := toBig(ux), toBig(uy)
			var r *big.Int
			switch op {
			case Sum:
				r = new(big.Int).Add(x, y)
			case Product:
				r = new(big.Int).Mul(x, y)
			case Min:
				r = x
				if y.Cmp(x) < 0 {
					r = y
				}
			case Max:
				r = x
				if y.Cmp(x) > 0 {
					r = y
				}
			case BAnd:
				r = new(big.Int).SetUint64(ux & uy)
			case BOr:
				r = new(big.Int).SetUint64(ux | uy)
			case BXor:
				r = new(big.Int).SetUint64(ux ^ uy)
			}
			r = new(big.Int).And(r, mask) // two's complement wrap (And works on the infinite two's complement)
			putU(dt, out, i, r.Uint64())
		}
	case Float32, Float64:
		t, nanBits := to32, uint64(0x7fc00000)
		dec := func(u uint64) float64 { return float64(math.Float32frombits(uint32(u))) }
		enc := func(v float64) uint64 { return uint64(math.Float32bits(float32(v))) }
		if dt == Float64 {
			t, nanBits = to64, 0x7ff8000000000000
			dec = math.Float64frombits
			enc = math.Float64bits
		}
		for i := 0; i < n; i++ {
			r := refFloatOp(op, dec(getU(dt, a, i)), dec(getU(dt, b, i)), t)
			if math.IsNaN(r) {
				putU(dt, out, i, nanBits)
			} else {
				putU(dt, out, i, enc(r))
			}
		}
	case Float16, BFloat16:
		f, nanBits := refF16, uint64(0x7e00)
		if dt == BFloat16 {
			f, nanBits = refBF16, 0x7fc0
		}
		for i := 0; i < n; i++ {
			r := refFloatOp(op, f.decode(uint16(getU(dt, a, i))), f.decode(uint16(getU(dt, b, i))), to32)
			if math.IsNaN(r) {
				putU(dt, out, i, nanBits)
			} else {
				putU(dt, out, i, uint64(f.round(r)))
			}
		}
	case Complex64, Complex128:
		part := Float32
		t, nanBits := to32, uint64(0x7fc00000)
		dec := func(u uint64) float64 { return float64(math.Float32frombits(uint32(u))) }
		enc := func(v float64) uint64 { return uint64(math.Float32bits(float32(v))) }
		if dt == Complex128 {
			part = Float64
			t, nanBits = to64, 0x7ff8000000000000
			dec = math.Float64frombits
			enc = math.Float64bits
		}
		put := func(i int, v float64) {
			if math.IsNaN(v) {
				putU(part, out, i, nanBits)
			} else {
				putU(part, out, i, enc(v))
			}
		}
		for i := 0; i < n; i++ {
			ar, ai := dec(getU(part, a, 2*i)), dec(getU(part, a, 2*i+1))
			br, bi := dec(getU(part, b, 2*i)), dec(getU(part, b, 2*i+1))
			switch op {
			case Sum:
				put(2*i, refAdd(ar, br, t))
				put(2*i+1, refAdd(ai, bi, t))
			case Product:
				put(2*i, refAdd(refMul(ar, br, t), -refMul(ai, bi, t), t))
				put(2*i+1, refAdd(refMul(ar, bi, t), refMul(ai, br, t), t))
			}
		}
	}
	return out
}

func refFloatOp(op Op, x, y float64, t target) float64 {
	switch op {
	case Sum:
		return refAdd(x, y, t)
	case Product:
		return refMul(x, y, t)
	case Min:
		return refMinMax(false, x, y)
	case Max:
		return refMinMax(true, x, y)
	}
	panic("bad op " + op.String())
}
