package transport

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/godist/godist/libgodist/scratch"
)

// Delivery is one arriving message whose bytes come in pieces: a reader
// that cannot block until the whole payload is there (a non-blocking
// socket) starts it with Begin when the header arrives, fills the Windows
// as bytes come, and ends it with Finish, or with Fail if the stream
// breaks.
//
// A reader delivers one message at a time per source; a Delivery value can
// be reused once it has ended.
type Delivery struct {
	mb   *Mailbox
	src  int
	tag  Tag
	n    int
	r    *Recv  // the posted receive it goes into, or nil: kept until posted
	buf  []byte // where the payload goes; nil when it is discarded or parted
	err  error  // the claimed receive's outcome when the sizes differ
	drop bool   // the payload is read and dropped (BeginStamped)

	// A large message with no receive yet is kept in parts of partSize,
	// taken as its bytes come: most are adopted by a receive posted soon
	// after, and then only the parts read so far were needed (a buffer of
	// the whole size would be zeroed and faulted in for nothing).
	parts  [][]byte
	parted bool

	// A large message that arrived before its receive is registered in
	// mb.inflight while it is read; a receive posted meanwhile adopts it
	// (pending, under mb.mu, and adopt set) and the reader moves over to
	// the receive's buffer at its next Sync, so only the bytes read before
	// the post are copied twice.
	pending *Recv  // guarded by mb.mu
	adopt   uint32 // atomic: pending is set

	// A receive with a Fold: the payload passes through win and is folded
	// into r.Buf up to folded (fold.go).
	fold   *Fold
	win    []byte
	folded int
	ferr   error
}

// adoptMin is the smallest unmatched message a later receive adopts while
// it is still being read; smaller ones are cheaper to copy once.
const adoptMin = 256 << 10

// partSize is the size of the parts a large unmatched message is kept in.
const partSize = 1 << 20

// Begin starts delivering an n-byte message from src under tag. If a
// matching receive is posted, Buf is its buffer (the bytes land in place);
// if that receive expects another size, the Windows are nil, the payload
// must be read and dropped, and Finish fails the receive. Otherwise the
// mailbox keeps the message until a receive is posted.
func (mb *Mailbox) Begin(d *Delivery, src int, tag Tag, n int) {
	mb.BeginStamped(d, src, tag, n, Stamp{})
}

// BeginStamped is Begin for a message stamped st by its sender (the zero
// Stamp: none). A message whose stamp shows that its sender runs another
// collective than this rank is dropped (its Windows are nil and Finish
// does nothing): receives of collective tags fail with the DesyncError,
// which goes to the function set with SetOnDesync.
func (mb *Mailbox) BeginStamped(d *Delivery, src int, tag Tag, n int, st Stamp) {
	*d = Delivery{mb: mb, src: src, tag: tag, n: n}
	mb.mu.Lock()
	if st.Op != OpNone || mb.anyCollErr || mb.anyGone {
		if drop, de, tr := mb.arrival(src, tag, st); drop {
			d.drop = true
			if de == nil {
				mb.mu.Unlock()
				return
			}
			failed, hooks := mb.failColl(tr, tag.group(), de)
			f := tr.onDesync
			mb.mu.Unlock()
			for i, r := range failed {
				runHook(hooks[i], r)
			}
			if f != nil {
				f(de)
			}
			return
		}
	}
	r := mb.matchPosted(src, tag)
	if r != nil {
		r.state = stateClaimed
		r.src = src
	}
	if r == nil && n >= adoptMin {
		mb.inflight[src] = d
	}
	mb.mu.Unlock()
	switch {
	case r == nil && n >= adoptMin:
		d.parted = true
	case r == nil:
		d.buf = scratch.Get(n)
	case n != len(r.Buf):
		d.r = r
		d.err = &PeerError{Op: "recv", Peer: src, Err: fmt.Errorf("%w: got %d bytes, expected %d", ErrSizeMismatch, n, len(r.Buf))}
	case r.fold != nil && n > 0:
		d.beginFold(r)
	default:
		d.r, d.buf = r, r.Buf
	}
}

// Window returns where the payload's bytes from offset got on go (a
// slice that may end before the payload does), or nil if they are to be
// dropped. A receive that adopted the message since the last call gets
// the got bytes read so far copied into its buffer, and the rest goes
// there.
func (d *Delivery) Window(got int) []byte {
	if d.fold != nil {
		return d.foldWindowAt(got)
	}
	if atomic.LoadUint32(&d.adopt) != 0 && d.r == nil {
		d.sync(got)
	}
	if d.parted {
		i := got / partSize
		for len(d.parts) <= i {
			d.parts = append(d.parts, scratch.Get(partSize))
		}
		return d.parts[i][got%partSize : min(partSize, d.n-i*partSize)]
	}
	if d.buf == nil {
		return nil
	}
	return d.buf[got:]
}

// sync moves a delivery that a receive has adopted over to that receive's
// buffer, copying the first got bytes already read.
func (d *Delivery) sync(got int) {
	mb := d.mb
	mb.mu.Lock()
	r := d.pending
	d.r = r
	mb.forget(d)
	mb.mu.Unlock()
	d.copyOut(r.Buf[:got])
	d.free()
	d.buf = r.Buf
}

// copyOut copies the first len(dst) bytes kept so far into dst.
func (d *Delivery) copyOut(dst []byte) {
	if !d.parted {
		copy(dst, d.buf)
		return
	}
	for _, p := range d.parts {
		if len(dst) == 0 {
			break
		}
		dst = dst[copy(dst, p):]
	}
}

