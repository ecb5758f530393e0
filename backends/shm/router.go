package shm

import (
	"context"
	"time"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
)

// Underlay is what the router needs of the transport it routes the other
// peers through: its mailbox, into which the arena delivers too, and the
// hooks that let one waiting goroutine read both (backends/tcp's
// Transport has them).
type Underlay interface {
	transport.Transport
	// Mailbox is where the transport matches its receives.
	Mailbox() *transport.Mailbox
	// Delegate names the peers whose departure the router reports.
	Delegate(peers func(r int) bool)
	// BreakPeer fails the connection to peer r.
	BreakPeer(r int)
	// Help reads src's connection on the waiting goroutine until done is
	// closed or until; false when it cannot.
	Help(src int, done <-chan struct{}, until time.Time) bool
	// HelpGroup is Help for a set of peers waited for together.
	HelpGroup(peers []int, done func() bool, until time.Time) bool
}

// router is the transport of a group with an arena: messages to
// co-located peers go through the arena's point-to-point rings, the others
// through the underlay. Both paths deliver into the underlay's mailbox, so
// a receive matches the same way whichever path its message took, and
// every message to one peer takes one path (per-source order holds).
//
// The arena belongs to the group (which closes it before the underlay);
// Close and Abort here act on the underlay only.
type router struct {
	under Underlay
	arena *Arena
	local []int // group rank -> local rank in the arena, or -1
}

var (
	_ transport.Transport = (*router)(nil)
	_ transport.Tracker   = (*router)(nil)
)

// newRouter attaches the arena to u's mailbox and returns the transport.
func newRouter(u Underlay, a *Arena) (*router, error) {
	rt := &router{under: u, arena: a, local: make([]int, u.Size())}
	for r := range rt.local {
		rt.local[r] = -1
		if q, ok := a.LocalRank(r); ok && r != u.Rank() {
			rt.local[r] = q
		}
	}
	mb := u.Mailbox()
	// A peer reached through the arena reports its departure there, after
	// its last message was drained; its goodbye over the underlay could
	// overtake those.
	u.Delegate(rt.viaArena)
	mb.SetOnStuck(func(r int) {
		if rt.viaArena(r) {
			a.BreakStuck()
			return
		}
		u.BreakPeer(r)
	})
	mb.SetHelper(rt.help)
	mb.SetGroupHelper(rt.helpGroup)
	if err := a.Attach(mb); err != nil {
		return nil, err
	}
	return rt, nil
}

// viaArena reports whether messages to peer go through the arena.
func (rt *router) viaArena(peer int) bool {
	return peer >= 0 && peer < len(rt.local) && rt.local[peer] >= 0
}

// help lets a goroutine waiting for a message from a co-located peer (or
// from any source) read the arena's rings itself, and one waiting for a
// peer on another host read its connection (Underlay.Help).
func (rt *router) help(peer int, done <-chan struct{}, until time.Time) bool {
	if peer >= 0 && peer < len(rt.local) && rt.local[peer] < 0 {
		return rt.under.Help(peer, done, until)
	}
	if peer != transport.AnySource && (peer < 0 || peer >= len(rt.local)) {
		return false
	}
	rt.arena.Progress(done, until)
	return true
}

// helpGroup reads the connections of peers on other hosts together
// (Underlay.HelpGroup); a set with a co-located peer is waited for
// receive by receive.
func (rt *router) helpGroup(peers []int, done func() bool, until time.Time) bool {
	for _, p := range peers {
		if p < 0 || p >= len(rt.local) || rt.local[p] >= 0 {
			return false
		}
	}
	return rt.under.HelpGroup(peers, done, until)
}

// PathTo names how peer is reached: "shm" through the arena, else the
// underlay's path.
func (rt *router) PathTo(peer int) string {
	if rt.viaArena(peer) {
		return "shm"
	}
	if p, ok := rt.under.(backend.PathNamer); ok {
		return p.PathTo(peer)
	}
	return "tcp"
}

func (rt *router) Rank() int { return rt.under.Rank() }
func (rt *router) Size() int { return rt.under.Size() }

// Send goes through the arena to a co-located peer, else the underlay.
func (rt *router) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if rt.viaArena(peer) {
		return rt.arena.Send(ctx, rt.local[peer], tag, data)
	}
	return rt.under.Send(ctx, peer, tag, data)
}

// PostRecv posts into the shared mailbox.
func (rt *router) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	return rt.under.PostRecv(peer, tag, buf)
}

// PostFold posts a folding receive into the shared mailbox.
func (rt *router) PostFold(peer int, tag transport.Tag, buf []byte, f transport.Fold) *transport.Recv {
	return rt.under.PostFold(peer, tag, buf, f)
}

// Track, SetOnDesync and FailCollectives act on the shared mailbox
// (transport.Tracker), through which both paths deliver; Track also
// publishes the collective in the arena (Arena.SetCall).
func (rt *router) Track(c *transport.Call) *transport.DesyncError {
	rt.arena.SetCall(c)
	return rt.under.Mailbox().Track(c)
}

func (rt *router) SetOnDesync(f func(*transport.DesyncError)) { rt.under.Mailbox().SetOnDesync(f) }

func (rt *router) FailCollectives(err error) { rt.under.Mailbox().FailCollectives(err) }

// GroupTracker and ForgetGroup track child groups sharing the router
// (transport.GroupTracking); a child's arena publishes its own calls.
func (rt *router) GroupTracker(id uint16, back []int) transport.Tracker {
	return rt.under.Mailbox().GroupTracker(id, back)
}

func (rt *router) ForgetGroup(id uint16) { rt.under.Mailbox().ForgetGroup(id) }

func (rt *router) PeerLeftGroup(id uint16, src int, err error) {
	rt.under.Mailbox().PeerLeftGroup(id, src, err)
}

func (rt *router) Close() error    { return rt.under.Close() }
func (rt *router) Abort(err error) { rt.under.Abort(err) }
