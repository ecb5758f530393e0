package libgodist

// Pipelining for the ring algorithms over sockets: a large chunk is cut
// into segments, the segments go out in order on a sender goroutine, and
// the caller reduces (or forwards) each received segment as soon as it has
// landed, while later segments are still on the wire in both directions.

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/gosched"
	"github.com/godist/godist/libgodist/transport"
)

// segments cuts b into consecutive pieces of at most seg bytes; an empty b
// has none. Sender and receiver cut a chunk the same way, so the i-th
// message of a step always carries the i-th piece.
func segments(b []byte, seg int) [][]byte {
	out := make([][]byte, 0, (len(b)+seg-1)/seg)
	for lo := 0; lo < len(b); lo += seg {
		out = append(out, b[lo:min(lo+seg, len(b))])
	}
	return out
}

// sendQueue sends byte slices to one peer, in the order pushed, on its own
// goroutine. push never blocks (the queue is sized for the whole op); after
// the first failure the rest are dropped. finish must be called before the
// op returns: it waits until nothing reads the caller's buffers any more.
type sendQueue struct {
	c       *comm
	to      int
	q       chan queued
	done    chan struct{}
	dropped atomic.Bool     // the op failed: send nothing more
	err     error           // written by the goroutine before done is closed
	gate    *transport.Recv // if set, nothing is sent before it arrives
}

type queued struct {
	step uint16
	b    []byte
}

func newSendQueue(c *comm, to, capacity int) *sendQueue {
	return newGatedSendQueue(c, to, capacity, nil)
}

// newGatedSendQueue is newSendQueue whose goroutine first waits for gate (a
// receive from the peer saying its receives are posted); if gate fails,
// nothing is sent and finish returns its error.
func newGatedSendQueue(c *comm, to, capacity int, gate *transport.Recv) *sendQueue {
	s := &sendQueue{c: c, to: to, q: make(chan queued, capacity), done: make(chan struct{}), gate: gate}
	go s.run()
	return s
}

func (s *sendQueue) run() {
	defer close(s.done)
	if s.gate != nil {
		s.err = s.c.wait(s.gate)
	}
	// The goroutine is handed its work through the channel, which runs it
	// on its waker's time slice: its P's scheduling tick stands still, and
	// the runtime's monitor takes the P back while a send sleeps for room.
	var tick gosched.Ticker
	for m := range s.q {
		if s.err != nil || s.dropped.Load() {
			continue
		}
		tick.Tick(time.Now())
		s.err = s.c.send(s.to, m.step, m.b)
	}
}

func (s *sendQueue) push(step uint16, b []byte) { s.q <- queued{step, b} }

// drop makes the goroutine skip what is still queued (the op has failed).
func (s *sendQueue) drop() {
	s.dropped.Store(true)
	if s.gate != nil {
		s.gate.Cancel(errDropped)
	}
}

// errDropped is what a sender queue's gate fails with when the op failed
// on this rank first.
var errDropped = errors.New("the op already failed on this rank")

// finish closes the queue and waits for the sends already pushed (each is
// bounded by the op's deadline); it returns the first send error.
func (s *sendQueue) finish() error {
	close(s.q)
	<-s.done
	return s.err
}