// free returns the storage of a message kept by the mailbox.
func (d *Delivery) free() {
	if d.parted {
		for _, p := range d.parts {
			scratch.Put(p)
		}
		d.parts, d.parted = nil, false
		return
	}
	scratch.Put(d.buf)
	d.buf = nil
}

// Len is the payload length.
func (d *Delivery) Len() int { return d.n }

// Finish ends a delivery whose payload is all in its Windows (or
// dropped).
func (d *Delivery) Finish() {
	mb := d.mb
	if d.drop {
		*d = Delivery{}
		return
	}
	if d.r == nil && atomic.LoadUint32(&d.adopt) != 0 {
		d.sync(d.n)
	}
	if d.fold != nil {
		d.endFold()
	}
	if d.r != nil {
		mb.mu.Lock()
		hook := mb.complete(d.r, d.src, d.err)
		mb.mu.Unlock()
		runHook(hook, d.r)
		*d = Delivery{}
		return
	}
	mb.mu.Lock()
	if d.pending != nil { // adopted after the check above
		mb.mu.Unlock()
		d.sync(d.n)
		d.Finish()
		return
	}
	mb.forget(d)
	m := message{data: d.buf, parts: d.parts, n: d.n}
	if r := mb.matchPosted(d.src, d.tag); r != nil {
		err := m.deliver(d.src, r.Buf, r.fold)
		hook := mb.complete(r, d.src, err)
		mb.mu.Unlock()
		runHook(hook, r)
		*d = Delivery{}
		return
	}
	mb.arrivals++
	m.arrival = mb.arrivals
	k := key{d.src, d.tag}
	mb.unexpected[k] = append(mb.unexpected[k], m)
	mb.mu.Unlock()
	*d = Delivery{}
}

// Fail ends a delivery whose stream broke before the payload was complete:
// a receive it was going into fails with cause (the peer's later failure
// fails the rest).
func (d *Delivery) Fail(cause error) {
	if d.mb == nil {
		return
	}
	mb := d.mb
	mb.mu.Lock()
	r := d.r
	if r == nil {
		r = d.pending
		mb.forget(d)
	}
	var hook func(*Recv)
	if r != nil {
		hook = mb.complete(r, d.src, lostErr(d.src, cause))
	}
	mb.mu.Unlock()
	if d.r == nil {
		d.free()
	}
	if d.win != nil {
		scratch.Put(d.win)
	}
	if r != nil {
		runHook(hook, r)
	}
	*d = Delivery{}
}

// lostErr is the error of a receive from src whose stream broke with cause:
// cause itself when it already says that the connection to src was lost.
func lostErr(src int, cause error) error {
	var pe *PeerError
	if errors.As(cause, &pe) && pe.Peer == src && errors.Is(pe.Err, ErrConnLost) {
		return pe
	}
	return &PeerError{Op: "recv", Peer: src, Err: fmt.Errorf("%w: %v", ErrConnLost, cause)}
}

// forget removes d from the deliveries receives can adopt. Called with
// mb.mu held.
func (mb *Mailbox) forget(d *Delivery) {
	if mb.inflight[d.src] == d {
		delete(mb.inflight, d.src)
	}
}

// adopt claims for r, posted from peer (or AnySource) under tag, a
// matching message that is being read, if there is one. Called with mb.mu
// held, after the stored messages were checked.
func (mb *Mailbox) adopt(r *Recv) bool {
	if len(mb.inflight) == 0 {
		return false
	}
	var d *Delivery
	if r.Peer != AnySource {
		d = mb.inflight[r.Peer]
	} else {
		for _, x := range mb.inflight {
			if x.tag == r.Tag && x.pending == nil && x.n == len(r.Buf) {
				d = x
				break
			}
		}
	}
	if d == nil || d.tag != r.Tag || d.pending != nil || d.n != len(r.Buf) || r.fold != nil {
		return false
	}
	// An earlier receive that could match (one of another size, which
	// did not adopt it) keeps its turn: the message completes it.
	if len(mb.posted[key{d.src, d.tag}]) > 0 || len(mb.anyPosted[d.tag]) > 0 {
		return false
	}
	r.state = stateClaimed
	r.src = d.src
	d.pending = r
	atomic.StoreUint32(&d.adopt, 1)
	return true
}

// Active reports whether a delivery has begun and not ended.
func (d *Delivery) Active() bool { return d.mb != nil }

// Deliver hands the mailbox a message of n bytes from src under tag whose
// payload is read from rd. It is called by one reader per source, in arrival
// order. It returns an error only if reading rd failed, after which the
// stream is unusable.
func (mb *Mailbox) Deliver(src int, tag Tag, n int, rd io.Reader) error {
	return mb.DeliverStamped(src, tag, n, Stamp{}, rd)
}

// DeliverStamped is Deliver for a message stamped st by its sender (see
// BeginStamped).
func (mb *Mailbox) DeliverStamped(src int, tag Tag, n int, st Stamp, rd io.Reader) error {
	var d Delivery
	mb.BeginStamped(&d, src, tag, n, st)
	var err error
	for got := 0; got < n && err == nil; {
		w := d.Window(got)
		if w == nil {
			_, err = io.CopyN(io.Discard, rd, int64(n-got))
			break
		}
		var k int
		k, err = io.ReadFull(rd, w[:min(len(w), n-got)])
		got += k
	}
	if err != nil {
		d.Fail(err)
		return err
	}
	d.Finish()
	return nil
}
