package reduce

import (
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkCombine measures Combine3 into a separate buffer (the inputs stay
// fixed, so PRODUCT cannot drift into subnormals); SetBytes counts one
// buffer, so the GB/s figure is elements-of-output per second times size.
func BenchmarkCombine(b *testing.B) {
	sizes := []struct {
		name string
		n    int
	}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}}
	for _, op := range allOps {
		for _, dt := range allDTypes {
			if Check(op, dt) != nil {
				continue
			}
			for _, sz := range sizes {
				b.Run(op.String()+"/"+dt.String()+"/"+sz.name, func(b *testing.B) {
					x, y := benchData(dt, sz.n)
					dst := make([]byte, sz.n)
					b.SetBytes(int64(sz.n))
					b.ResetTimer()
					for b.Loop() {
						if err := Combine3(op, dt, dst, x, y); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// benchData returns ordinary values (no NaN, Inf or subnormals).
func benchData(dt DType, size int) (x, y []byte) {
	r := rand.New(rand.NewPCG(9, 9))
	x, y = make([]byte, size), make([]byte, size)
	part := partOf(dt)
	for _, buf := range [][]byte{x, y} {
		for i := 0; i < size/part.Size(); i++ {
			v := r.NormFloat64()
			var u uint64
			switch part {
			case Float16:
				u = uint64(Float32ToFloat16(float32(v)))
			case BFloat16:
				u = uint64(Float32ToBFloat16(float32(v)))
			case Float32:
				u = uint64(math.Float32bits(float32(v)))
			case Float64:
				u = math.Float64bits(v)
			case Bool:
				u = uint64(r.IntN(2))
			default:
				u = r.Uint64()
			}
			putU(part, buf, i, u)
		}
	}
	return x, y
}

func BenchmarkScaleDivide(b *testing.B) {
	for _, dt := range []DType{Float32, BFloat16, Int32} {
		x, _ := benchData(dt, 1<<20)
		b.Run("Divide/"+dt.String(), func(b *testing.B) {
			b.SetBytes(int64(len(x)))
			for b.Loop() {
				_ = Divide(dt, x, 3)
			}
		})
	}
}
