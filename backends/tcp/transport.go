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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/gosched"
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
	roomWaits atomic.Int32                   // sends waiting for room (waitRoom)
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Tracker   = (*Transport)(nil)
)

// goodbyeWait bounds how long Close waits for peers to acknowledge.
var goodbyeWait = 2 * time.Second

func newTransport(rank, size int, mb *transport.Mailbox, peers []*peer) *Transport {
	t := &Transport{rank: rank, size: size, mb: mb, peers: peers}
	mb.SetOnStuck(t.BreakPeer)
	mb.SetHelper(t.Help)
	mb.SetGroupHelper(t.HelpGroup)
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
		t.peers[r].sk.shut()
		t.peers[r].kick()
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

// SetSpin sets how long a goroutine waiting for a message polls the
// socket without sleeping (Help) before it sleeps on it. Between polls it
// yields the CPU (sched_yield), so that a thread it would otherwise keep
// waiting on its core runs first: the garbage collector's workers, or the
// reader goroutine a message woke. Zero (the default) sleeps at once:
// right when ranks outnumber cores.
func (t *Transport) SetSpin(d time.Duration) { t.spin.Store(int64(d)) }

// Help reads the connection from src on the calling goroutine until done
// is closed or until passes (HelpGroup with one peer): the kernel wakes
// the thread that wants the message, with no wake-up of the reader
// goroutine and no hand-off back. For transport.AnySource it polls every
// connection for the spin time set by SetSpin and then reports false: the
// caller blocks until a reader goroutine delivers. It also reports false
// if src is not a peer or its connection has ended.
func (t *Transport) Help(src int, done <-chan struct{}, until time.Time) bool {
	if src != transport.AnySource {
		one := [1]int{src}
		return t.HelpGroup(one[:], func() bool {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}, until)
	}
	spin := time.Duration(t.spin.Load())
	if spin <= 0 {
		return false
	}
	for _, p := range t.peers {
		if p != nil {
			p.helpers.Add(1)
		}
	}
	gaveUp := false
	defer func() {
		now := clock()
		for _, p := range t.peers {
			if p != nil {
				p.helpEnd.Store(now)
				p.helpers.Add(-1)
				if gaveUp || p.rd.missed.Load() {
					p.kick() // the caller blocks on them next, or they missed bytes
				}
			}
		}
	}()
	end := time.Now().Add(spin)
	for {
		got := false
		for _, p := range t.peers {
			if p != nil && p.help(t) {
				got = true
			}
		}
		select {
		case <-done:
			return true
		default:
		}
		now := time.Now()
		switch {
		case !now.Before(until):
			return true
		case got:
			end = now.Add(spin)
		case !now.Before(end):
			gaveUp = true
			return false
		}
		schedYield()
	}
}

// HelpGroup reads the connections from peers (distinct ranks) on the
// calling goroutine until done reports true or until passes: it takes the
// reader's role of each (in rank order), then pumps them, polling for the
// spin time set by SetSpin and then asleep in one poll(2) over all their
// sockets. A collective waiting for several peers so needs one thread
// woken, not one reader goroutine per peer. It reports false if a rank is
// not a peer or a connection has ended (the receives then fail through the
// reader goroutines).
func (t *Transport) HelpGroup(peers []int, done func() bool, until time.Time) bool {
	var psBuf [8]*peer
	ps := psBuf[:0]
	for _, r := range peers {
		if r < 0 || r >= t.size || t.peers[r] == nil {
			return false
		}
		ps = append(ps, t.peers[r])
	}
	slices.SortFunc(ps, func(a, b *peer) int { return a.rank - b.rank })
	for _, p := range ps {
		p.helpers.Add(1)
		p.rd.role.Lock()
	}
	defer func() {
		now := clock()
		for _, p := range ps {
			p.rd.role.Unlock()
			p.helpEnd.Store(now)
			p.helpers.Add(-1)
			// The reader goroutine woke for bytes we read: kick it only
			// if some are left, else it would go straight back to
			// sleep on the socket and wake with us for the next
			// message (two threads woken per message). Bytes that come
			// later reach it when it stops resting (linger), or the
			// waiter that holds the role then.
			if p.rd.missed.Load() {
				if p.sk.readable() {
					p.kick()
				} else {
					p.rd.missed.Store(false)
				}
			}
		}
	}()
	var socksBuf [8]*sock
	socks := socksBuf[:0]
	for _, p := range ps {
		socks = append(socks, p.sk)
	}
	// ready marks the sockets to read in the next round: all of them
	// while spinning, else those poll(2) found readable (with 8 peers,
	// reading every socket after each wake-up was 7 empty reads a
	// message).
	var readyBuf [8]bool
	ready := readyBuf[:0]
	for range ps {
		ready = append(ready, true)
	}
	spin := time.Duration(t.spin.Load())
	end := time.Now().Add(spin)
	for {
		got := false
		for i, p := range ps {
			if !ready[i] {
				continue
			}
			g, perr := p.rd.pump(t, p)
			if perr != nil {
				p.kick() // its reader goroutine reports the end
				return false
			}
			got = got || g
		}
		if done() {
			return true
		}
		now := time.Now()
		if !now.Before(until) {
			return true
		}
		if got {
			end = now.Add(spin)
		}
		// The caller's thread passes through the scheduler every
		// gosched.Period across its waits: a Ticker of this call's own
		// would start over with every 10 ms slice of Recv.Wait, and a
		// caller woken by data within each Period never passed (its P was
		// then taken back while it slept: ~40 times a second per process
		// in a 64 MiB all_reduce loop at P=8 over TCP).
		gosched.Tick()
		if now.Before(end) {
			for i := range ready {
				ready[i] = true
			}
			schedYield()
			continue
		}
		wake := until
		if d := now.Add(maxPollWait); d.Before(wake) {
			wake = d
		}
		if err := waitAnyReadable(socks, ready, wake); err != nil {
			return false
		}
	}
}

// maxPollWait bounds one sleep in poll(2) of a goroutine that waits for a
// message or for room to write: between two sleeps it passes through the
// scheduler (gosched.Ticker) at least every gosched.Period. One sleep of
// 10 ms with the goroutine never scheduled (the caller's slices of
// Recv.Wait are 10 ms) got its P taken back by the runtime's monitor, which
// then polled every 20 µs again: ~40 take-backs a second per process in a
// loop of 64 MiB all_reduces with 8 ranks on 2 cores.
const maxPollWait = gosched.Period

// Rank is this process's rank.
func (t *Transport) Rank() int { return t.rank }

// Size is the number of ranks.
func (t *Transport) Size() int { return t.size }

// Send writes data to peer as one frame.
func (t *Transport) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if peer < 0 || peer >= t.size {
		return &transport.PeerError{Op: "send", Peer: peer, Err: fmt.Errorf("rank %d is out of range for a group of %d", peer, t.size)}
	}
	st := transport.StampFor(ctx, peer, tag)
	if peer == t.rank {
		if err := t.mb.Err(); err != nil {
			return &transport.PeerError{Op: "send", Peer: peer, Err: err}
		}
		return t.mb.DeliverStamped(t.rank, tag, len(data), st, bytes.NewReader(data))
	}
	p := t.peers[peer]
	if t.closing.Load() {
		return &transport.PeerError{Op: "send", Peer: peer, Err: transport.ErrClosed}
	}
	if p.goodbye.Load() {
		return &transport.PeerError{Op: "send", Peer: peer, Err: transport.ErrPeerGone}
	}
	// A connection that failed fails every receive (the mailbox), but
	// only sends to its own peer: the others still get this rank's
	// farewell, which tells them why it leaves.
	if err := p.lost.Load(); err != nil {
		return &transport.PeerError{Op: "send", Peer: peer, Err: err}
	}
	if err := p.send(ctx, header{kind: kindData, tag: tag, n: uint64(len(data)), st: st}, data, t.waitRoom); err != nil {
		// A partial frame may have been written: the stream to this peer
		// is unusable, and the group broken (every receive fails). The
		// connections to the other peers stay up for this rank's
		// farewell.
		perr := &transport.PeerError{Op: "send", Peer: peer, Err: describe(err)}
		p.lost.CompareAndSwap(nil, perr)
		t.mb.Fail(perr)
		t.BreakPeer(peer)
		return perr
	}
	return nil
}

