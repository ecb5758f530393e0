package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/scratch"
)

// Mailbox matches incoming messages to posted receives. Every transport
// embeds one: its reader delivers each arriving message with Deliver, and its
// PostRecv is Mailbox.Post. Messages from one source under one tag match
// receives in post order; a message that arrives before its receive is kept
// (copied once) until a receive is posted.
//
// A Mailbox is safe for concurrent use.
type Mailbox struct {
	mu         sync.Mutex
	size       int
	postSeq    uint64
	arrivals   uint64
	posted     map[key][]*Recv
	anyPosted  map[Tag][]*Recv
	unexpected map[key][]message
	inflight   map[int]*Delivery // by source; see Delivery.pending
	peerErr    []error
	err        error

	// Desync checks (desync.go), guarded by mu: this transport's group's
	// and those of the child groups sharing it (GroupTag), by id.
	root       tracking
	groups     map[uint16]*tracking
	anyCollErr bool // some group's collectives failed (tracking.collErr)
	anyGone    bool // some child group closed (ForgetGroup)
	anyLeft    bool // some peer left a child group (PeerLeftGroup)

	onStuck func(peer int) // guarded by mu; see SetOnStuck
	helper  Helper         // guarded by mu; see SetHelper

	groupHelper GroupHelper // guarded by mu; see SetGroupHelper
}

// Helper reads messages from peer (or AnySource) into the mailbox on the
// calling goroutine until done is closed or until passes (a zero until
// polls once). It returns false at once if it cannot help with peer; the
// waiter then blocks instead.
type Helper func(peer int, done <-chan struct{}, until time.Time) bool

// SetHelper installs the transport's Helper: receives waited for with
// Recv.Wait or Recv.Help then make progress on the waiting goroutine.
func (mb *Mailbox) SetHelper(h Helper) {
	mb.mu.Lock()
	mb.helper = h
	mb.mu.Unlock()
}

func (mb *Mailbox) getHelper() Helper {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.helper
}

// helpSlice bounds one Helper call made by Recv.Wait, so that a canceled
// context is noticed promptly.
const helpSlice = 10 * time.Millisecond

// SetOnStuck sets the function called (without locks) with a peer whose
// message is being read into a receive that must be abandoned; the
// transport must then break that connection so the read ends.
func (mb *Mailbox) SetOnStuck(f func(peer int)) {
	mb.mu.Lock()
	mb.onStuck = f
	mb.mu.Unlock()
}

type key struct {
	src int
	tag Tag
}

type message struct {
	data    []byte   // the payload, or nil when kept in parts
	parts   [][]byte // a large payload in parts of partSize (Delivery)
	n       int      // the payload's length
	arrival uint64
}

// deliver copies m into buf (a receive from src), or folds it in with f
// when f is not nil, or reports the sizes' mismatch, and frees m's storage.
// (The parts are a multiple of any element size Fold allows.)
func (m *message) deliver(src int, buf []byte, f *Fold) error {
	var err, ferr error
	if m.n != len(buf) {
		err = &PeerError{Op: "recv", Peer: src, Err: fmt.Errorf("%w: got %d bytes, expected %d", ErrSizeMismatch, m.n, len(buf))}
	} else if m.parts == nil {
		fold(f, buf, m.data[:m.n], &ferr)
	} else {
		for _, p := range m.parts {
			l := min(len(p), len(buf))
			fold(f, buf[:l], p[:l], &ferr)
			buf = buf[l:]
		}
	}
	if ferr != nil {
		err = foldErr(src, ferr)
	}
	if m.parts == nil {
		scratch.Put(m.data)
	}
	for _, p := range m.parts {
		scratch.Put(p)
	}
	return err
}

// stuckGrace is how long a canceled receive waits for a message that is
// already being read before it asks the transport to break the connection.
var stuckGrace = time.Second

