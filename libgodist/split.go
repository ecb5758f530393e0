package libgodist

import (
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

// splitTag carries Split's agreements. One tag serves every split: the
// ranks of a group split in one order, so each pair's messages match in
// the order sent (and a rank in no child of a split sends none).
var splitTag = transport.ControlTag(4)

// splitMsgSize is a rank's message in a split's agreement: its proposed
// id and the hash of the child's ranks.
const splitMsgSize = 16

// Split forms the child group of ranks (this group's ranks in the child's
// rank order, this rank among them) on this group's connections, with no
// rendezvous: its ranks agree on the child's tag space in one exchange of
// 16 bytes. Every rank of this group must call Split in the same order
// (c10d's split_group is collective), each with the ranks of its own
// child. The child runs the engine's algorithms over the connections (and
// the shared-memory rings) of this group; it closes on its own, and the
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
	fam := pg.family()
	ctx, cancel := context.WithTimeout(pg.ctx, timeout)
	defer cancel()
	id, err := pg.agreeChildID(ctx, ranks, fam.reserve())
	if err != nil {
		return nil, fmt.Errorf("godist: group %q: split_group into %q: %w", pg.cfg.Group, name, err)
	}
	fam.settle(id)
	rootRanks := make([]int, len(ranks))
	for i, r := range ranks {
		rootRanks[i] = r
		if pg.sub != nil {
			rootRanks[i] = pg.sub.ranks[r]
		}
	}
	child := newPG(cfg)
	child.fam, child.sub = fam, newSubTransport(fam.root, uint16(id), me, rootRanks)
	pg.mu.Lock()
	child.spare, child.allSpare = pg.spare, pg.allSpare
	child.via = make([]string, len(ranks))
	for i, r := range ranks {
		if r < len(pg.via) {
			child.via[i] = pg.via[r]
		}
	}
	at := make(map[int]int, len(ranks))
	for i, r := range ranks {
		at[r] = i
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
	sp, _ := pg.offload.(backend.Splitter)
	pg.mu.Unlock()
	if sp != nil {
		round := uint64(0)
		off, err := sp.Split(ctx, backend.ChildSetup{Name: name, ID: uint16(id), Rank: me, Ranks: ranks, Table: &child.tune,
			Agree: func(ctx context.Context, ok bool) (bool, error) {
				round++
				return child.agree(ctx, child.sub, round-1, ok)
			}})
		if err != nil {
			child.sub.Abort(err)
			fam.release(nil)
			return nil, fmt.Errorf("godist: group %q: split_group into %q: %w", pg.cfg.Group, name, err)
		}
		child.offload = off
	}
	child.start(child.sub)
	return child, nil
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
	}
	return pg.fam
}

// agreeChildID exchanges this rank's proposal with every other rank of
// the child and returns the highest: no rank of the child has used it.
// Ranks that were given other lists fail here.
func (pg *ProcessGroup) agreeChildID(ctx context.Context, ranks []int, proposal uint64) (uint64, error) {
	h := fnv.New64a()
	var b [8]byte
	for _, r := range ranks {
		binary.LittleEndian.PutUint64(b[:], uint64(r))
		h.Write(b[:])
	}
	sum := h.Sum64()
	tag := splitTag
	var msg [splitMsgSize]byte
	binary.LittleEndian.PutUint64(msg[:8], proposal)
	binary.LittleEndian.PutUint64(msg[8:], sum)
	got := make([][splitMsgSize]byte, len(ranks))
	rs := make([]*transport.Recv, len(ranks))
	for i, r := range ranks {
		if r != pg.cfg.Rank {
			rs[i] = pg.tr.PostRecv(r, tag, got[i][:])
		}
	}
	var sendErr error
	for _, r := range ranks {
		if r != pg.cfg.Rank && sendErr == nil {
			sendErr = pg.tr.Send(ctx, r, tag, msg[:])
		}
	}
	id := proposal
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
		if s := binary.LittleEndian.Uint64(got[i][8:]); s != sum && err == nil {
			err = invalidf("rank %d split with other ranks than %v (every rank of a child must list the same ranks, "+
				"in the same order)", ranks[i], ranks)
		}
		id = max(id, binary.LittleEndian.Uint64(got[i][:8]))
	}
	if err == nil && sendErr != nil {
		err = sendErr
	}
	if err == nil && id > transport.MaxGroupID {
		err = invalidf("this process has split %d groups from one group's connections, the most it can", transport.MaxGroupID)
	}
	return id, err
}
