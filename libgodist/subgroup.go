package libgodist

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/godist/godist/libgodist/transport"
)

// subTransport is the transport of a child group made by Split: the
// parent's connections (its root transport, shared by the whole family of
// groups split from one connected group), its own rank numbering and its
// own tag space (transport.GroupTag). Closing or aborting it ends only the
// child's receives; the connections stay with the family (family.release).
type subTransport struct {
	root  transport.Transport
	id    uint16
	rank  int
	ranks []int // child rank -> root rank
	back  []int // root rank -> child rank, -1 for ranks outside the child

	// tracker checks the child's collectives' stamps on the root's
	// mailbox; nil when the root has no desync checks.
	tracker transport.Tracker

	mu      sync.Mutex
	recvs   []*transport.Recv // posted and maybe not done; pruned as it grows
	pruneAt int
	err     error // set by Close/Abort: later operations fail with it
	// blocks is the last all_to_all call whose blocks were put in the
	// root's numbering for its stamps, and that call (stampable).
	blocksOf, blocks *transport.Call
}

var (
	_ transport.Transport = (*subTransport)(nil)
	_ transport.Tracker   = (*subTransport)(nil)
)

func newSubTransport(root transport.Transport, id uint16, rank int, ranks []int) *subTransport {
	back := make([]int, root.Size())
	for i := range back {
		back[i] = -1
	}
	for c, r := range ranks {
		back[r] = c
	}
	s := &subTransport{root: root, id: id, rank: rank, ranks: ranks, back: back, pruneAt: 64}
	if g, ok := root.(transport.GroupTracking); ok {
		s.tracker = g.GroupTracker(id, back)
	}
	return s
}

// Track, SetOnDesync and FailCollectives check the child's collectives
// on the root's mailbox (transport.Tracker).
func (s *subTransport) Track(c *transport.Call) *transport.DesyncError {
	if s.tracker == nil {
		return nil
	}
	return s.tracker.Track(c)
}

func (s *subTransport) SetOnDesync(f func(*transport.DesyncError)) {
	if s.tracker != nil {
		s.tracker.SetOnDesync(f)
	}
}

func (s *subTransport) FailCollectives(err error) {
	if s.tracker != nil {
		s.tracker.FailCollectives(err)
	}
}

// stampable returns ctx with its all_to_all call's blocks in the root's
// numbering: the root's transport stamps a message to its rank r with the
// blocks at r.
func (s *subTransport) stampable(ctx context.Context) context.Context {
	c := transport.CallOf(ctx)
	if c == nil || c.Blocks == nil {
		return ctx
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blocksOf != c {
		n := s.root.Size()
		b := &transport.Blocks{Ins: make([][]byte, n), Outs: make([][]byte, n), Elem: c.Blocks.Elem}
		for i, r := range s.ranks {
			if i < len(c.Blocks.Ins) {
				b.Ins[r] = c.Blocks.Ins[i]
			}
			if i < len(c.Blocks.Outs) {
				b.Outs[r] = c.Blocks.Outs[i]
			}
		}
		rc := *c
		rc.Blocks = b
		s.blocksOf, s.blocks = c, &rc
	}
	return transport.WithCall(ctx, s.blocks)
}

func (s *subTransport) Rank() int { return s.rank }
func (s *subTransport) Size() int { return len(s.ranks) }

func (s *subTransport) peer(p int) (int, error) {
	if p == transport.AnySource {
		return p, nil
	}
	if p < 0 || p >= len(s.ranks) {
		return 0, &transport.PeerError{Op: "send", Peer: p, Err: fmt.Errorf("%w: rank %d is out of range for a group of %d",
			ErrInvalid, p, len(s.ranks))}
	}
	return s.ranks[p], nil
}

func (s *subTransport) closedErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *subTransport) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if err := s.closedErr(); err != nil {
		return err
	}
	r, err := s.peer(peer)
	if err != nil {
		return err
	}
	return s.root.Send(s.stampable(ctx), r, transport.GroupTag(s.id, tag), data)
}

func (s *subTransport) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	return s.post(peer, tag, buf, nil)
}

func (s *subTransport) PostFold(peer int, tag transport.Tag, buf []byte, f transport.Fold) *transport.Recv {
	return s.post(peer, tag, buf, &f)
}

func (s *subTransport) post(peer int, tag transport.Tag, buf []byte, f *transport.Fold) *transport.Recv {
	r, err := s.peer(peer)
	if err != nil {
		r = s.root.Rank() // a receive that fails at once, below
	}
	var rv *transport.Recv
	if f != nil {
		rv = s.root.PostFold(r, transport.GroupTag(s.id, tag), buf, *f)
	} else {
		rv = s.root.PostRecv(r, transport.GroupTag(s.id, tag), buf)
	}
	rv.MapSource(s.back)
	s.mu.Lock()
	cerr := s.err
	if cerr == nil && err == nil {
		s.track(rv)
	}
	s.mu.Unlock()
	if err == nil {
		err = cerr
	}
	if err != nil {
		rv.Cancel(err)
	}
	return rv
}

// track remembers rv until it is done, so that Close and Abort can end it.
// Called with s.mu held.
func (s *subTransport) track(rv *transport.Recv) {
	s.recvs = append(s.recvs, rv)
	if len(s.recvs) < s.pruneAt {
		return
	}
	live := s.recvs[:0]
	for _, r := range s.recvs {
		select {
		case <-r.Done():
		default:
			live = append(live, r)
		}
	}
	clear(s.recvs[len(live):])
	s.recvs = live
	s.pruneAt = 2*len(live) + 64
}

// end fails the child's pending and later operations with err, and tells
// its peers (why: "" for a close, else why it aborted). Idempotent.
func (s *subTransport) end(err error, why string) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	recvs := s.recvs
	s.recvs = nil
	s.blocksOf, s.blocks = nil, nil
	s.mu.Unlock()
	for _, r := range recvs {
		r.Cancel(err)
	}
	if g, ok := s.root.(transport.GroupTracking); ok {
		g.ForgetGroup(s.id) // its peers' late messages are dropped
	}
	s.tellLeft(why)
}

// tellLeft tells the child's other ranks that this rank left it, why
// being "" for a close, so that their receives from it fail as a closed
// connection would fail them (family.listen). It waits at most
// farewellWait for slow peers.
func (s *subTransport) tellLeft(why string) {
	var b [groupLeftSize]byte
	binary.LittleEndian.PutUint16(b[:2], s.id)
	copy(b[2:len(b)-1], why)
	ctx, cancel := context.WithTimeout(context.Background(), farewellWait)
	defer cancel()
	me := s.ranks[s.rank]
	for _, r := range s.ranks {
		if r != me {
			_ = s.root.Send(ctx, r, groupLeftTag, b[:])
		}
	}
}

// Close ends the child's receives; the shared connections stay.
func (s *subTransport) Close() error {
	s.end(fmt.Errorf("%w: the group was closed", transport.ErrClosed), "")
	return nil
}

// Abort ends the child's receives with err; the shared connections stay.
func (s *subTransport) Abort(err error) {
	if err == nil {
		err = transport.ErrClosed
	}
	why := err.Error()
	if why == "" {
		why = "aborted"
	}
	s.end(err, why)
}

// PathTo names how the parent reaches the child's peer.
func (s *subTransport) PathTo(peer int) string {
	if peer < 0 || peer >= len(s.ranks) {
		return ""
	}
	if p, ok := s.root.(interface{ PathTo(int) string }); ok {
		return p.PathTo(s.ranks[peer])
	}
	return "tcp"
}
