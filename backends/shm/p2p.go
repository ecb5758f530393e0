package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/gosched"
	"github.com/godist/godist/libgodist/transport"
)

// Point-to-point messages. Every ordered pair (src, dst) has a byte ring in
// the arena written only by src (head) and read only by dst (tail). A
// message is a 16-byte header (u64 tag, u64 length; a collective's
// message has stampFlag set in the length and its transport.Stamp right
// after the header) followed by its bytes,
// wrapping around the ring; the sender streams messages larger than the
// ring in pieces of at most a quarter ring, publishing head after each, and
// the receiver consumes them as they come. After publishing, the sender
// bumps dst's doorbell and wakes it if dst's receiver sleeps.
//
// Each rank that receives runs one receiver goroutine (started by Attach)
// that scans its incoming rings and hands each message to a
// transport.Mailbox with Deliver, which reads it straight into a posted
// receive or stores it. The receiver uses the wait policy (without the
// spin phase) on its doorbell and sleeps up to WaitPolicy.Idle when idle.
//
// A send that fails after part of a message was published (deadline,
// Close) cuts the channel: it sets the channel's broken flag; the receiver
// then fails the peer in the mailbox with transport.ErrConnLost, as TCP
// does when a connection breaks.

// maxMessage bounds a message length read from a ring.
const maxMessage = 1 << 46

// p2pState is the point-to-point state of one arena.
type p2pState struct {
	mu   sync.Mutex
	mb   *transport.Mailbox // guarded by mu
	done chan struct{}      // closed when the receiver exits; guarded by mu

	sendMu []sync.Mutex // per destination: one message at a time
	// delivering is the local rank whose message the receiver is reading
	// into the mailbox right now, -1 if none.
	delivering atomic.Int32
	head       []uint64 // per destination: bytes written; guarded by sendMu

	// role is held by whoever reads the incoming rings: the receiver
	// goroutine, or a goroutine waiting for a receive (Progress).
	role  sync.Mutex
	tails []uint64 // per source: bytes consumed; guarded by role
	gone  []bool   // per source: channel failed; guarded by role
	// streaming is set by a waiter that met a message whose bytes are not
	// all in the ring yet: the receiver goroutine then reads it (a waiter
	// must stay free to give up at its deadline).
	streaming atomic.Bool
	// directOK: per source, a single-copy read has worked; guarded by role.
	directOK []bool
	// share: this rank's receives of large single-copy messages let the
	// sender copy part of them (p2p_share.go); set at Open when every
	// local rank can have a CPU of its own (when they outnumber the CPUs,
	// a receiver would wait for senders that wait for a CPU).
	share atomic.Bool
	// noHelp: per destination, a write into its memory failed, so this
	// rank no longer helps copy its single-copy messages (p2p_share.go);
	// guarded by sendMu.
	noHelp []bool
	// door is the idle receiver's doorbell socket (p2p_door.go); set by
	// Attach before the receiver starts, closed after it exits.
	door door
}

func (st *p2pState) init(size int) {
	st.delivering.Store(-1)
	st.sendMu = make([]sync.Mutex, size)
	st.head = make([]uint64, size)
	st.tails = make([]uint64, size)
	st.gone = make([]bool, size)
	st.directOK = make([]bool, size)
	st.noHelp = make([]bool, size)
	st.door.out.Store(-1)
}

func (st *p2pState) mailbox() *transport.Mailbox {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.mb
}

