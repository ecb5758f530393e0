package transport

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHelperDrivesWait: with a Helper installed, Recv.Wait and Recv.Help
// make progress on the waiting goroutine (here: the helper delivers the
// message itself); a helper that cannot help makes Wait block as usual,
// and a canceled context still ends Wait.
func TestHelperDrivesWait(t *testing.T) {
	mb := NewMailbox(2)
	var calls atomic.Int32
	declined := make(chan struct{}, 8) // a token each time the helper declines
	mb.SetHelper(func(peer int, done <-chan struct{}, until time.Time) bool {
		if peer != 1 {
			declined <- struct{}{}
			return false
		}
		if calls.Add(1) == 3 {
			require.NoError(t, mb.Deliver(1, P2PTag(0), 3, bytes.NewReader([]byte{1, 2, 3})))
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	buf := make([]byte, 3)
	r := mb.Post(1, P2PTag(0), buf)
	require.NoError(t, r.Wait(ctx))
	require.Equal(t, []byte{1, 2, 3}, buf)
	require.Equal(t, int32(3), calls.Load())

	r = mb.Post(1, P2PTag(1), buf)
	require.True(t, r.Help(time.Time{}))
	require.Equal(t, int32(4), calls.Load())

	// Peer 0: the helper declines; Wait blocks until the message comes,
	// delivered once Wait has asked the helper and been turned down.
	r = mb.Post(0, P2PTag(0), buf)
	require.False(t, r.Help(time.Now().Add(time.Second)))
	<-declined // Help's
	go func() {
		<-declined // Wait's
		_ = mb.Deliver(0, P2PTag(0), 3, bytes.NewReader([]byte{4, 5, 6}))
	}()
	require.NoError(t, r.Wait(ctx))
	require.Equal(t, []byte{4, 5, 6}, buf)

	// A context that ends while the helper keeps helping cancels the receive.
	short, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	r = mb.Post(1, P2PTag(9), buf)
	require.ErrorIs(t, r.Wait(short), ErrTimeout)
}
