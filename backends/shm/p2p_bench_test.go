package shm

import (
	"fmt"
	"testing"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// BenchmarkPingPong: one round trip between two local ranks (in one
// process here), through the ring below cmaMin and by single copy above.
func BenchmarkPingPong(b *testing.B) {
	for _, n := range []int{8, 32 << 10, 256 << 10, 2 << 20} {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			arenas := openGroup(b, 2, nil)
			trs := make([]*Transport, 2)
			for i, a := range arenas {
				tr, err := NewTransport(a)
				if err != nil {
					b.Fatal(err)
				}
				trs[i] = tr
			}
			defer func() {
				for _, tr := range trs {
					tr.Close()
				}
			}()
			ctx := testCtx(b, time.Minute)
			tag := transport.P2PTag(0)
			bufs := [][]byte{make([]byte, n), make([]byte, n)}
			done := make(chan error, 1)
			go func() {
				for i := 0; i < b.N; i++ {
					r := trs[1].PostRecv(0, tag, bufs[1])
					if err := r.Wait(ctx); err != nil {
						done <- err
						return
					}
					if err := trs[1].Send(ctx, 0, tag, bufs[1]); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			b.SetBytes(int64(2 * n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := trs[0].PostRecv(1, tag, bufs[0])
				if err := trs[0].Send(ctx, 1, tag, bufs[0]); err != nil {
					b.Fatal(err)
				}
				if err := r.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