// stop waits for the receiver goroutine, if any, to exit. Called by
// shutdown after setting closing and waking the doorbells.
func (st *p2pState) stop() {
	st.mu.Lock()
	done := st.done
	st.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Attach starts delivering the point-to-point messages sent to this rank
// into mb, which is indexed by group rank (Config.GlobalRanks): a message
// from local rank q arrives as coming from GlobalRank(q). One mailbox may
// serve other transports too. Attach may be called once; the receiver
// goroutine it starts ends with Close. Peers that close are failed in mb
// with transport.ErrPeerGone once their messages are drained; peers that
// die or cut a message, with transport.ErrConnLost. The caller owns mb:
// Close does not fail it. the mailbox's SetOnStuck handler should call BreakStuck.
func (a *Arena) Attach(mb *transport.Mailbox) error {
	if mb == nil {
		return invalidf("attach: nil mailbox")
	}
	if err := a.enter("attach"); err != nil {
		return err
	}
	st := &a.p2p
	st.mu.Lock()
	if st.mb != nil {
		st.mu.Unlock()
		a.exit()
		return invalidf("attach: a mailbox is already attached")
	}
	st.mb = mb
	st.done = make(chan struct{})
	done := st.done
	st.mu.Unlock()
	a.openDoor()
	go a.recvLoop(mb, done) // keeps the shared hold on a.life until it exits
	return nil
}

// BreakStuck cuts the channel whose message the receiver is delivering
// right now, if any, so that the read ends with transport.ErrConnLost: the
// handler for Mailbox.SetOnStuck (the receiver reads one message at a time,
// so this is the stuck one whatever rank OnStuck names).
func (a *Arena) BreakStuck() {
	if q := int(a.p2p.delivering.Load()); q >= 0 {
		a.BreakPeer(q)
	}
}

// BreakPeer cuts the channel from local rank q to this rank, so that a
// message being read from it ends with transport.ErrConnLost. The channel
// stays unusable.
func (a *Arena) BreakPeer(q int) {
	if q < 0 || q >= a.size || q == a.rank {
		return
	}
	if a.enter("break") != nil {
		return
	}
	defer a.exit()
	a.u32(a.lay.ch(q, a.rank) + chBroken).Store(1)
	bell := a.ctl(a.rank) + ctlBell
	a.u32(bell).Add(1)
	futexWake((*uint32)(a.ptr(bell)))
}

// Send delivers data to local rank peer under tag: it returns once the
// bytes are in peer's ring (the arena does not keep data afterwards). peer
// must have attached a mailbox for messages to be consumed; a message
// larger than the free ring space waits for peer's receiver to drain it.
// Sending to this rank delivers into the attached mailbox directly. Sends
// to one peer are serialized; sends to different peers may run at once.
//
// Errors are *transport.PeerError (Op "send") wrapping ErrTimeout (ctx
// ended first; if part of the message was already published the channel is
// cut), ErrPeerGone, ErrConnLost, or transport.ErrClosed after Close.
func (a *Arena) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	const op = "send"
	if peer < 0 || peer >= a.size {
		return &transport.PeerError{Op: op, Peer: peer, Err: fmt.Errorf("%w: local rank %d is out of range for %d local ranks", ErrInvalid, peer, a.size)}
	}
	if err := a.enter(op); err != nil {
		return err
	}
	defer a.exit()
	stamp := transport.StampFor(ctx, a.globalRank(peer), tag)
	if peer == a.rank {
		mb := a.p2p.mailbox()
		if mb == nil {
			return invalidf("send to self: no mailbox attached")
		}
		if err := mb.Err(); err != nil {
			return &transport.PeerError{Op: op, Peer: a.globalRank(peer), Err: err}
		}
		return mb.DeliverStamped(a.globalRank(peer), tag, len(data), stamp, bytes.NewReader(data))
	}
	st := &a.p2p
	st.sendMu[peer].Lock()
	defer st.sendMu[peer].Unlock()
	ch := a.lay.ch(a.rank, peer)
	ring := a.lay.ring
	broken := a.u32(ch + chBroken)
	if broken.Load() != 0 {
		return &transport.PeerError{Op: op, Peer: a.globalRank(peer), Err: fmt.Errorf("%w: the channel to local rank %d was cut", transport.ErrConnLost, peer)}
	}
	if err := a.peerErr(op, peer, false); err != nil {
		return err
	}
	c := newOpCtx(ctx, op)
	if len(data) >= cmaMin && a.u32(ch+chRefused).Load() == 0 && a.cmaPossible(peer) {
		done, err := a.sendDirect(&c, peer, ch, tag, data, &stamp)
		if done || err != nil {
			return err
		}
		// peer cannot read this process's memory: send through the ring.
	}
	tail := a.u64(ch + chTail)
	head := st.head[peer]
	var hb [msgHdr + transport.StampSize]byte
	h := putMsgHdr(hb[:], tag, uint64(len(data)), &stamp)
	// The header is published whole, with the first piece of data.
	if err := a.waitSpace(&c, peer, ch, head, len(h)); err != nil {
		return err
	}
	a.ringCopy(ch, head, h, true)
	head += uint64(len(h))
	rest := data
	for {
		free := uint64(ring) - (head - tail.Load())
		if len(rest) > 0 && free > 0 {
			k := min(int(free), len(rest))
			if k < len(rest) {
				k = min(k, ring/4) // stream: let the receiver start
			}
			a.ringCopy(ch, head, rest[:k], true)
			head += uint64(k)
			rest = rest[k:]
		}
		a.u64(ch + chHead).Store(head)
		a.ring(peer)
		if len(rest) == 0 {
			break
		}
		if err := a.waitSpace(&c, peer, ch, head, 1); err != nil {
			broken.Store(1)
			a.ring(peer)
			return err
		}
	}
	st.head[peer] = head
	return nil
}

