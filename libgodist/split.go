package libgodist

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
)

// A family is the groups that share one connected group's connections:
// that group (the root) and the groups split from it or from its children.
// Each child has its own id in the connections' tag space
// (transport.GroupTag), agreed by its ranks when it is split. The
// connections close when the root and every child have closed.
type family struct {
	root transport.Transport

	mu        sync.Mutex
	next      uint64 // the lowest id this rank may propose for a child
	refs      int    // groups of the family not yet closed
	closeRoot func() // the root's close, held back while children live
}

// reserve is this rank's proposal for a new child's id: above every id it
// has used, so that no two of its groups share one.
func (f *family) reserve() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.next
	f.next++
	return p
}

// settle records id, agreed by a child's ranks, as used, and counts the
// child in the family.
func (f *family) settle(id uint64) {
	f.mu.Lock()
	f.next = max(f.next, id+1)
	f.refs++
	f.mu.Unlock()
}

// release counts one group of the family out; closeRoot, given by the
// root's graceful close, closes the connections once no group uses them.
func (f *family) release(closeRoot func()) {
	f.mu.Lock()
	if closeRoot != nil {
		f.closeRoot = closeRoot
	}
	f.refs--
	var run func()
	if f.refs == 0 {
		run, f.closeRoot = f.closeRoot, nil
	}
	f.mu.Unlock()
	if run != nil {
		run()
	}
}

// groupLeftTag carries a rank's notice that it left a child group: the
// child's id (2 bytes, little endian), then why it aborted ("" for a
// close), NUL-padded to groupLeftSize.
var groupLeftTag = transport.ControlTag(5)

const groupLeftSize = 256

// listen takes the notices of peers that left a child (groupLeftTag) for
// as long as the connections live: the child's receives from that peer
// then fail, as a closed connection fails a store-formed group's.
func (f *family) listen() {
	gt, ok := f.root.(transport.GroupTracking)
	if !ok {
		return
	}
	buf := make([]byte, groupLeftSize)
	var post func()
	post = func() {
		f.root.PostRecv(transport.AnySource, groupLeftTag, buf).OnDone(func(r *transport.Recv) {
			if r.Err() != nil {
				return
			}
			id := binary.LittleEndian.Uint16(buf[:2])
			why := buf[2:]
			if i := bytes.IndexByte(why, 0); i >= 0 {
				why = why[:i]
			}
			err := transport.ErrPeerGone
			if len(why) > 0 {
				err = fmt.Errorf("%w: it aborted the group: %s", transport.ErrPeerGone, why)
			}
			gt.PeerLeftGroup(id, r.Source(), err)
			post()
		})
	}
	post()
}

// splitTag carries Split's exchanges. One tag serves every split: the
// ranks of a group split in one order, so each pair's messages match in
// the order sent (and a rank in no child of a split sends none).
var splitTag = transport.ControlTag(4)

// splitMsg is a rank's message in a split's exchange: the id it proposes
// and the hash of the child's ranks, in order.
type splitMsg struct {
	proposal, sum uint64
}

const splitMsgSize = 16

func (m splitMsg) put(b []byte) {
	binary.LittleEndian.PutUint64(b[:8], m.proposal)
	binary.LittleEndian.PutUint64(b[8:16], m.sum)
}

func readSplitMsg(b []byte) splitMsg {
	return splitMsg{proposal: binary.LittleEndian.Uint64(b[:8]), sum: binary.LittleEndian.Uint64(b[8:16])}
}

