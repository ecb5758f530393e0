package reduce

// Integer and bool kernels. Go's integer arithmetic wraps around (two's
// complement), which is exactly the semantics torch and NCCL have for SUM and
// PRODUCT, so the typed loops need no overflow handling.
//
// Every kernel loops over blocks of four elements (see blocks) and then over
// the tail; the x and y views are resliced to the length of z so the compiler
// drops all bounds checks inside the loops.

type integer interface {
	~int8 | ~uint8 | ~int16 | ~int32 | ~int64
}

// High bit of every 8- and 16-bit lane of a 64-bit word.
const (
	hi8  = 0x8080808080808080
	hi16 = 0x8000800080008000
)

// swarAdd adds the lanes packed in x and y: the low bits of every lane are
// added without a carry crossing into the next lane, then the lane's top bit
// is fixed up with XOR. That is exactly a wrapping add per lane.
func swarAdd(x, y, h uint64) uint64 { return ((x &^ h) + (y &^ h)) ^ ((x ^ y) & h) }

// addSWAR adds 8- or 16-bit lanes (T) packed in 64-bit words, four words at
// a time, then the tail element by element. (For 32- and 64-bit elements the
// plain typed loop is faster.)
func addSWAR[T integer](d, a, b []byte, h uint64) {
	z, zt := blocks[uint64](d)
	x, xt := blocks[uint64](a)
	y, yt := blocks[uint64](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		x0, x1, x2, x3 := xx[0], xx[1], xx[2], xx[3]
		y0, y1, y2, y3 := yy[0], yy[1], yy[2], yy[3]
		zz[0], zz[1], zz[2], zz[3] = swarAdd(x0, y0, h), swarAdd(x1, y1, h), swarAdd(x2, y2, h), swarAdd(x3, y3, h)
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = swarAdd(xt[i], yt[i], h)
	}
	if r := len(d) &^ 7; r < len(d) {
		addInt[T](d[r:], a[r:], b[r:])
	}
}

func addI8(d, a, b []byte)  { addSWAR[uint8](d, a, b, hi8) }
func addI16(d, a, b []byte) { addSWAR[int16](d, a, b, hi16) }

func addInt[T integer](d, a, b []byte) {
	z, zt := blocks[T](d)
	x, xt := blocks[T](a)
	y, yt := blocks[T](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = xx[0]+yy[0], xx[1]+yy[1], xx[2]+yy[2], xx[3]+yy[3]
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = xt[i] + yt[i]
	}
}

func mulInt[T integer](d, a, b []byte) {
	z, zt := blocks[T](d)
	x, xt := blocks[T](a)
	y, yt := blocks[T](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = xx[0]*yy[0], xx[1]*yy[1], xx[2]*yy[2], xx[3]*yy[3]
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = xt[i] * yt[i]
	}
}

func minInt[T integer](d, a, b []byte) {
	z, zt := blocks[T](d)
	x, xt := blocks[T](a)
	y, yt := blocks[T](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = min(xx[0], yy[0]), min(xx[1], yy[1]), min(xx[2], yy[2]), min(xx[3], yy[3])
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = min(xt[i], yt[i])
	}
}

func maxInt[T integer](d, a, b []byte) {
	z, zt := blocks[T](d)
	x, xt := blocks[T](a)
	y, yt := blocks[T](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = max(xx[0], yy[0]), max(xx[1], yy[1]), max(xx[2], yy[2]), max(xx[3], yy[3])
	}
	xt, yt = xt[:len(zt)], yt[:len(zt)]
	for i := range zt {
		zt[i] = max(xt[i], yt[i])
	}
}

// MIN and MAX of 8- and 16-bit lanes are done eight or four at a time in a
// 64-bit word (a compare-and-branch per byte is slow on random data, and
// amd64 has no 8-bit CMOV). geMask returns all ones in every lane where
// x >= y as unsigned lanes: s holds 2^(w-1) + low(x) - low(y) per lane, which
// cannot borrow across lanes and whose top bit says low(x) >= low(y); the
// lane's own top bits decide the rest. Signed lanes are compared after
// flipping their top bits (flip = h), which maps signed order onto unsigned.
func geMask(x, y, h uint64, shift uint) uint64 {
	s := (x | h) - (y &^ h)
	ge := ((x &^ y) | (^(x ^ y) & s)) & h
	return (ge - ge>>shift) | ge
}

func minSWAR[T integer](d, a, b []byte, h, flip uint64, shift uint) {
	z, _ := blocks[uint64](d)
	x, _ := blocks[uint64](a)
	y, _ := blocks[uint64](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		for j := range 4 {
			xj, yj := xx[j], yy[j]
			m := geMask(xj^flip, yj^flip, h, shift)
			zz[j] = (yj & m) | (xj &^ m)
		}
	}
	if r := len(z) * 32; r < len(d) {
		minInt[T](d[r:], a[r:], b[r:])
	}
}