// putMsgHdr writes the ring header of a message of n bytes under tag into
// b (msgHdr + transport.StampSize bytes) and returns it: with st after it
// when st is a stamp.
func putMsgHdr(b []byte, tag transport.Tag, n uint64, st *transport.Stamp) []byte {
	binary.LittleEndian.PutUint64(b[0:], uint64(tag))
	if st.Op == transport.OpNone {
		binary.LittleEndian.PutUint64(b[8:], n)
		return b[:msgHdr]
	}
	binary.LittleEndian.PutUint64(b[8:], n|stampFlag)
	st.Put(b[msgHdr:])
	return b[:msgHdr+transport.StampSize]
}

// ring bumps peer's doorbell and wakes whoever of peer sleeps on it: its
// waiters and readers, or, when no waiter is there to read, its idle
// receiver goroutine.
func (a *Arena) ring(peer int) {
	c := a.ctl(peer)
	a.u32(c + ctlBell).Add(1)
	if a.u32(c+ctlBell+4).Load() != 0 {
		futexWake((*uint32)(a.ptr(c + ctlBell)))
	}
	if a.u32(c+ctlWaiters).Load() == 0 && a.u32(c+ctlIdle+4).Load() != sleepNone {
		a.wakeIdleOf(peer)
	}
}

// waitSpace waits until the ring of channel ch has need free bytes when
// this rank has written head bytes into it.
func (a *Arena) waitSpace(c *opCtx, peer, ch int, head uint64, need int) error {
	return a.waitSpaceOr(c, peer, ch, head, need, nil)
}

// waitSpaceOr is waitSpace that also returns when also (if not nil)
// reports true.
func (a *Arena) waitSpaceOr(c *opCtx, peer, ch int, head uint64, need int, also func() bool) error {
	tail := a.u64(ch + chTail)
	ring := uint64(a.lay.ring)
	ready := func() bool { return ring-(head-tail.Load()) >= uint64(need) || also != nil && also() }
	if ready() {
		return nil
	}
	broken := a.u32(ch + chBroken)
	return a.waitLoopWith(&a.p2pPol, ready, a.low(ch+chTail), a.u32(ch+chSendSleep), c.dl, func(now time.Time, live bool) error {
		if broken.Load() != 0 {
			return &transport.PeerError{Op: c.op, Peer: a.globalRank(peer), Err: fmt.Errorf("%w: the channel to local rank %d was cut", transport.ErrConnLost, peer)}
		}
		return a.checkWait(c, peer, now, live)
	})
}

// ringCopy copies between b and the ring of channel ch at stream position
// pos (into the ring when in, else out of it), wrapping around.
func (a *Arena) ringCopy(ch int, pos uint64, b []byte, in bool) {
	ring := a.lay.ring
	off := int(pos % uint64(ring))
	first := min(len(b), ring-off)
	r1 := a.bytes(ch+chRing+off, first)
	r2 := a.bytes(ch+chRing, len(b)-first)
	if in {
		publish(r1, b)
		publish(r2, b[first:])
	} else {
		copy(b, r1)
		copy(b[first:], r2)
	}
}

// consume advances this rank's tail of channel ch (from src) by k bytes
// and wakes src's sender if it waits for space.
func (a *Arena) consume(ch int, tail *uint64, k int) {
	*tail += uint64(k)
	a.u64(ch + chTail).Store(*tail)
	if a.u32(ch+chSendSleep).Load() != 0 {
		futexWake(a.low(ch + chTail))
	}
}

