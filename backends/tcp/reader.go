package tcp

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/godist/godist/libgodist/transport"
)

// reader is the read side of one connection. Its state (buffered bytes,
// the frame being read) is owned by whoever holds role: a goroutine
// waiting for a message (Transport.Help), which reads the socket itself,
// or the peer's reader goroutine when no one waits. Reads are
// non-blocking; pump always reads until the socket has nothing more
// (EAGAIN). Bytes that woke the reader goroutine while a waiter held the
// role are covered by missed: the waiter kicks it when it lets go.
type reader struct {
	role   sync.Mutex
	missed atomic.Bool // the reader goroutine found role taken

	buf  []byte // buffered bytes are buf[r:w]
	r, w int

	inFrame bool               // a data frame's payload is being read
	d       transport.Delivery // its delivery
	got     int                // payload bytes read so far
	skip    int                // padding bytes after the last payload still to drop
	lean    bool               // the last payload was large: read the next header alone
	err     error              // sticky: the stream is unusable (EOF, corrupt, read error)
}

const (
	readBufSize = 64 << 10
	// directMin: a payload remainder at least this large is read straight
	// into its destination rather than through buf.
	directMin = 16 << 10
	// leanMin: after a payload at least this large, the reader reads the
	// next frame's header alone (one more read(2) per frame) instead of a
	// whole buf, of which up to 64 KiB of payload would be copied again.
	leanMin = readBufSize
	// readChunk is the largest single read straight into a destination:
	// large enough that one read(2) takes all the socket holds. Fewer,
	// larger reads mean fewer system calls and fewer window updates, each
	// of which wakes the sender.
	readChunk = 64 << 20
	// rcvLowatMax bounds the socket's receive low-water mark (SO_RCVLOWAT)
	// while a payload is being read: poll(2) and the poller report the
	// socket readable only once that many bytes of it (or all that is
	// left, if less) have arrived. Without it a sleeping reader woke for
	// every few dozen KiB. The kernel caps the mark at half the
	// largest receive buffer and grows the buffer to hold it.
	rcvLowatMax = 1 << 20
)

var errEOF = fmt.Errorf("%w: connection closed by peer", io.EOF)

func newReader() *reader { return &reader{buf: make([]byte, readBufSize)} }

// pump reads what p's socket has and delivers every frame it completes
// into t's mailbox, until the socket would block. It reports whether it
// consumed anything; an error means the stream ended or broke (also kept
// in rd.err). Called with role held.
func (rd *reader) pump(t *Transport, p *peer) (bool, error) {
	if rd.err != nil {
		return false, rd.err
	}
	progressed := false
	for {
		if rd.inFrame {
			done, err := rd.payload(p.sk, &progressed)
			if err != nil {
				return progressed, rd.fail(err)
			}
			if !done {
				// Whoever sleeps on the socket next (a waiter in
				// poll(2), the reader goroutine in the poller) wakes
				// once a good part of the rest is there, not at
				// every packet.
				p.sk.setLowat(min(rd.d.Len()-rd.got, rcvLowatMax))
				return progressed, nil
			}
			p.sk.setLowat(1)
			continue
		}
		if rd.skip > 0 && rd.r < rd.w {
			k := min(rd.skip, rd.w-rd.r)
			rd.r += k
			rd.skip -= k
			progressed = true
			continue
		}
		if rd.skip == 0 && rd.w-rd.r >= headerSize {
			if err := rd.header(t, p); err != nil {
				return true, rd.fail(err)
			}
			progressed = true
			continue
		}
		if rd.r > 0 { // keep a partial header at the front
			rd.w = copy(rd.buf, rd.buf[rd.r:rd.w])
			rd.r = 0
		}
		into := rd.buf[rd.w:]
		if rd.lean {
			// After a large payload the next frame is likely large too:
			// read up to the end of its header only, so that its payload
			// goes straight into place rather than partly through buf.
			into = into[:rd.skip+headerSize-(rd.w-rd.r)]
		}
		n, err := p.sk.read(into)
		if err != nil {
			return progressed, rd.fail(err)
		}
		if n == 0 {
			return progressed, nil
		}
		rd.w += n
		progressed = true
	}
}

// header parses the buffered frame header and starts its delivery.
func (rd *reader) header(t *Transport, p *peer) error {
	var hb [headerSize]byte
	copy(hb[:], rd.buf[rd.r:rd.r+headerSize])
	rd.r += headerSize
	h, err := parseHeader(&hb)
	if err != nil {
		return err
	}
	switch h.kind {
	case kindGoodbye:
		p.goodbye.Store(true)
		if !t.isDelegated(p.rank) {
			t.mb.FailPeer(p.rank, transport.ErrPeerGone)
		}
	case kindData:
		t.mb.BeginStamped(&rd.d, p.rank, h.tag, int(h.n), h.st)
		rd.inFrame, rd.got = true, 0
	}
	return nil
}

// payload moves payload bytes into the delivery's windows: buffered ones
// first, then from the socket. It reports whether the payload is complete
// (and delivered).
func (rd *reader) payload(sk *sock, progressed *bool) (bool, error) {
	n := rd.d.Len()
	for rd.got < n {
		// A receive posted since the header arrived may have adopted the
		// message: the rest goes into its buffer.
		dst := rd.d.Window(rd.got)
		if rd.r < rd.w {
			k := min(rd.w-rd.r, n-rd.got)
			if dst != nil {
				k = copy(dst[:min(k, len(dst))], rd.buf[rd.r:rd.r+k])
			}
			rd.r += k
			rd.got += k
			*progressed = true
			continue
		}
		rd.r, rd.w = 0, 0
		var k int
		var err error
		if dst != nil && n-rd.got >= directMin {
			k, err = sk.read(dst[:min(len(dst), readChunk)])
			rd.got += k
		} else {
			k, err = sk.read(rd.buf)
			rd.w = k
		}
		if err != nil {
			return false, err
		}
		if k == 0 {
			return false, nil
		}
		*progressed = true
	}
	rd.inFrame = false
	rd.skip = padding(n)
	rd.lean = n >= leanMin
	rd.d.Finish()
	return true, nil
}

// fail records err as the end of the stream; a delivery in progress fails.
func (rd *reader) fail(err error) error {
	if rd.err == nil {
		rd.err = err
		if rd.inFrame {
			rd.inFrame = false
			rd.d.Fail(err)
		}
	}
	return rd.err
}
