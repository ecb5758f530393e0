package transport

import (
	"bytes"
	"context"
	"fmt"
	"sync"
)

// MemNetwork connects n in-memory transports, one per rank, for tests of
// algorithms without sockets. Send copies the bytes into the receiver's
// mailbox synchronously, so it never blocks.
type MemNetwork struct {
	mu     sync.Mutex
	boxes  []*Mailbox
	closed []bool
	// Hook, if set, is called before every Send; returning an error fails
	// the Send (used to inject faults).
	Hook func(from, to int, tag Tag, n int) error
}

// NewMemNetwork returns a network of n ranks.
func NewMemNetwork(n int) *MemNetwork {
	m := &MemNetwork{boxes: make([]*Mailbox, n), closed: make([]bool, n)}
	for i := range m.boxes {
		m.boxes[i] = NewMailbox(n)
	}
	return m
}

// Transport returns rank's endpoint.
func (m *MemNetwork) Transport(rank int) Transport { return &memTransport{net: m, rank: rank} }

// Kill simulates the sudden death of rank: every other rank sees its
// connection lost, and rank's own endpoint is closed.
func (m *MemNetwork) Kill(rank int) {
	m.mu.Lock()
	m.closed[rank] = true
	m.mu.Unlock()
	m.boxes[rank].Fail(ErrClosed)
	for i, b := range m.boxes {
		if i != rank {
			b.Fail(&PeerError{Op: "read", Peer: rank, Err: ErrConnLost})
		}
	}
}

type memTransport struct {
	net  *MemNetwork
	rank int
}

var _ Tracker = (*memTransport)(nil)

func (t *memTransport) Rank() int { return t.rank }
func (t *memTransport) Size() int { return len(t.net.boxes) }

func (t *memTransport) Send(ctx context.Context, peer int, tag Tag, data []byte) error {
	if peer < 0 || peer >= len(t.net.boxes) {
		return &PeerError{Op: "send", Peer: peer, Err: fmt.Errorf("rank %d is out of range for a group of %d", peer, len(t.net.boxes))}
	}
	t.net.mu.Lock()
	closed, peerClosed := t.net.closed[t.rank], t.net.closed[peer]
	hook := t.net.Hook
	t.net.mu.Unlock()
	if closed {
		return &PeerError{Op: "send", Peer: peer, Err: ErrClosed}
	}
	if err := t.net.boxes[t.rank].PeerErr(peer); err != nil {
		return &PeerError{Op: "send", Peer: peer, Err: err}
	}
	if peerClosed {
		return &PeerError{Op: "send", Peer: peer, Err: ErrPeerGone}
	}
	if hook != nil {
		if err := hook(t.rank, peer, tag, len(data)); err != nil {
			return &PeerError{Op: "send", Peer: peer, Err: err}
		}
	}
	if ctx.Err() != nil {
		return &PeerError{Op: "send", Peer: peer, Err: ctxErr(ctx)}
	}
	return t.net.boxes[peer].DeliverStamped(t.rank, tag, len(data), StampFor(ctx, peer, tag), bytes.NewReader(data))
}

// Track and SetOnDesync act on this rank's mailbox (Tracker).
func (t *memTransport) Track(c *Call) *DesyncError { return t.net.boxes[t.rank].Track(c) }

func (t *memTransport) SetOnDesync(f func(*DesyncError)) { t.net.boxes[t.rank].SetOnDesync(f) }

func (t *memTransport) GroupTracker(id uint16, back []int) Tracker {
	return t.net.boxes[t.rank].GroupTracker(id, back)
}

func (t *memTransport) ForgetGroup(id uint16) { t.net.boxes[t.rank].ForgetGroup(id) }

func (t *memTransport) PeerLeftGroup(id uint16, src int, err error) {
	t.net.boxes[t.rank].PeerLeftGroup(id, src, err)
}

func (t *memTransport) FailCollectives(err error) { t.net.boxes[t.rank].FailCollectives(err) }

func (t *memTransport) PostRecv(peer int, tag Tag, buf []byte) *Recv {
	return t.net.boxes[t.rank].Post(peer, tag, buf)
}

func (t *memTransport) PostFold(peer int, tag Tag, buf []byte, f Fold) *Recv {
	return t.net.boxes[t.rank].PostFold(peer, tag, buf, f)
}

func (t *memTransport) Close() error {
	t.net.mu.Lock()
	if t.net.closed[t.rank] {
		t.net.mu.Unlock()
		return nil
	}
	t.net.closed[t.rank] = true
	t.net.mu.Unlock()
	t.net.boxes[t.rank].Fail(ErrClosed)
	for i, b := range t.net.boxes {
		if i != t.rank {
			b.FailPeer(t.rank, ErrPeerGone)
		}
	}
	return nil
}

func (t *memTransport) Abort(err error) {
	t.net.mu.Lock()
	t.net.closed[t.rank] = true
	t.net.mu.Unlock()
	t.net.boxes[t.rank].Fail(err)
	for i, b := range t.net.boxes {
		if i != t.rank {
			b.FailPeer(t.rank, ErrConnLost)
		}
	}
}
