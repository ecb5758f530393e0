package shm

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// Transport is a transport.Transport over an arena, for a group whose
// ranks all share one host: Rank and Size are the arena's (GlobalRanks must
// be a permutation of 0..Size-1), Send is Arena.Send, receives match in
// its own Mailbox. Collectives can use the arena directly (Arena()).
type Transport struct {
	a         *Arena
	mb        *transport.Mailbox
	closeOnce sync.Once
}

var _ transport.Transport = (*Transport)(nil)

// NewTransport attaches a new mailbox to a and returns the transport. The
// transport owns a from now on: its Close closes a.
func NewTransport(a *Arena) (*Transport, error) {
	seen := make([]bool, a.size)
	for _, g := range a.global {
		if g < 0 || g >= a.size || seen[g] {
			return nil, invalidf("transport: the arena's group ranks %v are not a permutation of 0..%d", a.global, a.size-1)
		}
		seen[g] = true
	}
	mb := transport.NewMailbox(a.size)
	mb.SetOnStuck(func(int) { a.BreakStuck() })
	mb.SetHelper(func(_ int, done <-chan struct{}, until time.Time) bool {
		a.Progress(done, until)
		return true
	})
	if err := a.Attach(mb); err != nil {
		return nil, err
	}
	return &Transport{a: a, mb: mb}, nil
}

// Arena returns the transport's arena.
func (t *Transport) Arena() *Arena { return t.a }

// Rank is this rank's group rank.
func (t *Transport) Rank() int { return t.a.global[t.a.rank] }

// Size is the number of ranks.
func (t *Transport) Size() int { return t.a.size }

// Send delivers data to group rank peer under tag (see Arena.Send).
func (t *Transport) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	q, ok := t.a.LocalRank(peer)
	if !ok {
		return &transport.PeerError{Op: "send", Peer: peer, Err: fmt.Errorf("%w: rank %d is out of range for a group of %d", ErrInvalid, peer, t.a.size)}
	}
	return t.a.Send(ctx, q, tag, data)
}

// PostRecv posts a receive (see transport.Transport).
func (t *Transport) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	return t.mb.Post(peer, tag, buf)
}

// PostFold posts a receive that folds the message into buf (see
// transport.Transport).
func (t *Transport) PostFold(peer int, tag transport.Tag, buf []byte, f transport.Fold) *transport.Recv {
	return t.mb.PostFold(peer, tag, buf, f)
}

// Close closes the arena (peers see transport.ErrPeerGone) and fails the
// pending receives with transport.ErrClosed. Idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		_ = t.a.Close()
		t.mb.Fail(transport.ErrClosed)
	})
	return nil
}

// Abort fails every pending and later receive with err and aborts the
// arena (peers see transport.ErrConnLost).
func (t *Transport) Abort(err error) {
	t.mb.Fail(err)
	t.closeOnce.Do(func() { t.a.Abort(err) })
}