func maxSWAR[T integer](d, a, b []byte, h, flip uint64, shift uint) {
	z, _ := blocks[uint64](d)
	x, _ := blocks[uint64](a)
	y, _ := blocks[uint64](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		for j := range 4 {
			xj, yj := xx[j], yy[j]
			m := geMask(xj^flip, yj^flip, h, shift)
			zz[j] = (xj & m) | (yj &^ m)
		}
	}
	if r := len(z) * 32; r < len(d) {
		maxInt[T](d[r:], a[r:], b[r:])
	}
}

func minI8(d, a, b []byte)  { minSWAR[int8](d, a, b, hi8, hi8, 7) }
func maxI8(d, a, b []byte)  { maxSWAR[int8](d, a, b, hi8, hi8, 7) }
func minU8(d, a, b []byte)  { minSWAR[uint8](d, a, b, hi8, 0, 7) }
func maxU8(d, a, b []byte)  { maxSWAR[uint8](d, a, b, hi8, 0, 7) }
func minI16(d, a, b []byte) { minSWAR[int16](d, a, b, hi16, hi16, 15) }
func maxI16(d, a, b []byte) { maxSWAR[int16](d, a, b, hi16, hi16, 15) }

// Bitwise kernels work on blocks of four 64-bit words whatever the integer
// width or signedness, then on the remaining bytes.

func andBytes(d, a, b []byte) {
	z, _ := blocks[uint64](d)
	x, _ := blocks[uint64](a)
	y, _ := blocks[uint64](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = xx[0]&yy[0], xx[1]&yy[1], xx[2]&yy[2], xx[3]&yy[3]
	}
	r := len(z) * 32
	d, a, b = d[r:], a[r:], b[r:]
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] & b[i]
	}
}

func orBytes(d, a, b []byte) {
	z, _ := blocks[uint64](d)
	x, _ := blocks[uint64](a)
	y, _ := blocks[uint64](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = xx[0]|yy[0], xx[1]|yy[1], xx[2]|yy[2], xx[3]|yy[3]
	}
	r := len(z) * 32
	d, a, b = d[r:], a[r:], b[r:]
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] | b[i]
	}
}

func xorBytes(d, a, b []byte) {
	z, _ := blocks[uint64](d)
	x, _ := blocks[uint64](a)
	y, _ := blocks[uint64](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = xx[0]^yy[0], xx[1]^yy[1], xx[2]^yy[2], xx[3]^yy[3]
	}
	r := len(z) * 32
	d, a, b = d[r:], a[r:], b[r:]
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] ^ b[i]
	}
}

// Bool kernels. Any nonzero byte is true; results are always 0 or 1. Eight
// bools are handled per 64-bit word: nz turns every nonzero byte into 0x01
// and every zero byte into 0x00.

const (
	lo7   = 0x7f7f7f7f7f7f7f7f
	ones8 = 0x0101010101010101
)

// nz: (v&0x7f)+0x7f sets a byte's top bit iff its low seven bits are nonzero
// (and never carries into the next byte); OR-ing v adds the top bit itself.
func nz(v uint64) uint64 { return ((((v & lo7) + lo7) | v) >> 7) & ones8 }

func b2u(c bool) byte {
	var r byte
	if c {
		r = 1
	}
	return r
}

func orBool(d, a, b []byte) {
	z, _ := blocks[uint64](d)
	x, _ := blocks[uint64](a)
	y, _ := blocks[uint64](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = nz(xx[0]|yy[0]), nz(xx[1]|yy[1]), nz(xx[2]|yy[2]), nz(xx[3]|yy[3])
	}
	r := len(z) * 32
	d, a, b = d[r:], a[r:], b[r:]
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = b2u(a[i]|b[i] != 0)
	}
}

func andBool(d, a, b []byte) {
	z, _ := blocks[uint64](d)
	x, _ := blocks[uint64](a)
	y, _ := blocks[uint64](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = nz(xx[0])&nz(yy[0]), nz(xx[1])&nz(yy[1]), nz(xx[2])&nz(yy[2]), nz(xx[3])&nz(yy[3])
	}
	r := len(z) * 32
	d, a, b = d[r:], a[r:], b[r:]
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = b2u(a[i] != 0) & b2u(b[i] != 0)
	}
}

func xorBool(d, a, b []byte) {
	z, _ := blocks[uint64](d)
	x, _ := blocks[uint64](a)
	y, _ := blocks[uint64](b)
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		zz, xx, yy := &z[i], &x[i], &y[i]
		zz[0], zz[1], zz[2], zz[3] = nz(xx[0])^nz(yy[0]), nz(xx[1])^nz(yy[1]), nz(xx[2])^nz(yy[2]), nz(xx[3])^nz(yy[3])
	}
	r := len(z) * 32
	d, a, b = d[r:], a[r:], b[r:]
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = b2u(a[i] != 0) ^ b2u(b[i] != 0)
	}
}
