package transport

import (
	"errors"
	"fmt"

	"github.com/godist/godist/libgodist/scratch"
)

// Fold makes a receive combine the message into its buffer instead of
// overwriting it: afterwards buf holds Combine(buf, message), element by
// element. A ring reduce-scatter posts its receives this way, so the bytes
// of a step need no buffer of their own: a reader moves them off the
// socket into a small window that stays in cache, and folds each window
// into the destination before reading the next (foldWindow). A message
// that arrived before its receive was posted is folded in from where the
// mailbox kept it.
type Fold struct {
	// Combine sets dst = dst (op) src; the two have the same length, a
	// whole number of elements. Its first error fails the receive (the
	// rest of the message is still read, and not folded).
	Combine func(dst, src []byte) error
	// Elem is the element size in bytes: a power of two up to 64.
	Elem int
}

// foldWindow is the window a reader moves a folded message through: one
// read(2) of a socket holding a megabyte or more fills it, and it stays in
// the L2 cache while it is folded.
const foldWindow = 1 << 20

// ErrFold is wrapped by the error of a receive whose Fold is unusable.
var ErrFold = errors.New("transport: invalid fold")

// check reports why f cannot fold into an n-byte buffer, if it cannot.
func (f *Fold) check(n int) error {
	switch {
	case f.Combine == nil:
		return fmt.Errorf("%w: no combine function", ErrFold)
	case f.Elem <= 0 || f.Elem > 64 || f.Elem&(f.Elem-1) != 0:
		return fmt.Errorf("%w: element size %d is not a power of two up to 64", ErrFold, f.Elem)
	case n%f.Elem != 0:
		return fmt.Errorf("%w: %d bytes are not whole %d-byte elements", ErrFold, n, f.Elem)
	}
	return nil
}

// PostFold posts a receive whose message is folded into buf with f (see
// Fold and Transport.PostFold).
func (mb *Mailbox) PostFold(peer int, tag Tag, buf []byte, f Fold) *Recv {
	return mb.post(peer, tag, buf, &f)
}

// fold combines src into dst with f, or copies it when f is nil, keeping
// the first error in *err (later parts are skipped after one).
func fold(f *Fold, dst, src []byte, err *error) {
	switch {
	case f == nil:
		copy(dst, src)
	case *err == nil:
		*err = f.Combine(dst, src)
	}
}

// beginFold sets d up to fold its payload into r.Buf through a window.
func (d *Delivery) beginFold(r *Recv) {
	d.r, d.fold = r, r.fold
	d.win = scratch.Get(min(foldWindow, d.n))
}

// foldWindowAt folds the whole elements read so far (got bytes) out of
// the window and returns where the bytes from got go: the window from
// got's place in it, up to its end or the payload's.
func (d *Delivery) foldWindowAt(got int) []byte {
	d.foldTo(got - got%d.fold.Elem)
	w := len(d.win)
	off := got % w
	return d.win[off:min(w, off+d.n-got)]
}

// foldTo folds the window's bytes up to payload offset end into the
// receive's buffer. The window is a multiple of the element size, so an
// element never straddles its end.
func (d *Delivery) foldTo(end int) {
	w := len(d.win)
	for d.folded < end {
		off := d.folded % w
		l := min(end-d.folded, w-off)
		fold(d.fold, d.r.Buf[d.folded:d.folded+l], d.win[off:off+l], &d.ferr)
		d.folded += l
	}
}

// endFold folds the rest and returns the window; the combine's error, if
// any, becomes the receive's.
func (d *Delivery) endFold() {
	d.foldTo(d.n)
	scratch.Put(d.win)
	d.win = nil
	if d.ferr != nil && d.err == nil {
		d.err = foldErr(d.src, d.ferr)
	}
}

// foldErr is the error of a receive from src whose combine failed.
func foldErr(src int, err error) error {
	return &PeerError{Op: "recv", Peer: src, Err: fmt.Errorf("folding the message: %w", err)}
}
