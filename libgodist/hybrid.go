package libgodist

import (
	"context"
	"time"

	"github.com/godist/godist/backends/shm"
	"github.com/godist/godist/backends/tcp"
	"github.com/godist/godist/libgodist/transport"
)

// hybrid is the transport of a group with a shared-memory arena: messages
// to co-located peers go through the arena's point-to-point rings, the
// others over TCP. Both paths deliver into the TCP transport's mailbox, so
// a receive matches the same way whichever path its message took, and
// every message to one peer takes one path (per-source order holds).
//
// The arena belongs to the group (which closes it before the TCP
// transport); Close and Abort here act on TCP only.
type hybrid struct {
	tcp   *tcp.Transport
	arena *shm.Arena
	local []int // group rank -> local rank in the arena, or -1
}

var _ transport.Transport = (*hybrid)(nil)

// newHybrid attaches the arena to t's mailbox and returns the transport.
func newHybrid(t *tcp.Transport, a *shm.Arena) (*hybrid, error) {
	h := &hybrid{tcp: t, arena: a, local: make([]int, t.Size())}
	for r := range h.local {
		h.local[r] = -1
		if q, ok := a.LocalRank(r); ok && r != t.Rank() {
			h.local[r] = q
		}
	}
	mb := t.Mailbox()
	// A peer reached through the arena reports its departure there, after
	// its last message was drained; its TCP goodbye could overtake those.
	t.Delegate(func(r int) bool { return h.local[r] >= 0 })
	mb.SetOnStuck(func(r int) {
		if r >= 0 && r < len(h.local) && h.local[r] >= 0 {
			a.BreakStuck()
			return
		}
		t.BreakPeer(r)
	})
	mb.SetHelper(h.help)
	mb.SetGroupHelper(h.helpGroup)
	if err := a.Attach(mb); err != nil {
		return nil, err
	}
	return h, nil
}

// help lets a goroutine waiting for a message from a co-located peer (or
// from any source) read the arena's rings itself, and one waiting for a
// peer on another host read its socket (tcp.Transport.Help).
func (h *hybrid) help(peer int, done <-chan struct{}, until time.Time) bool {
	if peer >= 0 && peer < len(h.local) && h.local[peer] < 0 {
		return h.tcp.Help(peer, done, until)
	}
	if peer != transport.AnySource && (peer < 0 || peer >= len(h.local)) {
		return false
	}
	h.arena.Progress(done, until)
	return true
}

// helpGroup reads the sockets of peers on other hosts together
// (tcp.Transport.HelpGroup); a set with a co-located peer is waited for
// receive by receive.
func (h *hybrid) helpGroup(peers []int, done func() bool, until time.Time) bool {
	for _, p := range peers {
		if p < 0 || p >= len(h.local) || h.local[p] >= 0 {
			return false
		}
	}
	return h.tcp.HelpGroup(peers, done, until)
}

func (h *hybrid) Rank() int { return h.tcp.Rank() }
func (h *hybrid) Size() int { return h.tcp.Size() }

// Send goes through the arena to a co-located peer, else over TCP.
func (h *hybrid) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if peer >= 0 && peer < len(h.local) && h.local[peer] >= 0 {
		return h.arena.Send(ctx, h.local[peer], tag, data)
	}
	return h.tcp.Send(ctx, peer, tag, data)
}

// PostRecv posts into the shared mailbox.
func (h *hybrid) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	return h.tcp.PostRecv(peer, tag, buf)
}

// PostFold posts a folding receive into the shared mailbox.
func (h *hybrid) PostFold(peer int, tag transport.Tag, buf []byte, f transport.Fold) *transport.Recv {
	return h.tcp.PostFold(peer, tag, buf, f)
}

func (h *hybrid) Close() error    { return h.tcp.Close() }
func (h *hybrid) Abort(err error) { h.tcp.Abort(err) }