// NewMailbox returns a mailbox for a group of size ranks.
func NewMailbox(size int) *Mailbox {
	return &Mailbox{
		size:       size,
		posted:     map[key][]*Recv{},
		anyPosted:  map[Tag][]*Recv{},
		unexpected: map[key][]message{},
		inflight:   map[int]*Delivery{},
		peerErr:    make([]error, size),
		root:       tracking{early: make([][]Stamp, size)},
	}
}

const (
	statePosted = iota
	stateClaimed
	stateDone
)

// Recv is a posted receive. Its fields Peer, Tag and Buf are what was posted.
type Recv struct {
	Peer int
	Tag  Tag
	Buf  []byte

	mb    *Mailbox
	seq   uint64
	state int
	done  chan struct{}
	src   int
	err   error
	hook  func(*Recv)
	fold  *Fold // fold the message into Buf (fold.go)
	// ranks turns the transport's rank of the sender into the poster's
	// (MapSource); nil: the same.
	ranks []int
}

// Done is closed when the receive has completed (successfully or not).
func (r *Recv) Done() <-chan struct{} { return r.done }

// Err is the outcome; valid after Done is closed.
func (r *Recv) Err() error { return r.err }

// Source is the rank the message came from; valid after a successful Wait.
func (r *Recv) Source() int {
	if r.ranks != nil && r.src >= 0 && r.src < len(r.ranks) {
		return r.ranks[r.src]
	}
	return r.src
}

// MapSource makes Source answer ranks[src] for a message from the
// transport's rank src: a transport that serves a child group over its
// parent's posts the parent's receive and calls it before handing the
// receive out.
func (r *Recv) MapSource(ranks []int) { r.ranks = ranks }

// OnDone registers f to be called exactly once when the receive completes,
// on whichever goroutine completes it (or at once if it already has). f must
// not block.
func (r *Recv) OnDone(f func(*Recv)) {
	r.mb.mu.Lock()
	if r.state != stateDone {
		r.hook = f
		r.mb.mu.Unlock()
		return
	}
	r.mb.mu.Unlock()
	f(r)
}

// Help makes progress toward this receive on the calling goroutine until
// it completes or until passes, if the transport has a Helper that can
// (see SetHelper); it reports whether it could.
func (r *Recv) Help(until time.Time) bool {
	select {
	case <-r.done:
		return true
	default:
	}
	h := r.mb.getHelper()
	return h != nil && h(r.Peer, r.done, until)
}

// Wait blocks until the receive completes or ctx ends. When ctx ends first
// the receive is canceled, and Wait returns only once the transport no
// longer touches Buf.
func (r *Recv) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	default:
	}
	if h := r.mb.getHelper(); h != nil {
		dl, hasDl := ctx.Deadline()
		for {
			until := time.Now().Add(helpSlice)
			if hasDl && dl.Before(until) {
				until = dl
			}
			if !h(r.Peer, r.done, until) {
				break
			}
			select {
			case <-r.done:
				return r.err
			case <-ctx.Done():
				r.Cancel(ctxErr(ctx))
				return r.err
			default:
			}
		}
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		r.Cancel(ctxErr(ctx))
		return r.err
	}
}

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrTimeout
	}
	return fmt.Errorf("%w: %v", ErrClosed, context.Cause(ctx))
}

// Cancel abandons the receive with cause unless it already completed. It
// returns once the transport no longer touches Buf.
func (r *Recv) Cancel(cause error) {
	mb := r.mb
	mb.mu.Lock()
	switch r.state {
	case statePosted:
		mb.unpost(r)
		hook := mb.complete(r, r.Peer, &PeerError{Op: "recv", Peer: r.Peer, Err: cause})
		mb.mu.Unlock()
		runHook(hook, r)
		return
	case stateDone:
		mb.mu.Unlock()
		return
	}
	src := r.src // claimed: the sender is known
	onStuck := mb.onStuck
	mb.mu.Unlock()
	// Claimed: bytes are being read into Buf right now.
	t := time.NewTimer(stuckGrace)
	defer t.Stop()
	select {
	case <-r.done:
		return
	case <-t.C:
	}
	if onStuck != nil {
		onStuck(src)
	}
	<-r.done
}