// recvLoop is the receiver goroutine started by Attach. It holds a.life
// shared until it returns (when the arena closes). While a waiter holds
// the receiving role (Progress) it only sleeps on the doorbell.
func (a *Arena) recvLoop(mb *transport.Mailbox, done chan struct{}) {
	defer close(done)
	defer a.life.RUnlock()
	st := &a.p2p
	me := a.rank
	c := a.ctl(me)
	bell, waiters := a.u32(c+ctlBell), a.u32(c+ctlWaiters)
	idleOff := c + ctlIdle
	idle, idleSleeping := a.u32(idleOff), a.u32(idleOff+4)
	idleSince := time.Now()
	nextCheck := idleSince
	// sleep waits for a sender (or a departing waiter) to wake this
	// goroutine; b and v are the doorbell and the idle counter seen at the
	// top of the loop, before it looked for work: a wake-up since then
	// (a sender's, or a waiter's handing over a streamed message) has
	// changed one of them, and the sleep returns at once.
	// (On the doorbell socket only when deep: waking a goroutine parked in
	// the network poller takes a thread hop more than a futex, which a
	// waiter handing a streamed message over would pay every time.)
	sleep := func(b, v uint32, deep bool) {
		mode := uint32(sleepFutex)
		if deep && a.doorUsable() {
			mode = sleepDoor
		}
		idleSleeping.Store(mode)
		if bell.Load() == b && idle.Load() == v && !a.closing.Load() {
			if mode == sleepDoor {
				a.parkOnDoor(idlePark)
			} else {
				futexWait((*uint32)(a.ptr(idleOff)), v, a.pol.Idle)
			}
		}
		idleSleeping.Store(sleepNone)
	}
	var tick gosched.Ticker // see libgodist/gosched
	for !a.closing.Load() {
		tick.Tick(time.Now())
		b, v := bell.Load(), idle.Load()
		if (waiters.Load() > 0 && !st.streaming.Load()) || !st.role.TryLock() {
			// A waiter reads the rings (Progress): stand aside. Senders do
			// not wake this goroutine while a waiter is there.
			if waiters.Load() > 0 {
				if testHookStandAside != nil {
					testHookStandAside(a)
				}
				sleep(b, v, false)
				idleSince = time.Now() // the rank is at work
				// Peers are watched here all the same.
				if now := time.Now(); !now.Before(nextCheck) && st.role.TryLock() {
					nextCheck = now.Add(a.pol.Liveness)
					a.checkPeers(mb)
					st.role.Unlock()
				}
			} else {
				a.yield()
			}
			continue
		}
		st.streaming.Store(false)
		progressed := a.scan(mb, false)
		if progressed && waiters.Load() > 0 {
			a.kick()
		}
		if a.closing.Load() {
			st.role.Unlock()
			return
		}
		now := time.Now()
		if progressed {
			st.role.Unlock()
			idleSince = now
			continue
		}
		if !now.Before(nextCheck) {
			nextCheck = now.Add(a.pol.Liveness)
			a.checkPeers(mb)
		}
		st.role.Unlock()
		if now.Sub(idleSince) < a.p2pPol.Yield {
			a.yield()
			continue
		}
		sleep(b, v, now.Sub(idleSince) >= deepIdle)
		nextCheck = time.Time{} // check the peers after every sleep
	}
}

// testHookStandAside, when set, runs in recvLoop as it decides to sleep
// while a waiter reads the rings: tests use it to hand a streamed message
// over at that moment.
var testHookStandAside func(*Arena)

// checkPeers fails in mb the sources whose process ended or that closed
// (once their messages are drained). The caller holds the role.
func (a *Arena) checkPeers(mb *transport.Mailbox) {
	st := &a.p2p
	for src := 0; src < a.size; src++ {
		if src == a.rank || st.gone[src] {
			continue
		}
		err := a.peerErr("recv", src, true)
		if err == nil {
			continue
		}
		// A peer that closed may have left messages: drain them first.
		if errors.Is(err, transport.ErrPeerGone) && a.u64(a.lay.ch(src, a.rank)+chHead).Load() != st.tails[src] {
			continue
		}
		st.gone[src] = true
		mb.FailPeer(a.globalRank(src), err)
	}
}

// scan delivers every message that has started to arrive into mb, one per
// source and round, and reports whether it delivered any. With whole, it
// leaves a message whose bytes are not all published yet to the receiver
// goroutine (and wakes it) instead of waiting for them. The caller holds
// the role.
func (a *Arena) scan(mb *transport.Mailbox, whole bool) bool {
	st := &a.p2p
	P, me := a.size, a.rank
	progressed := false
	for k := 1; k < P; k++ {
		src := (me + k) % P
		if st.gone[src] {
			continue
		}
		ok, err := a.recvOne(mb, src, &st.tails[src], whole)
		if err != nil {
			st.gone[src] = true
			mb.FailPeer(a.globalRank(src), err)
			continue
		}
		progressed = progressed || ok
	}
	return progressed
}

// wakeIdle wakes this rank's receiver goroutine from its idle sleep.
func (a *Arena) wakeIdle() { a.wakeIdleOf(a.rank) }

