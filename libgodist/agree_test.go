package libgodist

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	require.True(t, waitUntil(5*time.Second, func() bool { return pgs[1].abandoned.Load() != nil }))
	w, err = pgs[1].AllReduce(i64s(2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.NoError(t, err)
	err = w.Err()
	require.ErrorIs(t, err, ErrAbandoned)
	require.ErrorIs(t, err, transport.ErrPeerGone) // rank 0 left the collective
	var oe *OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, 0, oe.Peer)
	require.Contains(t, err.Error(), "rank 0 gave up on collective seq 1")
	require.Contains(t, oe.PeerLeft, "timed out after 100ms")
	// And the group refuses work from then on.
	w, err = pgs[1].AllReduce(i64s(2), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	require.NoError(t, err)
	require.ErrorIs(t, w.Err(), ErrBroken)
}