// Track, SetOnDesync and FailCollectives act on the mailbox (desync
// checks, transport.Tracker).
func (t *Transport) Track(c *transport.Call) *transport.DesyncError { return t.mb.Track(c) }

func (t *Transport) SetOnDesync(f func(*transport.DesyncError)) { t.mb.SetOnDesync(f) }

func (t *Transport) FailCollectives(err error) { t.mb.FailCollectives(err) }

// GroupTracker and ForgetGroup track child groups sharing these
// connections (transport.GroupTracking).
func (t *Transport) GroupTracker(id uint16, back []int) transport.Tracker {
	return t.mb.GroupTracker(id, back)
}

func (t *Transport) ForgetGroup(id uint16) { t.mb.ForgetGroup(id) }

func (t *Transport) PeerLeftGroup(id uint16, src int, err error) {
	t.mb.PeerLeftGroup(id, src, err)
}

// PostRecv posts a receive.
func (t *Transport) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	return t.mb.Post(peer, tag, buf)
}

// PostFold posts a receive that folds the message into buf.
func (t *Transport) PostFold(peer int, tag transport.Tag, buf []byte, f transport.Fold) *transport.Recv {
	return t.mb.PostFold(peer, tag, buf, f)
}

// peerEnded is called by p's reader when its connection ends.
func (t *Transport) peerEnded(p *peer, err error) {
	switch {
	case t.closing.Load():
		// We are closing: expected.
	case p.goodbye.Load():
		// The peer said goodbye and then closed: expected.
	case errors.Is(err, errCorrupt):
		perr := &transport.PeerError{Op: "read", Peer: p.rank, Err: err}
		p.lost.CompareAndSwap(nil, perr)
		t.mb.Fail(perr)
	default:
		if isClosedErr(err) {
			err = fmt.Errorf("connection closed locally")
		}
		perr := &transport.PeerError{Op: "read", Peer: p.rank, Err: fmt.Errorf("%w: %v", transport.ErrConnLost, err)}
		p.lost.CompareAndSwap(nil, perr)
		t.mb.Fail(perr)
	}
}

// Close says goodbye to every peer, waits briefly for their goodbyes, and
// closes the connections. It is idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.closing.Store(true)
		t.kickAll()
		ctx, cancel := context.WithTimeout(context.Background(), goodbyeWait)
		defer cancel()
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			if p.send(ctx, header{kind: kindGoodbye}, nil, nil) == nil {
				p.sk.closeWrite()
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
		t.kickAll()
		t.shut(err)
	})
}

// kickAll sends every resting reader goroutine back to the poller.
func (t *Transport) kickAll() {
	for _, p := range t.peers {
		if p != nil {
			p.kick()
		}
	}
}

func (t *Transport) shut(err error) {
	for _, p := range t.peers {
		if p != nil {
			p.sk.shut()
			p.kick()
		}
	}
	for _, p := range t.peers {
		if p != nil {
			<-p.readerDone
			p.sk.release()
		}
	}
	t.mb.Fail(err)
}
