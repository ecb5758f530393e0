package libgodist

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// TestLateRankAfterPeerGaveUp: rank 0's all_reduce times out before rank
// 1 joins, and rank 0 keeps its group. Rank 1's all_reduce, started
// later, finds rank 0's contribution already there, but must fail as rank
// 0's did instead of returning a sum rank 0 never saw.
func TestLateRankAfterPeerGaveUp(t *testing.T) {
	pgs, _ := group(t, 2, 5*time.Second)
	w, err := pgs[0].AllReduce(i64s(1), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Error(t, w.Err())
	// The notice is on its way; rank 1 comes back once it has arrived.
	require.True(t, testutil.WaitUntil(5*time.Second, func() bool { return pgs[1].abandoned.Load() != nil }))
	w, err = pgs[1].AllReduce(i64s(2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.NoError(t, err)
	err = w.Err()
	require.ErrorIs(t, err, ErrAbandoned)
	require.ErrorIs(t, err, transport.ErrPeerGone) // rank 0 left the collective
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, 0, oe.Peer)
	require.Contains(t, err.Error(), `rank 0 gave up on collective seq 1: godist: allreduce (seq 1) in group "test" timed out after 100ms`)
	// And the group refuses work from then on.
	w, err = pgs[1].AllReduce(i64s(2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.NoError(t, err)
	require.ErrorIs(t, w.Err(), ErrBroken)
}

// silentPeer wraps a rank's transport so that it never answers progress
// queries, as a stopped process would not.
type silentPeer struct{ transport.Transport }

func (s silentPeer) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if uint64(tag)>>60 == uint64(transport.ControlTag(0))>>60 && uint64(tag)&(1<<60-1) >= 1<<24 {
		return nil // an answer: dropped
	}
	return s.Transport.Send(ctx, peer, tag, data)
}

// TestTimeoutRaisesAtDeadline: with a peer that never joins and never
// answers, the op's error comes at its deadline (not a query's wait
// later) and still names the peer as missing and silent.
func TestTimeoutRaisesAtDeadline(t *testing.T) {
	const timeout = 600 * time.Millisecond
	net := transport.NewMemNetwork(2)
	pgs := make([]*ProcessGroup, 2)
	for r := range pgs {
		var tr transport.Transport = net.Transport(r)
		if r == 1 {
			tr = silentPeer{tr}
		}
		pg, err := NewWithTransport(Config{Rank: r, Size: 2, Group: "test", Timeout: timeout}, tr)
		require.NoError(t, err)
		pgs[r] = pg
		t.Cleanup(func() { pg.Close() })
	}
	start := time.Now()
	w, err := pgs[0].AllReduce(i64s(1), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.NoError(t, err)
	err = w.Err()
	took := time.Since(start)
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Timeout(), "%v", err)
	require.Equal(t, []int{1}, oe.Missing, "%v", err)
	require.Equal(t, []int{1}, oe.Silent, "%v", err)
	require.GreaterOrEqual(t, took, timeout)
	require.Less(t, took, timeout+100*time.Millisecond, "raised %v after the deadline", took-timeout)
}

// TestLateRankAfterPeerGaveUpReal is TestLateRankAfterPeerGaveUp over the
// real transports. Over shared memory rank 1 comes back at once: rank 0
// poisoned the word it waited for, so rank 1 fails even before the notice
// can arrive; over TCP it comes back once the notice is there.
func TestLateRankAfterPeerGaveUpReal(t *testing.T) {
	for _, tr := range []string{assemble.TransportAuto, assemble.TransportTCP} {
		t.Run(map[string]string{"": "auto", "tcp": "tcp"}[tr], func(t *testing.T) {
			pgs := connectGroup(t, 2, tr, nil)
			w, err := pgs[0].AllReduce(i64s(1), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{Timeout: 100 * time.Millisecond})
			require.NoError(t, err)
			require.ErrorIs(t, w.Err(), transport.ErrTimeout)
			if tr == assemble.TransportTCP {
				require.True(t, testutil.WaitUntil(5*time.Second, func() bool { return pgs[1].abandoned.Load() != nil }))
			}
			w, err = pgs[1].AllReduce(i64s(2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
			require.NoError(t, err)
			err = w.Err()
			require.ErrorIs(t, err, ErrAbandoned)
			var oe *OpError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, 0, oe.Peer, "%v", err)
		})
	}
}

// TestRunningOpFailsOnNotice: a notice that arrives while the collective
// it names is running makes it fail instead of return, though its data
// all came.
func TestRunningOpFailsOnNotice(t *testing.T) {
	pgs, _ := group(t, 2, 5*time.Second)
	w1, err := pgs[1].AllReduce(i64s(2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.NoError(t, err)
	require.True(t, testutil.WaitUntil(5*time.Second, func() bool { return pgs[1].entered.Load() >= 1 }))
	var b [giveUpSize]byte
	b[0] = 1 // seq 1
	b[8] = giveUpGone
	b[9], b[10], b[11], b[12] = 0xff, 0xff, 0xff, 0xff // no rank at fault
	copy(b[giveUpHead:], "its own reasons")
	pgs[1].gaveUp(0, b[:])
	w0, err := pgs[0].AllReduce(i64s(1), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.NoError(t, err)
	require.NoError(t, w0.Err())
	err = w1.Err()
	require.ErrorIs(t, err, ErrAbandoned)
	require.ErrorIs(t, err, transport.ErrPeerGone)
	require.Contains(t, err.Error(), "its own reasons")
}

// deafToGiveUps wraps a rank's transport so that no give-up notice reaches
// it (for tests of what a rank learns without one).
type deafToGiveUps struct{ transport.Transport }

func (d deafToGiveUps) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	if tag == giveUpTag {
		tag = transport.ControlTag(4) // nobody sends there
	}
	return d.Transport.PostRecv(peer, tag, buf)
}