func runHook(h func(*Recv), r *Recv) {
	if h != nil {
		h(r)
	}
}

// complete marks r done. Called with mb.mu held; the returned hook must be
// run after unlocking.
func (mb *Mailbox) complete(r *Recv, src int, err error) func(*Recv) {
	r.state = stateDone
	r.src = src
	r.err = err
	close(r.done)
	h := r.hook
	r.hook = nil
	return h
}

// unpost removes a posted r from its queue. Called with mb.mu held.
func (mb *Mailbox) unpost(r *Recv) {
	if r.Peer == AnySource {
		mb.anyPosted[r.Tag] = remove(mb.anyPosted[r.Tag], r)
		if len(mb.anyPosted[r.Tag]) == 0 {
			delete(mb.anyPosted, r.Tag)
		}
		return
	}
	k := key{r.Peer, r.Tag}
	mb.posted[k] = remove(mb.posted[k], r)
	if len(mb.posted[k]) == 0 {
		delete(mb.posted, k)
	}
}

func remove(q []*Recv, r *Recv) []*Recv {
	for i, x := range q {
		if x == r {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

// Post posts a receive (see Transport.PostRecv).
func (mb *Mailbox) Post(peer int, tag Tag, buf []byte) *Recv {
	return mb.post(peer, tag, buf, nil)
}

func (mb *Mailbox) post(peer int, tag Tag, buf []byte, f *Fold) *Recv {
	r := &Recv{Peer: peer, Tag: tag, Buf: buf, mb: mb, done: make(chan struct{}), fold: f}
	mb.mu.Lock()
	if f != nil {
		if err := f.check(len(buf)); err != nil {
			hook := mb.complete(r, peer, &PeerError{Op: "recv", Peer: peer, Err: err})
			mb.mu.Unlock()
			runHook(hook, r)
			return r
		}
	}
	if peer != AnySource && (peer < 0 || peer >= mb.size) {
		hook := mb.complete(r, peer, &PeerError{Op: "recv", Peer: peer,
			Err: fmt.Errorf("rank %d is out of range for a group of %d", peer, mb.size)})
		mb.mu.Unlock()
		runHook(hook, r)
		return r
	}
	if mb.anyCollErr && tag.Collective() {
		if tr := mb.trackingOf(tag, false); tr != nil && tr.collErr != nil {
			hook := mb.complete(r, peer, &PeerError{Op: "recv", Peer: tr.rankOf(peer), Err: tr.collErr})
			mb.mu.Unlock()
			runHook(hook, r)
			return r
		}
	}
	if src, m, ok := mb.takeUnexpected(peer, tag); ok {
		err := m.deliver(src, buf, f)
		hook := mb.complete(r, src, err)
		mb.mu.Unlock()
		runHook(hook, r)
		return r
	}
	if at, err := mb.leftErr(peer, tag); err != nil {
		hook := mb.complete(r, peer, &PeerError{Op: "recv", Peer: at, Err: err})
		mb.mu.Unlock()
		runHook(hook, r)
		return r
	}
	if err := mb.postErr(peer); err != nil {
		hook := mb.complete(r, peer, &PeerError{Op: "recv", Peer: peer, Err: err})
		mb.mu.Unlock()
		runHook(hook, r)
		return r
	}
	mb.postSeq++
	r.seq = mb.postSeq
	if mb.adopt(r) {
		mb.mu.Unlock()
		return r
	}
	if peer == AnySource {
		mb.anyPosted[tag] = append(mb.anyPosted[tag], r)
	} else {
		k := key{peer, tag}
		mb.posted[k] = append(mb.posted[k], r)
	}
	mb.mu.Unlock()
	return r
}

// postErr is the error a new receive from peer fails with, if any. Called
// with mb.mu held.
func (mb *Mailbox) postErr(peer int) error {
	if mb.err != nil {
		return mb.err
	}
	if peer != AnySource {
		return mb.peerErr[peer]
	}
	for _, e := range mb.peerErr {
		if e == nil {
			return nil
		}
	}
	if mb.size > 0 {
		return mb.peerErr[0]
	}
	return nil
}

// takeUnexpected pops the oldest stored message matching (peer, tag).
// Called with mb.mu held.
func (mb *Mailbox) takeUnexpected(peer int, tag Tag) (int, message, bool) {
	if peer != AnySource {
		k := key{peer, tag}
		q := mb.unexpected[k]
		if len(q) == 0 {
			return 0, message{}, false
		}
		m := q[0]
		q[0] = message{}
		if len(q) == 1 {
			delete(mb.unexpected, k)
		} else {
			mb.unexpected[k] = q[1:]
		}
		return peer, m, true
	}
	best := -1
	var bestArrival uint64
	for s := 0; s < mb.size; s++ {
		if q := mb.unexpected[key{s, tag}]; len(q) > 0 && (best < 0 || q[0].arrival < bestArrival) {
			best, bestArrival = s, q[0].arrival
		}
	}
	if best < 0 {
		return 0, message{}, false
	}
	return mb.takeUnexpected(best, tag)
}

// matchPosted pops the earliest posted receive that matches a message from
// src under tag. Called with mb.mu held.
func (mb *Mailbox) matchPosted(src int, tag Tag) *Recv {
	k := key{src, tag}
	q, aq := mb.posted[k], mb.anyPosted[tag]
	var r *Recv
	switch {
	case len(q) > 0 && (len(aq) == 0 || q[0].seq < aq[0].seq):
		r = q[0]
	case len(aq) > 0:
		r = aq[0]
	default:
		return nil
	}
	mb.unpost(r)
	return r
}

// FailPeer fails the posted receives from src, and every later receive from
// src that finds no stored message, with err. Messages that already arrived
// stay receivable. The first error recorded for a peer wins.
func (mb *Mailbox) FailPeer(src int, err error) {
	if src < 0 || src >= mb.size {
		return
	}
	mb.mu.Lock()
	if mb.peerErr[src] == nil {
		mb.peerErr[src] = err
	}
	err = mb.peerErr[src]
	var failed []*Recv
	for k, q := range mb.posted {
		if k.src == src {
			failed = append(failed, q...)
			delete(mb.posted, k)
		}
	}
	hooks := make([]func(*Recv), len(failed))
	for i, r := range failed {
		hooks[i] = mb.complete(r, src, &PeerError{Op: "recv", Peer: src, Err: err})
	}
	mb.mu.Unlock()
	for i, r := range failed {
		runHook(hooks[i], r)
	}
}

// Fail fails every posted and later receive with err (the first error
// recorded wins). Receives being read into complete when their reader ends.
func (mb *Mailbox) Fail(err error) {
	mb.mu.Lock()
	if mb.err == nil {
		mb.err = err
	}
	err = mb.err
	var failed []*Recv
	for k, q := range mb.posted {
		failed = append(failed, q...)
		delete(mb.posted, k)
	}
	for t, q := range mb.anyPosted {
		failed = append(failed, q...)
		delete(mb.anyPosted, t)
	}
	hooks := make([]func(*Recv), len(failed))
	for i, r := range failed {
		hooks[i] = mb.complete(r, r.Peer, &PeerError{Op: "recv", Peer: r.Peer, Err: err})
	}
	mb.mu.Unlock()
	for i, r := range failed {
		runHook(hooks[i], r)
	}
}

// Err returns the error the whole mailbox failed with, if any.
func (mb *Mailbox) Err() error {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.err
}

// PeerErr returns the error recorded for src, if any.
func (mb *Mailbox) PeerErr(src int) error {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if src < 0 || src >= mb.size {
		return nil
	}
	if mb.err != nil {
		return mb.err
	}
	return mb.peerErr[src]
}
