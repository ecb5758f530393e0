// Package tcp is godist's socket transport: one TCP connection per pair of
// ranks, a fixed frame header (frame.go), eager sends with no per-message
// handshake, and receives read straight into the posted buffer when the
// receive is already waiting.
package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// Transport implements transport.Transport over TCP.
type Transport struct {
	rank, size int
	mb         *transport.Mailbox
	peers      []*peer // peers[rank] is nil

	closing   atomic.Bool
	closeOnce sync.Once
	delegated atomic.Pointer[func(int) bool] // see Delegate
	spin      atomic.Int64                   // see SetSpin (a time.Duration)
}

var _ transport.Transport = (*Transport)(nil)

// goodbyeWait bounds how long Close waits for peers to acknowledge.
var goodbyeWait = 2 * time.Second

func newTransport(rank, size int, mb *transport.Mailbox, peers []*peer) *Transport {
	t := &Transport{rank: rank, size: size, mb: mb, peers: peers}
	mb.SetOnStuck(t.BreakPeer)
	mb.SetHelper(t.Help)
	for _, p := range peers {
		if p != nil {
			go p.readLoop(t)
		}
	}
	return t
}

// Mailbox is where received messages are matched; another transport (the
// shared-memory arena) may deliver into it too.
func (t *Transport) Mailbox() *transport.Mailbox { return t.mb }

// BreakPeer closes the connection to rank r, so that a read from it ends.
func (t *Transport) BreakPeer(r int) {
	if r >= 0 && r < t.size && t.peers[r] != nil {
		_ = t.peers[r].conn.Close()
	}
}

// Delegate names the peers whose departure another transport reports:
// their goodbye frames no longer fail them in the mailbox (messages they
// sent on the other path before leaving may still be in flight there).
func (t *Transport) Delegate(peers func(r int) bool) { t.delegated.Store(&peers) }

func (t *Transport) isDelegated(r int) bool {
	f := t.delegated.Load()
	return f != nil && (*f)(r)
}

// SetSpin sets how long a goroutine waiting for a message reads the
// sockets itself (Help) before it sleeps until the reader goroutine
// delivers. Zero (the default) never: right when ranks outnumber cores.
func (t *Transport) SetSpin(d time.Duration) { t.spin.Store(int64(d)) }

// Help reads the connection from src (every connection for
// transport.AnySource) on the calling goroutine until done is closed, until
// passes (it then returns true), or the spin time set by SetSpin is used up
// (it then returns false and the caller blocks). A message that arrives
// while a goroutine waits is so read by the thread that wants it: no
// wake-up of the reader goroutine, no hand-off back.
func (t *Transport) Help(src int, done <-chan struct{}, until time.Time) bool {
	spin := time.Duration(t.spin.Load())
	if spin <= 0 {
		return false
	}
	var one [1]*peer
	ps := t.peers
	if src != transport.AnySource {
		if src < 0 || src >= t.size || t.peers[src] == nil {
			return false
		}
		one[0] = t.peers[src]
		ps = one[:]
	}
	end := time.Now().Add(spin)
	for {
		for _, p := range ps {
			if p != nil {
				p.help(t)
			}
		}
		select {
		case <-done:
			return true
		default:
		}
		now := time.Now()
		if !now.Before(until) {
			return true
		}
		if !now.Before(end) {
			return false
		}
	}
}

// Rank is this process's rank.
func (t *Transport) Rank() int { return t.rank }

// Size is the number of ranks.
func (t *Transport) Size() int { return t.size }

// Send writes data to peer as one frame.
func (t *Transport) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if peer < 0 || peer >= t.size {
		return &transport.PeerError{Op: "send", Peer: peer, Err: fmt.Errorf("rank %d is out of range for a group of %d", peer, t.size)}
	}
	if peer == t.rank {
		if err := t.mb.Err(); err != nil {
			return &transport.PeerError{Op: "send", Peer: peer, Err: err}
		}
		return t.mb.Deliver(t.rank, tag, len(data), bytes.NewReader(data))
	}
	p := t.peers[peer]
	if t.closing.Load() {
		return &transport.PeerError{Op: "send", Peer: peer, Err: transport.ErrClosed}
	}
	if p.goodbye.Load() {
		return &transport.PeerError{Op: "send", Peer: peer, Err: transport.ErrPeerGone}
	}
	if err := t.mb.PeerErr(peer); err != nil {
		return &transport.PeerError{Op: "send", Peer: peer, Err: err}
	}
	if err := p.send(ctx, header{kind: kindData, tag: tag, n: uint64(len(data))}, data); err != nil {
		// A partial frame may have been written: the stream is unusable.
		perr := &transport.PeerError{Op: "send", Peer: peer, Err: describe(err)}
		t.Abort(perr)
		return perr
	}
	return nil
}

// PostRecv posts a receive.
func (t *Transport) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	return t.mb.Post(peer, tag, buf)
}

// peerEnded is called by p's reader when its connection ends.
func (t *Transport) peerEnded(p *peer, err error) {
	switch {
	case t.closing.Load():
		// We are closing: expected.
	case p.goodbye.Load():
		// The peer said goodbye and then closed: expected.
	case errors.Is(err, errCorrupt):
		t.mb.Fail(&transport.PeerError{Op: "read", Peer: p.rank, Err: err})
	default:
		if isClosedErr(err) {
			err = fmt.Errorf("connection closed locally")
		}
		t.mb.Fail(&transport.PeerError{Op: "read", Peer: p.rank, Err: fmt.Errorf("%w: %v", transport.ErrConnLost, err)})
	}
}

// Close says goodbye to every peer, waits briefly for their goodbyes, and
// closes the connections. It is idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.closing.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), goodbyeWait)
		defer cancel()
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			if p.send(ctx, header{kind: kindGoodbye}, nil) == nil {
				_ = p.conn.CloseWrite()
			}
		}
		timer := time.NewTimer(goodbyeWait)
		defer timer.Stop()
	wait:
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			select {
			case <-p.readerDone:
			case <-timer.C:
				break wait // the rest are cut off by shut
			}
		}
		t.shut(transport.ErrClosed)
	})
	return nil
}

// Abort fails everything with err and closes every connection at once.
func (t *Transport) Abort(err error) {
	t.mb.Fail(err)
	t.closeOnce.Do(func() {
		t.closing.Store(true)
		t.shut(err)
	})
}

func (t *Transport) shut(err error) {
	for _, p := range t.peers {
		if p != nil {
			_ = p.conn.Close()
		}
	}
	for _, p := range t.peers {
		if p != nil {
			<-p.readerDone
		}
	}
	t.mb.Fail(err)
}
