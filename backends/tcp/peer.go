package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// peer is one connection to a remote rank. Writes are serialized by wmu
// (a whole frame is written under it). Reads (reader.go) are done by
// whoever holds the reader's role: a goroutine waiting for a message from
// this peer (Transport.Help), or, when no one waits, the peer's reader
// goroutine.
type peer struct {
	rank int
	sk   *sock
	rd   *reader

	wmu sync.Mutex
	hdr [headerSize]byte // guarded by wmu

	goodbye    atomic.Bool                         // the peer said goodbye
	lost       atomic.Pointer[transport.PeerError] // why the connection failed (without a goodbye)
	readerDone chan struct{}

	// Waiters reading this socket themselves keep the reader goroutine
	// off it: see rest.
	helpers atomic.Int32
	helpEnd atomic.Int64  // clock() when the last one stopped
	kicked  atomic.Bool   // rest returns at once (kick)
	wake    chan struct{} // wakes a resting reader goroutine to look at kicked

	// draining: a send waiting for room found bytes on this idle socket
	// and kicked the reader goroutine, which stays on the socket while
	// any send waits for room (see Transport.waitRoom).
	draining atomic.Bool
	resting  atomic.Bool // the reader goroutine is in rest
}

func newPeer(rank int, c *net.TCPConn) (*peer, error) {
	sk, err := newSock(c)
	if err != nil {
		return nil, err
	}
	return &peer{rank: rank, sk: sk, rd: newReader(), readerDone: make(chan struct{}), wake: make(chan struct{}, 1)}, nil
}

// send writes one frame. Called by any goroutine. A send that finds the
// socket full waits for room in wait (Transport.waitRoom; nil: poll(2) on
// the socket alone).
func (p *peer) send(ctx context.Context, h header, data []byte, wait roomWaiter) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	d, _ := ctx.Deadline()
	putHeader(&p.hdr, h)
	return p.sk.writeFrame(p.hdr[:], data, writeChunk, d, wait)
}

// writeChunk is the largest single write of a payload: one huge write
// holds the socket lock and delays the window updates, and smaller pieces
// cost more system calls and waits for room.
const writeChunk = 2 << 20

// linger is how long after a waiter last read the socket itself the
// reader goroutine stays off it. Bytes that arrive in that time wait in the
// socket for the next waiter, which reads them straight into its buffer;
// a reader goroutine on the socket would take them first whenever they
// arrive before their receive is posted, and buffer and copy them again;
// with more ranks than cores that was most replies of a ping-pong. A waiter that leaves bytes unread,
// a send that waits for room while bytes wait on a resting reader's
// socket (Transport.waitRoom), a receive from any source, and closing
// kick the reader back to the socket at once.
var linger = 10 * time.Millisecond

// restMax bounds the resting reader's sleep while waiters read its
// socket. A resting reader sleeps 1 ms, then twice as long each time it
// wakes to find waiters still (or again) reading, up to restMax: under a
// steady stream of waiters a timer firing every millisecond was the
// runtime's most frequent wake-up (about one per round trip in an 8-rank
// ping-pong on 2 cores, each waking an idle thread that then looks for
// work).
const restMax = 8 * time.Millisecond

// restMin is the resting reader's first sleep while waiters read.
const restMin = time.Millisecond

var epoch = time.Now()

// clock is monotonic nanoseconds.
func clock() int64 { return int64(time.Since(epoch)) }

// kick makes a resting reader goroutine go back to the socket now (or
// the next time it would rest).
func (p *peer) kick() {
	p.kicked.Store(true)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// rest keeps the reader goroutine off the socket while waiters read it
// themselves, and for linger after the last one stopped: a reader asleep
// on the socket is woken by every arrival, which the waiter consumes
// anyway. Bytes that arrive while it rests wait in the socket; a waiter
// that leaves bytes unread, a send waiting for room that sees bytes here,
// and closing kick it. Kicked by such a send (draining), it stays on the
// socket while no waiter reads it and any send still waits for room.
func (p *peer) rest(t *Transport) {
	var timer *time.Timer
	p.resting.Store(true)
	defer func() {
		p.resting.Store(false)
		if timer != nil {
			timer.Stop()
		}
	}()
	nap := restMin
	for !t.closing.Load() {
		if p.kicked.Swap(false) {
			return
		}
		if p.draining.Load() && p.helpers.Load() == 0 {
			if t.roomWaits.Load() > 0 {
				return
			}
			p.draining.Store(false)
		}
		d := nap
		if p.helpers.Load() == 0 {
			idle := time.Duration(clock() - p.helpEnd.Load())
			if idle >= linger {
				return
			}
			d = max(linger-idle, nap)
		}
		nap = min(2*nap, restMax)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-p.wake: // kicked (or a stale token: the loop checks)
		case <-timer.C:
		}
	}
}

// readLoop delivers frames while no one else reads the socket, parked in
// Go's network poller while it is empty (sock.park), until the connection
// ends. It reports how it ended through t.peerEnded.
func (p *peer) readLoop(t *Transport) {
	defer close(p.readerDone)
	for {
		p.rest(t)
		if err := p.sk.park(); err != nil {
			// A frame half read when the socket broke fails here: no
			// pump will see the error.
			p.rd.role.Lock()
			err = p.rd.fail(err)
			p.rd.role.Unlock()
			t.peerEnded(p, err)
			return
		}
		// A waiter holding the role reads these bytes; it kicks us when
		// it lets go (missed).
		p.rd.missed.Store(true)
		if !p.rd.role.TryLock() {
			if !t.closing.Load() {
				continue // rest until the waiter lets go
			}
			// Closing: rest returns at once, so wait for the waiter here
			// rather than spin on the readable socket.
			p.rd.role.Lock()
		}
		p.rd.missed.Store(false)
		_, perr := p.rd.pump(t, p)
		p.rd.role.Unlock()
		if perr != nil {
			t.peerEnded(p, perr)
			return
		}
	}
}

// help reads what the socket has on the calling goroutine, if no one else
// is reading it now. It reports whether it consumed anything.
func (p *peer) help(t *Transport) bool {
	if !p.rd.role.TryLock() {
		return false
	}
	got, perr := p.rd.pump(t, p)
	p.rd.role.Unlock()
	if perr != nil {
		// The reader goroutine reports the end of the stream.
		p.kick()
	}
	return got
}

func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed)
}

func describe(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: %v", transport.ErrTimeout, err)
	}
	return fmt.Errorf("%w: %v", transport.ErrConnLost, err)
}