// Split forms the child group of ranks (this group's ranks in the child's
// rank order, this rank among them) on this group's connections, with no
// rendezvous: its ranks agree on the child's tag space in one exchange of
// a few bytes. Every rank of this group must call Split in the same order
// (c10d's split_group is collective), each with the ranks of its own
// child. Over shared memory the child gets an arena of its own, opened in
// the background (backend.Splitter); a group without an offload gives it
// the engine's algorithms over its connections; a group whose offload
// cannot serve it (several hosts' arenas, MPI's collectives) returns
// ErrNotSplittable, on every rank alike. A child closes on its own; the
// connections stay until every group that uses them has closed.
func (pg *ProcessGroup) Split(ranks []int, name string, timeout time.Duration) (*ProcessGroup, error) {
	if err := pg.usable(); err != nil {
		return nil, err
	}
	me, err := pg.childRank(ranks)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = pg.Timeout()
	}
	tune := pg.tune
	cfg := Config{Rank: me, Size: len(ranks), Group: name, Timeout: timeout, Tuning: &tune}
	if len(ranks) == 1 {
		return NewWithTransport(cfg, transport.NewMemNetwork(1).Transport(0))
	}
	pg.mu.Lock()
	off := pg.offload
	pg.mu.Unlock()
	sp, _ := off.(backend.Splitter)
	if off != nil && (sp == nil || !sp.Serves(ranks)) {
		return nil, fmt.Errorf("godist: group %q: split_group into %q: %w (offload %s)", pg.cfg.Group, name, ErrNotSplittable,
			off.Name())
	}
	fam := pg.family()
	ctx, cancel := context.WithTimeout(pg.ctx, timeout)
	defer cancel()
	mine := splitMsg{proposal: fam.reserve(), sum: ranksHash(ranks)}
	id, first, err := pg.exchangeSplit(ctx, ranks, mine)
	if err == nil && id > transport.MaxGroupID {
		err = invalidf("this process has split %d groups from one group's connections, the most it can", transport.MaxGroupID)
	}
	if err != nil {
		return nil, fmt.Errorf("godist: group %q: split_group into %q: %w", pg.cfg.Group, name, err)
	}
	fam.settle(id)
	child := pg.child(cfg, fam, uint16(id), ranks)
	if sp != nil {
		o := &opening{done: make(chan struct{})}
		child.opening.Store(o)
		go child.openOffload(o, sp, backend.ChildSetup{Name: name, Key: first.proposal, Rank: me, Ranks: ranks, Table: &tune},
			pg.cfg.Group)
	} else {
		child.announceChild(pg.cfg.Group, nil)
	}
	child.start(child.sub)
	return child, nil
}

// opening is a split child's offload being opened in the background; the
// child's collectives wait for it (awaitOpening).
type opening struct {
	done chan struct{}
	err  error // why it failed: the child is broken
}

// openOffload opens a split child's offload through sp: the child's rank
// 0 prepares it, every rank learns whether that worked (one agreement
// over the child's connections), then every rank opens it.
func (pg *ProcessGroup) openOffload(o *opening, sp backend.Splitter, cs backend.ChildSetup, parent string) {
	ctx, cancel := context.WithTimeout(pg.ctx, pg.Timeout())
	defer cancel()
	var prep backend.Prepared
	ok := true
	if cs.Rank == 0 {
		p, err := sp.PrepareChild(cs)
		prep, ok = p, err == nil
	}
	ok, err := pg.agree(ctx, pg.sub, 0, ok)
	var off backend.Offload
	if err == nil && ok {
		off, err = sp.OpenChild(ctx, cs, prep)
	} else if prep != nil {
		prep.Discard()
	}
	pg.mu.Lock()
	if pg.closed && off != nil {
		off.Abort(ErrClosed)
		off = nil
	}
	pg.offload = off
	pg.mu.Unlock()
	if err != nil {
		o.err = fmt.Errorf("opening its shared-memory arena: %w", err)
		pg.breakWith(o.err)
	} else {
		pg.announceChild(parent, off)
	}
	close(o.done)
	pg.opening.Store(nil)
}

// awaitOpening waits until a split child's offload is open (a no-op once
// it is, and for every other group).
func (pg *ProcessGroup) awaitOpening(ctx context.Context) error {
	o := pg.opening.Load()
	if o == nil {
		return nil
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for the group's shared-memory arena to open", transport.ErrTimeout)
	}
}

