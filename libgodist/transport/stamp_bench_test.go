package transport

import (
	"bytes"
	"context"
	"testing"
)

// BenchmarkDeliverSmall delivers an 8-byte message into a posted receive
// and waits for it, unstamped and stamped with the collective the mailbox
// tracks: the per-message cost of the desync check.
func BenchmarkDeliverSmall(b *testing.B) {
	call := &Call{Stamp: Stamp{Op: OpAllReduce, DType: 2, RedOp: 0, Root: -1, Count: 2}, Rank: 1}
	for _, stamped := range []bool{false, true} {
		name := map[bool]string{false: "unstamped", true: "stamped"}[stamped]
		b.Run(name, func(b *testing.B) {
			mb := NewMailbox(2)
			ctx := context.Background()
			buf, msg := make([]byte, 8), make([]byte, 8)
			var rd bytes.Reader
			for i := 0; b.Loop(); i++ {
				call.Seq = uint64(i + 1)
				var st Stamp
				if stamped {
					mb.Track(call)
					st = call.Stamp
				}
				tag := CollTag(uint64(i+1), 0)
				r := mb.Post(0, tag, buf)
				rd.Reset(msg)
				if err := mb.DeliverStamped(0, tag, len(msg), st, &rd); err != nil {
					b.Fatal(err)
				}
				if err := r.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStampFor is a sender's lookup of its message's stamp.
func BenchmarkStampFor(b *testing.B) {
	ctx := WithCall(context.Background(), &Call{Stamp: Stamp{Op: OpAllReduce, Seq: 3}})
	tag := CollTag(3, 0)
	var st Stamp
	for b.Loop() {
		st = StampFor(ctx, 1, tag)
	}
	_ = st
}
