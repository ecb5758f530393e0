package shm

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/transport/transporttest"
)

func newTransports(t *testing.T, n int, mod func(*Config)) []*Transport {
	arenas := openGroup(t, n, mod)
	trs := make([]*Transport, n)
	for i, a := range arenas {
		tr, err := NewTransport(a)
		require.NoError(t, err)
		trs[i] = tr
	}
	t.Cleanup(func() {
		for _, tr := range trs {
			tr.Close()
		}
	})
	return trs
}

func TestTransportConformance(t *testing.T) {
	for _, ring := range []int{0, 256} {
		t.Run(map[int]string{0: "default-ring", 256: "tiny-ring"}[ring], func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, n int) []transport.Transport {
				trs := newTransports(t, n, func(c *Config) { c.RingSize = ring })
				out := make([]transport.Transport, n)
				for i, tr := range trs {
					out[i] = tr
				}
				return out
			})
		})
	}
}

// TestAttachGlobalRanks: with GlobalRanks, messages arrive in the caller's
// mailbox under the sender's group rank, so one mailbox can serve shm and
// other peers.
func TestAttachGlobalRanks(t *testing.T) {
	global := []int{4, 9, 2}
	arenas := openGroup(t, 3, func(c *Config) { c.GlobalRanks = global })
	mbs := make([]*transport.Mailbox, 3)
	for i, a := range arenas {
		mbs[i] = transport.NewMailbox(10)
		require.NoError(t, a.Attach(mbs[i]))
		require.ErrorIs(t, a.Attach(mbs[i]), ErrInvalid)
		require.Equal(t, global[i], a.GlobalRank(i))
		l, ok := a.LocalRank(global[i])
		require.True(t, ok)
		require.Equal(t, i, l)
	}
	ctx := testCtx(t, 5*time.Second)
	tag := transport.P2PTag(5)
	b := make([]byte, 3)
	r := mbs[2].Post(9, tag, b)
	require.NoError(t, arenas[1].Send(ctx, 2, tag, []byte{1, 2, 3}))
	require.NoError(t, r.Wait(ctx))
	require.Equal(t, []byte{1, 2, 3}, b)
	require.Equal(t, 9, r.Source())
	// Sending to self goes through the mailbox too.
	r = mbs[0].Post(4, tag, b)
	require.NoError(t, arenas[0].Send(ctx, 0, tag, []byte{7, 7, 7}))
	require.NoError(t, r.Wait(ctx))
	// A closing peer is failed in the mailbox with ErrPeerGone, after its
	// messages are delivered.
	require.NoError(t, arenas[0].Send(ctx, 1, tag, []byte{8, 8, 8}))
	require.NoError(t, arenas[0].Close())
	require.NoError(t, mbs[1].Post(4, tag, b).Wait(ctx))
	require.Equal(t, []byte{8, 8, 8}, b)
	err := mbs[1].Post(4, tag, b).Wait(ctx)
	require.ErrorIs(t, err, transport.ErrPeerGone)
	err = arenas[1].Send(ctx, 0, tag, b)
	require.ErrorIs(t, err, transport.ErrPeerGone)
}

// TestSendLargeStreams: a message much larger than the ring streams
// through it, and messages from several senders interleave correctly.
func TestSendLargeStreams(t *testing.T) {
	t.Run("ordinary", func(t *testing.T) { testSendLargeStreams(t, 1024, 1<<20+3, 300_000) })
	// Ring copies of 64 bytes and more are non-temporal (publish.go);
	// messages below cmaMin, which go through the ring.
	t.Run("non-temporal", func(t *testing.T) {
		forceNonTemporal.Store(true)
		defer forceNonTemporal.Store(false)
		testSendLargeStreams(t, 4096, cmaMin-1, 10_007)
	})
}

func testSendLargeStreams(t *testing.T, ring, n1, n2 int) {
	trs := newTransports(t, 3, func(c *Config) { c.RingSize = ring })
	ctx := testCtx(t, 20*time.Second)
	big1, big2 := randBytes(n1, 1), randBytes(n2, 2)
	b1, b2 := make([]byte, len(big1)), make([]byte, len(big2))
	r1 := trs[0].PostRecv(1, transport.P2PTag(1), b1)
	r2 := trs[0].PostRecv(2, transport.P2PTag(1), b2)
	errs := make(chan error, 2)
	go func() { errs <- trs[1].Send(ctx, 0, transport.P2PTag(1), big1) }()
	go func() { errs <- trs[2].Send(ctx, 0, transport.P2PTag(1), big2) }()
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.NoError(t, r1.Wait(ctx))
	require.NoError(t, r2.Wait(ctx))
	require.True(t, bytes.Equal(big1, b1))
	require.True(t, bytes.Equal(big2, b2))
}

// TestSendTimeoutCutsChannel: a send that times out half-way cuts the
// channel; the receiver fails that peer with ErrConnLost.
func TestSendTimeoutCutsChannel(t *testing.T) {
	arenas := openGroup(t, 2, func(c *Config) { c.RingSize = 256 })
	mb := transport.NewMailbox(2)
	// Rank 1 has no receiver yet, so nothing drains the ring.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := arenas[0].Send(ctx, 1, transport.P2PTag(1), make([]byte, 4096))
	require.ErrorIs(t, err, transport.ErrTimeout)
	var pe *transport.PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 1, pe.Peer)
	require.ErrorIs(t, arenas[0].Send(testCtx(t, time.Second), 1, transport.P2PTag(1), []byte{1}), transport.ErrConnLost)
	require.NoError(t, arenas[1].Attach(mb))
	err = mb.Post(0, transport.P2PTag(1), make([]byte, 4096)).Wait(testCtx(t, 5*time.Second))
	require.ErrorIs(t, err, transport.ErrConnLost)
	require.True(t, errors.Is(mb.PeerErr(0), transport.ErrConnLost))
}

func TestTransportNoGoroutineLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	arenas := openGroup(t, 3, nil)
	ctx := testCtx(t, 5*time.Second)
	mbs := make([]*transport.Mailbox, 3)
	for i, a := range arenas {
		mbs[i] = transport.NewMailbox(3)
		require.NoError(t, a.Attach(mbs[i]))
	}
	r := mbs[1].Post(0, transport.P2PTag(1), make([]byte, 5))
	require.NoError(t, arenas[0].Send(ctx, 1, transport.P2PTag(1), []byte("hello")))
	require.NoError(t, r.Wait(ctx))
	// A receive pending when its peer closes fails with ErrPeerGone.
	pending := mbs[2].Post(1, transport.P2PTag(2), make([]byte, 1))
	closeAll(arenas[:2])
	require.ErrorIs(t, pending.Wait(ctx), transport.ErrPeerGone)
	closeAll(arenas)
	requireNoLeak(t, base)
}