// kick rings this rank's own doorbell, waking goroutines in Progress.
func (a *Arena) kick() {
	bell := a.ctl(a.rank) + ctlBell
	a.u32(bell).Add(1)
	futexWake((*uint32)(a.ptr(bell)))
}

// recvOne delivers the next message from src into mb, if one has started
// to arrive. It reports whether it delivered one, or an error after which
// src's channel is unusable.
func (a *Arena) recvOne(mb *transport.Mailbox, src int, tail *uint64, whole bool) (bool, error) {
	ch := a.lay.ch(src, a.rank)
	if a.u32(ch+chBroken).Load() != 0 {
		return false, &transport.PeerError{Op: "recv", Peer: a.globalRank(src),
			Err: fmt.Errorf("%w: local rank %d cut a message short", transport.ErrConnLost, src)}
	}
	if a.u64(ch+chHead).Load()-*tail < msgHdr {
		return false, nil
	}
	var h [msgHdr]byte
	a.ringCopy(ch, *tail, h[:], false)
	tag, n := binary.LittleEndian.Uint64(h[0:]), binary.LittleEndian.Uint64(h[8:])
	hdr := uint64(msgHdr) // the header's length, with the stamp (published with it)
	var st transport.Stamp
	if n&stampFlag != 0 {
		var b [transport.StampSize]byte
		a.ringCopy(ch, *tail+msgHdr, b[:], false)
		st = transport.ParseStamp(b[:])
		n &^= stampFlag
		hdr += transport.StampSize
	}
	if n&cmaFlag != 0 {
		return a.recvDirect(mb, src, ch, tail, transport.Tag(tag), n&^cmaFlag, hdr, &st)
	}
	if whole && n <= maxMessage && a.u64(ch+chHead).Load()-*tail < hdr+n {
		a.p2p.streaming.Store(true)
		a.wakeIdle()
		return false, nil
	}
	a.consume(ch, tail, int(hdr))
	if n > maxMessage {
		return true, &transport.PeerError{Op: "recv", Peer: a.globalRank(src),
			Err: fmt.Errorf("%w: corrupt message header from local rank %d (length %d)", transport.ErrConnLost, src, n)}
	}
	rd := ringReader{a: a, src: src, ch: ch, tail: tail, left: int(n)}
	return true, a.deliver(mb, src, transport.Tag(tag), int(n), &st, &rd)
}

// deliver hands one message of n bytes from local rank src, stamped st,
// read from rd, to mb; an error is a *transport.PeerError after which
// src's channel is unusable.
func (a *Arena) deliver(mb *transport.Mailbox, src int, tag transport.Tag, n int, st *transport.Stamp, rd io.Reader) error {
	a.p2p.delivering.Store(int32(src))
	err := mb.DeliverStamped(a.globalRank(src), tag, n, *st, rd)
	a.p2p.delivering.Store(-1)
	if err != nil {
		var pe *transport.PeerError
		if !errors.As(err, &pe) {
			err = &transport.PeerError{Op: "recv", Peer: a.globalRank(src), Err: err}
		}
	}
	return err
}

// ringReader reads the payload of one message from a ring, waiting for the
// sender to publish more when it has read everything published.
type ringReader struct {
	a    *Arena
	src  int
	ch   int
	tail *uint64
	left int
}

func (r *ringReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	a := r.a
	head := a.u64(r.ch + chHead)
	broken := a.u32(r.ch + chBroken)
	if head.Load() == *r.tail {
		bellOff := a.ctl(a.rank) + ctlBell
		err := a.waitLoopWith(&a.p2pPol, func() bool { return head.Load() != *r.tail || broken.Load() != 0 },
			(*uint32)(a.ptr(bellOff)), a.u32(bellOff+4), time.Time{},
			func(now time.Time, live bool) error {
				if a.closing.Load() {
					return errClosed("recv")
				}
				return a.peerErr("recv", r.src, live)
			})
		if err != nil {
			return 0, err
		}
	}
	avail := head.Load() - *r.tail
	if avail == 0 {
		return 0, &transport.PeerError{Op: "recv", Peer: a.globalRank(r.src),
			Err: fmt.Errorf("%w: local rank %d cut a message short", transport.ErrConnLost, r.src)}
	}
	k := min(int(min(avail, uint64(r.left))), len(p))
	a.ringCopy(r.ch, *r.tail, p[:k], false)
	a.consume(r.ch, r.tail, k)
	r.left -= k
	return k, nil
}
