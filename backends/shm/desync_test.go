package shm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// callCtx is ctx carrying a call of op number seq by local rank r (as the
// engine's op contexts do), tracked as this rank's running collective.
func callCtx(ctx context.Context, a *Arena, seq uint64, st transport.Stamp) context.Context {
	st.Seq = seq
	c := &transport.Call{Stamp: st, Rank: a.rank}
	a.SetCall(c)
	return transport.WithCall(ctx, c)
}

var (
	sumF32 = transport.Stamp{Op: transport.OpAllReduce, DType: uint8(reduce.Float32), RedOp: uint8(reduce.Sum), Root: -1, Count: 16}
	maxF32 = transport.Stamp{Op: transport.OpAllReduce, DType: uint8(reduce.Float32), RedOp: uint8(reduce.Max), Root: -1, Count: 16}
)

func bcastF32(root int32) transport.Stamp {
	return transport.Stamp{Op: transport.OpBroadcast, DType: uint8(reduce.Float32), RedOp: transport.NoRedOp, Root: root, Count: 16}
}

// TestStampDesync: ranks whose collectives have the same kind and size
// but other fingerprints (here the reduce op) fail with a DesyncError
// naming both, and the arena is broken.
func TestStampDesync(t *testing.T) {
	arenas := openGroup(t, 2, nil)
	ctx := testCtx(t, 5*time.Second)
	errs := onAll(arenas, func(r int, a *Arena) error {
		st := []transport.Stamp{sumF32, maxF32}[r]
		return a.AllReduce(callCtx(ctx, a, 1, st), make([]byte, 64), 4, combineOf(reduce.Float32, reduce.Op(st.RedOp)))
	})
	for r, err := range errs {
		require.ErrorIs(t, err, ErrDesync, "rank %d", r)
		var de *transport.DesyncError
		require.ErrorAs(t, err, &de)
		require.Equal(t, "rank 1 called all_reduce(float32[16], MAX) where rank 0 called all_reduce(float32[16], SUM)", de.Error())
	}
	require.ErrorIs(t, arenas[0].Barrier(ctx), ErrBroken)
}

// TestStampDesyncAfterTheFact: two ranks that each took itself for a
// broadcast's root both finish it; the next collective fails on both,
// naming the broadcasts.
func TestStampDesyncAfterTheFact(t *testing.T) {
	arenas := openGroup(t, 2, nil)
	ctx := testCtx(t, 5*time.Second)
	requireAllOK(t, onAll(arenas, func(r int, a *Arena) error {
		return a.Broadcast(callCtx(ctx, a, 1, bcastF32(int32(r))), make([]byte, 64), r)
	}), "broadcast")
	errs := onAll(arenas, func(r int, a *Arena) error {
		bar := transport.Stamp{Op: transport.OpBarrier, DType: transport.NoDType, RedOp: transport.NoRedOp, Root: -1}
		return a.Barrier(callCtx(ctx, a, 2, bar))
	})
	for r, err := range errs {
		var de *transport.DesyncError
		require.ErrorAs(t, err, &de, "rank %d", r)
		require.Equal(t, "rank 1 called broadcast(float32[16], root=1) where rank 0 called broadcast(float32[16], root=0)", de.Error())
	}
}

// TestCrossPathDesync: a rank in an arena collective whose peer runs a
// collective of point-to-point messages at the same sequence number (and
// waits for a message that never comes) finds it at a liveness check.
func TestCrossPathDesync(t *testing.T) {
	arenas := openGroup(t, 2, nil)
	ctx := testCtx(t, 5*time.Second)
	scatter := transport.Stamp{Op: transport.OpScatter, DType: uint8(reduce.Float32), RedOp: transport.NoRedOp, Root: 0, Count: 16}
	callCtx(ctx, arenas[1], 1, scatter) // rank 1 now waits for rank 0's message
	start := time.Now()
	err := arenas[0].AllReduce(callCtx(ctx, arenas[0], 1, sumF32), make([]byte, 64), 4, combineOf(reduce.Float32, reduce.Sum))
	var de *transport.DesyncError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "rank 1 called scatter(float32[16] per rank, root=0) where rank 0 called all_reduce(float32[16], SUM)", de.Error())
	require.Less(t, time.Since(start), time.Second)
}

// TestRingStamp: a point-to-point message of a collective tag carries its
// stamp through the ring (both the copy and the single-copy path) into
// the mailbox, which compares it with the receiver's collective.
func TestRingStamp(t *testing.T) {
	for _, n := range []int{64, 1 << 20} {
		arenas := openGroup(t, 2, nil)
		mbs := []*transport.Mailbox{transport.NewMailbox(2), transport.NewMailbox(2)}
		for r, a := range arenas {
			require.NoError(t, a.Attach(mbs[r]))
		}
		ctx := testCtx(t, 5*time.Second)
		got := make(chan *transport.DesyncError, 1)
		mbs[1].SetOnDesync(func(de *transport.DesyncError) { got <- de })
		require.Nil(t, mbs[1].Track(&transport.Call{Stamp: withSeq(sumF32, 3), Rank: 1}))
		// A message of the same collective arrives; then one of another.
		r := mbs[1].Post(0, transport.CollTag(3, 0), make([]byte, n))
		same := transport.WithCall(ctx, &transport.Call{Stamp: withSeq(sumF32, 3), Rank: 0})
		require.NoError(t, arenas[0].Send(same, 1, transport.CollTag(3, 0), make([]byte, n)))
		require.NoError(t, r.Wait(ctx))
		r = mbs[1].Post(0, transport.CollTag(3, 1), make([]byte, n))
		other := transport.WithCall(ctx, &transport.Call{Stamp: withSeq(bcastF32(0), 3), Rank: 0})
		require.NoError(t, arenas[0].Send(other, 1, transport.CollTag(3, 1), make([]byte, n)))
		var de *transport.DesyncError
		require.ErrorAs(t, r.Wait(ctx), &de)
		require.Equal(t, withSeq(bcastF32(0), 3), de.Theirs)
		require.Equal(t, de, <-got)
		// Point-to-point messages have no stamp and still flow.
		r = mbs[1].Post(0, transport.P2PTag(0), make([]byte, n))
		require.NoError(t, arenas[0].Send(other, 1, transport.P2PTag(0), make([]byte, n)))
		require.NoError(t, r.Wait(ctx))
	}
}

func withSeq(st transport.Stamp, seq uint64) transport.Stamp {
	st.Seq = seq
	return st
}

func combineOf(dt reduce.DType, op reduce.Op) CombineFunc {
	return func(dst, a, b []byte) error { return reduce.Combine3(op, dt, dst, a, b) }
}
