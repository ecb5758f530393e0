package reduce

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAddBF16Vector: the vector bfloat16 SUM (where the CPU has one) gives
// bit for bit what the Go loop gives, for random values, every special
// value against every other (NaN, ±Inf, ±0, subnormals, the largest finite
// values whose sum overflows, ties to even) and every tail length.
func TestAddBF16Vector(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no vector kernel on this CPU")
	}
	special := []uint16{0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x0001, 0x8001, 0x007f,
		0x7f7f, 0xff7f, 0x3f80, 0x3f81, 0xbf80, 0x4000, 0x3b80, 0x0080}
	rng := rand.New(rand.NewPCG(1, 2))
	var xs, ys []uint16
	for _, a := range special {
		for _, b := range special {
			xs, ys = append(xs, a), append(ys, b)
		}
	}
	for range 4096 {
		xs, ys = append(xs, uint16(rng.Uint32())), append(ys, uint16(rng.Uint32()))
	}
	enc := func(v []uint16) []byte {
		b := make([]byte, 2*len(v))
		for i, u := range v {
			binary.LittleEndian.PutUint16(b[2*i:], u)
		}
		return b
	}
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 67, len(xs)} {
		x, y := enc(xs[:n]), enc(ys[:n])
		useAVX2 = true
		vec := make([]byte, 2*n)
		addBF16(vec, x, y)
		useAVX2 = false
		scalar := make([]byte, 2*n)
		addBF16(scalar, x, y)
		useAVX2 = hasAVX2
		require.Equal(t, scalar, vec, "n=%d", n)
		// In place, as the collectives call it.
		inPlace := append([]byte(nil), x...)
		addBF16(inPlace, inPlace, y)
		require.Equal(t, scalar, inPlace, "in place, n=%d", n)
	}
}
