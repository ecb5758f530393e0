package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// peer is one connection to a remote rank. Writes are serialized by wmu
// (a whole frame is written under it); one reader goroutine owns the read
// side and delivers frames into the transport's mailbox.
type peer struct {
	rank int
	conn *net.TCPConn
	br   *bufio.Reader

	wmu      sync.Mutex
	hdr      [headerSize]byte // guarded by wmu
	deadline time.Time        // write deadline currently set, guarded by wmu

	goodbye    atomic.Bool // the peer said goodbye
	readerDone chan struct{}
}

func newPeer(rank int, conn *net.TCPConn) *peer {
	return &peer{rank: rank, conn: conn, br: bufio.NewReaderSize(conn, 256<<10), readerDone: make(chan struct{})}
}

// send writes one frame. Called by any goroutine.
func (p *peer) send(ctx context.Context, h header, data []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	d, _ := ctx.Deadline()
	if !d.Equal(p.deadline) {
		if err := p.conn.SetWriteDeadline(d); err != nil {
			return err
		}
		p.deadline = d
	}
	putHeader(&p.hdr, h)
	if len(data) == 0 {
		_, err := p.conn.Write(p.hdr[:])
		return err
	}
	if len(data) <= 16<<10 {
		// Small payloads: one copy into a buffer is cheaper than writev.
		buf := make([]byte, headerSize+len(data))
		copy(buf, p.hdr[:])
		copy(buf[headerSize:], data)
		_, err := p.conn.Write(buf)
		return err
	}
	bufs := net.Buffers{p.hdr[:], data}
	_, err := bufs.WriteTo(p.conn)
	return err
}

// readLoop delivers frames until the connection ends. It reports how it
// ended through t.peerEnded.
func (p *peer) readLoop(t *Transport) {
	defer close(p.readerDone)
	var hb [headerSize]byte
	for {
		if _, err := ioReadFull(p.br, hb[:]); err != nil {
			t.peerEnded(p, err)
			return
		}
		h, err := parseHeader(&hb)
		if err != nil {
			t.peerEnded(p, err)
			return
		}
		switch h.kind {
		case kindGoodbye:
			p.goodbye.Store(true)
			if !t.isDelegated(p.rank) {
				t.mb.FailPeer(p.rank, transport.ErrPeerGone)
			}
		case kindData:
			if err := t.mb.Deliver(p.rank, h.tag, int(h.n), p.br); err != nil {
				t.peerEnded(p, err)
				return
			}
		}
	}
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := r.Read(b[n:])
		n += k
		if err != nil {
			if n == len(b) {
				return n, nil
			}
			return n, err
		}
	}
	return n, nil
}

func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed)
}

func describe(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %v", transport.ErrTimeout, err)
	}
	return fmt.Errorf("%w: %v", transport.ErrConnLost, err)
}
