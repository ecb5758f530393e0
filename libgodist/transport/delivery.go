package transport

import (
	"fmt"
	"io"

	"github.com/godist/godist/libgodist/scratch"
)

// Delivery is one arriving message whose bytes come in pieces: a reader
// that cannot block until the whole payload is there (a non-blocking
// socket) starts it with Begin when the header arrives, fills Buf as bytes
// come, and ends it with Finish, or with Fail if the stream breaks.
//
// A reader delivers one message at a time per source; a Delivery value can
// be reused once it has ended.
type Delivery struct {
	mb  *Mailbox
	src int
	tag Tag
	n   int
	r   *Recv  // the posted receive it goes into, or nil: kept until posted
	buf []byte // where the payload goes; nil when it is discarded
	err error  // the claimed receive's outcome when the sizes differ
}

// Begin starts delivering an n-byte message from src under tag. If a
// matching receive is posted, Buf is its buffer (the bytes land in place);
// if that receive expects another size, Buf is nil, the payload must be
// read and dropped, and Finish fails the receive. Otherwise Buf is a
// buffer the mailbox keeps the message in until a receive is posted.
func (mb *Mailbox) Begin(d *Delivery, src int, tag Tag, n int) {
	*d = Delivery{mb: mb, src: src, tag: tag, n: n}
	mb.mu.Lock()
	r := mb.matchPosted(src, tag)
	if r != nil {
		r.state = stateClaimed
		r.src = src
	}
	mb.mu.Unlock()
	switch {
	case r == nil:
		d.buf = scratch.Get(n)
	case n != len(r.Buf):
		d.r = r
		d.err = &PeerError{Op: "recv", Peer: src, Err: fmt.Errorf("%w: got %d bytes, expected %d", ErrSizeMismatch, n, len(r.Buf))}
	default:
		d.r, d.buf = r, r.Buf
	}
}

// Buf is where the payload's bytes go, nil if they are to be dropped.
func (d *Delivery) Buf() []byte { return d.buf }

// Len is the payload length.
func (d *Delivery) Len() int { return d.n }

// Finish ends a delivery whose payload is all in Buf (or dropped).
func (d *Delivery) Finish() {
	mb := d.mb
	if d.r != nil {
		mb.mu.Lock()
		hook := mb.complete(d.r, d.src, d.err)
		mb.mu.Unlock()
		runHook(hook, d.r)
		*d = Delivery{}
		return
	}
	data := d.buf
	mb.mu.Lock()
	if r := mb.matchPosted(d.src, d.tag); r != nil {
		var err error
		if len(data) != len(r.Buf) {
			err = &PeerError{Op: "recv", Peer: d.src, Err: fmt.Errorf("%w: got %d bytes, expected %d", ErrSizeMismatch, len(data), len(r.Buf))}
		} else {
			copy(r.Buf, data)
		}
		scratch.Put(data)
		hook := mb.complete(r, d.src, err)
		mb.mu.Unlock()
		runHook(hook, r)
		*d = Delivery{}
		return
	}
	mb.arrivals++
	k := key{d.src, d.tag}
	mb.unexpected[k] = append(mb.unexpected[k], message{data: data, arrival: mb.arrivals})
	mb.mu.Unlock()
	*d = Delivery{}
}

// Fail ends a delivery whose stream broke before the payload was complete:
// a receive it was going into fails with cause (the peer's later failure
// fails the rest).
func (d *Delivery) Fail(cause error) {
	if d.r != nil {
		mb := d.mb
		mb.mu.Lock()
		hook := mb.complete(d.r, d.src, &PeerError{Op: "recv", Peer: d.src, Err: fmt.Errorf("%w: %v", ErrConnLost, cause)})
		mb.mu.Unlock()
		runHook(hook, d.r)
	}
	*d = Delivery{}
}

// Active reports whether a delivery has begun and not ended.
func (d *Delivery) Active() bool { return d.mb != nil }

// Deliver hands the mailbox a message of n bytes from src under tag whose
// payload is read from rd. It is called by one reader per source, in arrival
// order. It returns an error only if reading rd failed, after which the
// stream is unusable.
func (mb *Mailbox) Deliver(src int, tag Tag, n int, rd io.Reader) error {
	var d Delivery
	mb.Begin(&d, src, tag, n)
	var err error
	if b := d.Buf(); b != nil {
		_, err = io.ReadFull(rd, b)
	} else {
		_, err = io.CopyN(io.Discard, rd, int64(n))
	}
	if err != nil {
		d.Fail(err)
		return err
	}
	d.Finish()
	return nil
}