// child makes the child group of ranks, rank cfg.Rank among them, over
// the family's connections under id; not started.
func (pg *ProcessGroup) child(cfg Config, fam *family, id uint16, ranks []int) *ProcessGroup {
	rootRanks := make([]int, len(ranks))
	for i, r := range ranks {
		rootRanks[i] = r
		if pg.sub != nil {
			rootRanks[i] = pg.sub.ranks[r]
		}
	}
	child := newPG(cfg)
	child.fam, child.sub = fam, newSubTransport(fam.root, id, cfg.Rank, rootRanks)
	at := make(map[int]int, len(ranks))
	for i, r := range ranks {
		at[r] = i
	}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	child.spare, child.allSpare = pg.spare, pg.allSpare
	child.via = make([]string, len(ranks))
	for i, r := range ranks {
		if r < len(pg.via) {
			child.via[i] = pg.via[r]
		}
	}
	for _, host := range pg.hosts {
		var h []int
		for _, r := range host {
			if i, ok := at[r]; ok {
				h = append(h, i)
			}
		}
		if len(h) > 0 {
			child.hosts = append(child.hosts, h)
		}
	}
	return child
}

// childRank checks ranks and returns this rank's place among them.
func (pg *ProcessGroup) childRank(ranks []int) (int, error) {
	me := -1
	seen := make(map[int]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= pg.cfg.Size {
			return 0, invalidf("split_group: rank %d is out of range for group %q of %d ranks", r, pg.cfg.Group, pg.cfg.Size)
		}
		if seen[r] {
			return 0, invalidf("split_group: rank %d is listed twice in %v", r, ranks)
		}
		seen[r] = true
		if r == pg.cfg.Rank {
			me = i
		}
	}
	if me < 0 {
		return 0, invalidf("split_group: rank %d of group %q is not among the child's ranks %v", pg.cfg.Rank, pg.cfg.Group, ranks)
	}
	return me, nil
}

// family returns the family this group's connections belong to, made
// the first time a root group splits.
func (pg *ProcessGroup) family() *family {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.fam == nil {
		pg.fam = &family{root: pg.tr, next: 1, refs: 1}
		pg.fam.listen()
	}
	return pg.fam
}

// ranksHash is the hash of a child's ranks, in order.
func ranksHash(ranks []int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, r := range ranks {
		binary.LittleEndian.PutUint64(b[:], uint64(r))
		h.Write(b[:])
	}
	return h.Sum64()
}

// exchangeSplit sends this rank's message to every other rank of the
// child and returns the highest proposal (an id no rank of the child has
// used) and the message of the child's rank 0. Ranks that were given
// other lists fail here.
func (pg *ProcessGroup) exchangeSplit(ctx context.Context, ranks []int, mine splitMsg) (uint64, splitMsg, error) {
	var out [splitMsgSize]byte
	mine.put(out[:])
	got := make([][splitMsgSize]byte, len(ranks))
	rs := make([]*transport.Recv, len(ranks))
	for i, r := range ranks {
		if r != pg.cfg.Rank {
			rs[i] = pg.tr.PostRecv(r, splitTag, got[i][:])
		}
	}
	var sendErr error
	for _, r := range ranks {
		if r != pg.cfg.Rank && sendErr == nil {
			sendErr = pg.tr.Send(ctx, r, splitTag, out[:])
		}
	}
	id, first := mine.proposal, mine
	var err error
	for i, rv := range rs {
		if rv == nil {
			continue
		}
		if sendErr != nil {
			rv.Cancel(sendErr)
		}
		if werr := rv.Wait(ctx); werr != nil {
			if err == nil {
				err = fmt.Errorf("rank %d did not answer: %w", ranks[i], werr)
			}
			continue
		}
		m := readSplitMsg(got[i][:])
		if m.sum != mine.sum && err == nil {
			err = invalidf("rank %d split with other ranks than %v (every rank of a child must list the same ranks, "+
				"in the same order)", ranks[i], ranks)
		}
		if i == 0 {
			first = m
		}
		id = max(id, m.proposal)
	}
	if err == nil && sendErr != nil {
		err = sendErr
	}
	return id, first, err
}
