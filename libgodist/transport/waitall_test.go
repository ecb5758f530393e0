package transport

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitAllGroupHelper: WaitAll hands the group helper the distinct
// peers still pending (and fewer as receives complete), and returns once
// the helper has delivered every message.
func TestWaitAllGroupHelper(t *testing.T) {
	mb := NewMailbox(4)
	var calls [][]int
	mb.SetGroupHelper(func(peers []int, done func() bool, until time.Time) bool {
		calls = append(calls, slices.Clone(peers))
		// Deliver one message per call, from the first pending peer.
		p := peers[0]
		require.NoError(t, mb.Deliver(p, P2PTag(int64(p)), 1, bytes.NewReader([]byte{byte(p)})))
		return true
	})
	bufs := [][]byte{make([]byte, 1), make([]byte, 1), make([]byte, 1), make([]byte, 1)}
	rs := []*Recv{mb.Post(1, P2PTag(1), bufs[0]), mb.Post(2, P2PTag(2), bufs[1]),
		mb.Post(1, P2PTag(1), bufs[2]), mb.Post(3, P2PTag(3), bufs[3])}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, WaitAll(ctx, rs))
	require.Equal(t, [][]int{{1, 2, 3}, {2, 1, 3}, {1, 3}, {3}}, calls)
	require.Equal(t, [][]byte{{1}, {2}, {1}, {3}}, bufs)
}

// TestWaitAllDeclinedOrFailed: a helper that declines leaves the receives
// to be waited for one by one; the first failure in order fails the call
// and cancels the rest; a receive from any source skips the helper.
func TestWaitAllDeclinedOrFailed(t *testing.T) {
	mb := NewMailbox(3)
	used := 0
	declined := make(chan struct{}, 1)
	mb.SetGroupHelper(func([]int, func() bool, time.Time) bool {
		used++
		select {
		case declined <- struct{}{}:
		default:
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := make([]byte, 1), make([]byte, 1)
	rs := []*Recv{mb.Post(1, P2PTag(0), a), mb.Post(2, P2PTag(0), b)}
	go func() {
		<-declined // WaitAll now waits for the receives one by one
		_ = mb.Deliver(2, P2PTag(0), 1, bytes.NewReader([]byte{7}))
		_ = mb.Deliver(1, P2PTag(0), 1, bytes.NewReader([]byte{9}))
	}()
	require.NoError(t, WaitAll(ctx, rs))
	require.Equal(t, 1, used)
	require.Equal(t, []byte{9}, a)
	require.Equal(t, []byte{7}, b)

	boom := errors.New("boom")
	rs = []*Recv{mb.Post(1, P2PTag(1), a), mb.Post(2, P2PTag(1), b)}
	mb.FailPeer(1, boom)
	err := WaitAll(ctx, rs)
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, rs[1].Err(), boom, "the rest is canceled with the first error")

	used = 0
	rs = []*Recv{mb.Post(AnySource, P2PTag(2), a), mb.Post(2, P2PTag(2), b)}
	_ = mb.Deliver(2, P2PTag(2), 1, bytes.NewReader([]byte{1}))
	_ = mb.Deliver(2, P2PTag(2), 1, bytes.NewReader([]byte{2}))
	require.NoError(t, WaitAll(ctx, rs))
	require.Zero(t, used)
}
