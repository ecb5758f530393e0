package tcp

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// BenchmarkPingPong measures one round trip between two ranks over
// loopback TCP (send, then wait for the echo).
func BenchmarkPingPong(b *testing.B) {
	for _, spin := range []time.Duration{0, 200 * time.Microsecond} {
		for _, size := range []int{8, 4 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("spin%v/%dB", spin, size), func(b *testing.B) { pingPong(b, size, spin) })
		}
	}
}

func pingPong(b *testing.B, size int, spin time.Duration) {
	{
		{
			t := &testing.T{}
			trs := connectLoopback(t, 2)
			for _, tr := range trs {
				tr.SetSpin(spin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			buf0, buf1 := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(2 * size))
			b.ResetTimer()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < b.N; i++ {
					if err := trs[1].PostRecv(0, transport.P2PTag(0), buf1).Wait(ctx); err != nil {
						panic(err)
					}
					if err := trs[1].Send(ctx, 0, transport.P2PTag(1), buf1); err != nil {
						panic(err)
					}
				}
			}()
			for i := 0; i < b.N; i++ {
				r := trs[0].PostRecv(1, transport.P2PTag(1), buf0)
				if err := trs[0].Send(ctx, 1, transport.P2PTag(0), buf0); err != nil {
					b.Fatal(err)
				}
				if err := r.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
		}
	}
}

// BenchmarkLateReceive streams large messages one way while the receiver
// posts each receive only after its header has had time to arrive (as a
// caller busy with the previous result does): the message is adopted
// mid-read instead of being buffered and copied again.
func BenchmarkLateReceive(b *testing.B) {
	for _, size := range []int{1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			trs := connectLoopback(&testing.T{}, 2)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			src, dst := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			go func() {
				for i := 0; i < b.N; i++ {
					if err := trs[0].Send(ctx, 1, transport.P2PTag(0), src); err != nil {
						panic(err)
					}
				}
			}()
			for i := 0; i < b.N; i++ {
				time.Sleep(100 * time.Microsecond)
				if err := trs[1].PostRecv(0, transport.P2PTag(0), dst).Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
