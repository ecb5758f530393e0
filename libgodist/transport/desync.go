package transport

import (
	"fmt"
	"strings"
)

// DesyncError says that two ranks called different collectives at the
// same point of their group's sequence (or the same collective with other
// arguments).
type DesyncError struct {
	Rank   int   // the rank that found it
	Peer   int   // the rank whose call differs
	Mine   Stamp // Rank's call, as stamped for Peer
	Theirs Stamp // Peer's call, as stamped for Rank
}

// Error names both calls, the higher rank's first ("rank 1 called
// all_reduce(float32[4], SUM) where rank 0 called broadcast(float32[4],
// root=0)"), so that both ranks of a pair describe it alike.
func (e *DesyncError) Error() string {
	hi, hs, lo, ls := e.Peer, e.Theirs, e.Rank, e.Mine
	if e.Rank > e.Peer {
		hi, hs, lo, ls = lo, ls, hi, hs
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d called ", hi)
	hs.describe(&b, lo)
	fmt.Fprintf(&b, " where rank %d called ", lo)
	ls.describe(&b, hi)
	if hs.Detail != ls.Detail && hs.Detail != 0 && ls.Detail != 0 {
		a, c := hs, ls
		a.Detail, c.Detail = 0, 0
		if a == c {
			b.WriteString(", with tensors of other shapes")
		}
	}
	return b.String()
}

// Tracker is implemented by transports whose mailbox checks the stamps of
// arriving messages (Mailbox.Track, Mailbox.SetOnDesync).
type Tracker interface {
	// Track tells the transport which collective this rank runs from now
	// on, and returns a desync found among messages that arrived for it
	// before.
	Track(c *Call) *DesyncError
	// SetOnDesync sets the function called with a desync found in an
	// arriving message.
	SetOnDesync(f func(*DesyncError))
	// FailCollectives fails the receives of collective tags with err.
	FailCollectives(err error)
}

// GroupTracking is implemented by transports that also check the stamps of
// the collectives of child groups sharing their connections (GroupTag).
type GroupTracking interface {
	// GroupTracker is the Tracker of child group id, whose rank of the
	// transport's rank r is back[r] (-1 for ranks outside it).
	GroupTracker(id uint16, back []int) Tracker
	// ForgetGroup drops child id's state; its later messages are dropped.
	ForgetGroup(id uint16)
	// PeerLeftGroup records that the transport's rank src closed or
	// aborted child id: the child's receives from src fail with err.
	PeerLeftGroup(id uint16, src int, err error)
}

// tracking is the desync state of one group's collectives on a mailbox:
// the transport's own group (the root) or a child group sharing it.
type tracking struct {
	call, prevCall *Call     // the collective this rank runs (Track), and the one before
	early          [][]Stamp // by source (transport rank): stamps of messages for collectives not started here
	nEarly         int       // stamps in early
	collErr        error     // fails receives of the group's collective tags (FailCollectives)
	onDesync       func(*DesyncError)
	back           []int   // transport rank -> group rank; nil for the root
	gone           bool    // a child that closed: its messages are dropped
	left           []error // by source (transport rank): why that rank left this child (PeerLeftGroup)
}

func newTracking(size int) *tracking { return &tracking{early: make([][]Stamp, size)} }

// rankOf is the group's rank of the transport's rank r.
func (tr *tracking) rankOf(r int) int {
	if tr.back == nil || r < 0 || r >= len(tr.back) {
		return r
	}
	return tr.back[r]
}

// trackingOf is the tracking of tag's group, made for a child not known
// yet (its messages can arrive before it is formed here) when make is
// set; nil otherwise. Called with mb.mu held.
func (mb *Mailbox) trackingOf(tag Tag, make bool) *tracking {
	id := tag.group()
	if id == 0 {
		return &mb.root
	}
	tr := mb.groups[id]
	if tr == nil && make {
		tr = newTracking(mb.size)
		if mb.groups == nil {
			mb.groups = map[uint16]*tracking{}
		}
		mb.groups[id] = tr
	}
	return tr
}

// SetOnDesync sets the function called (without locks, on the goroutine
// that delivers the message; it must not block) when a stamped message
// arrives whose collective differs from this rank's at the same sequence
// number. By then receives of collective tags fail with the error.
func (mb *Mailbox) SetOnDesync(f func(*DesyncError)) { mb.groupTracker(0).SetOnDesync(f) }

// Track records that this rank runs c from now on: stamped messages that
// arrive for c's sequence number are compared with it, and so are those
// that arrived before. It returns the first difference found among the
// latter; receives of collective tags then fail with it. (A message for
// the collective before c is still compared with that one.)
func (mb *Mailbox) Track(c *Call) *DesyncError { return mb.groupTracker(0).Track(c) }

// FailCollectives fails every posted and later receive of a collective
// tag with err (the first error recorded wins); stamped messages that
// arrive afterwards are dropped. Control and point-to-point receives are
// unaffected, so the group can still tell its peers.
func (mb *Mailbox) FailCollectives(err error) { mb.groupTracker(0).FailCollectives(err) }

// GroupTracker is the Tracker of child group id (GroupTag), whose rank of
// this mailbox's rank r is back[r] (-1 outside it).
func (mb *Mailbox) GroupTracker(id uint16, back []int) Tracker {
	mb.mu.Lock()
	tr := mb.trackingOf(GroupTag(id, 0), true)
	tr.back = back
	mb.mu.Unlock()
	return groupTracker{mb: mb, id: id}
}

// ForgetGroup drops child id's state and, from now on, its messages.
func (mb *Mailbox) ForgetGroup(id uint16) {
	mb.mu.Lock()
	tr := mb.trackingOf(GroupTag(id, 0), true)
	*tr = tracking{gone: true, back: tr.back}
	mb.anyGone = true
	mb.mu.Unlock()
}

// PeerLeftGroup records that the transport's rank src closed or aborted
// child group id: the child's posted receives from src fail with err, and
// so do later ones that find no message from src stored (messages that
// arrived before stay receivable, its farewell among them). The first
// error recorded for src wins.
func (mb *Mailbox) PeerLeftGroup(id uint16, src int, err error) {
	if id == 0 || src < 0 || src >= mb.size {
		return
	}
	mb.mu.Lock()
	tr := mb.trackingOf(GroupTag(id, 0), true)
	if tr.gone {
		mb.mu.Unlock()
		return
	}
	if tr.left == nil {
		tr.left = make([]error, mb.size)
	}
	if tr.left[src] == nil {
		tr.left[src] = err
	}
	err = tr.left[src]
	mb.anyLeft = true
	var failed []*Recv
	for k, q := range mb.posted {
		if k.src == src && k.tag.group() == id {
			failed = append(failed, q...)
			delete(mb.posted, k)
		}
	}
	hooks := make([]func(*Recv), len(failed))
	for i, r := range failed {
		hooks[i] = mb.complete(r, src, &PeerError{Op: "recv", Peer: tr.rankOf(src), Err: err})
	}
	mb.mu.Unlock()
	for i, r := range failed {
		runHook(hooks[i], r)
	}
}

// leftErr is why peer left tag's child group, if it did. Called with
// mb.mu held.
func (mb *Mailbox) leftErr(peer int, tag Tag) (int, error) {
	if !mb.anyLeft || peer == AnySource || tag.group() == 0 {
		return 0, nil
	}
	tr := mb.trackingOf(tag, false)
	if tr == nil || tr.left == nil || tr.left[peer] == nil {
		return 0, nil
	}
	return tr.rankOf(peer), tr.left[peer]
}

func (mb *Mailbox) groupTracker(id uint16) groupTracker { return groupTracker{mb: mb, id: id} }

// groupTracker is the Tracker of one group's collectives on a mailbox.
type groupTracker struct {
	mb *Mailbox
	id uint16
}

func (g groupTracker) tracking() *tracking { return g.mb.trackingOf(GroupTag(g.id, 0), true) }

func (g groupTracker) SetOnDesync(f func(*DesyncError)) {
	g.mb.mu.Lock()
	if g.id == 0 {
		g.mb.root.onDesync = f
	} else {
		g.tracking().onDesync = f
	}
	g.mb.mu.Unlock()
}

func (g groupTracker) Track(c *Call) *DesyncError {
	mb := g.mb
	mb.mu.Lock()
	tr := &mb.root
	if g.id != 0 {
		tr = g.tracking()
	}
	tr.prevCall, tr.call = tr.call, c
	var de *DesyncError
	if tr.nEarly > 0 {
		for src, q := range tr.early {
			k := 0
			for k < len(q) && q[k].Seq <= c.Seq {
				if q[k].Seq == c.Seq && de == nil && tr.collErr == nil {
					de = tr.compare(c, src, q[k])
				}
				k++
			}
			if k > 0 {
				tr.nEarly -= k
				n := copy(q, q[k:])
				tr.early[src] = q[:n]
			}
		}
	}
	if de == nil {
		mb.mu.Unlock()
		return nil
	}
	failed, hooks := mb.failColl(tr, g.id, de)
	mb.mu.Unlock()
	for i, r := range failed {
		runHook(hooks[i], r)
	}
	return de
}

func (g groupTracker) FailCollectives(err error) {
	mb := g.mb
	mb.mu.Lock()
	tr := &mb.root
	if g.id != 0 {
		tr = g.tracking()
	}
	failed, hooks := mb.failColl(tr, g.id, err)
	mb.mu.Unlock()
	for i, r := range failed {
		runHook(hooks[i], r)
	}
}

// compare returns the desync between c and a message stamped st from the
// transport's rank src, if they differ. Called with mb.mu held.
func (tr *tracking) compare(c *Call, src int, st Stamp) *DesyncError {
	peer := tr.rankOf(src)
	if c.Blocks == nil && st == c.Stamp || st.Matches(c.From(peer)) {
		return nil
	}
	return &DesyncError{Rank: c.Rank, Peer: peer, Mine: c.To(peer), Theirs: st}
}

// maxEarly bounds the stamps remembered per source for collectives this
// rank has not started (a root may run far ahead); the oldest are kept.
const maxEarly = 64

// arrival checks a message from src under tag stamped st. It reports
// whether the message must be dropped (collectives have failed, it showed
// a desync, which it returns with its group's tracking, or its group has
// closed here). Called with mb.mu held.
func (mb *Mailbox) arrival(src int, tag Tag, st Stamp) (bool, *DesyncError, *tracking) {
	tr := mb.trackingOf(tag, st.Op != OpNone)
	if tr == nil {
		return false, nil, nil
	}
	if tr.gone || tr.collErr != nil && tag.Collective() {
		return true, nil, tr
	}
	if st.Op == OpNone || src < 0 || src >= mb.size {
		return false, nil, tr
	}
	c := tr.call
	switch {
	case c == nil || st.Seq > c.Seq:
		q := tr.early[src]
		if n := len(q); (n == 0 || q[n-1] != st) && n < maxEarly {
			tr.early[src] = append(q, st)
			tr.nEarly++
		}
		return false, nil, tr
	case st.Seq == c.Seq:
		if de := tr.compare(c, src, st); de != nil {
			return true, de, tr
		}
	case tr.prevCall != nil && st.Seq == tr.prevCall.Seq:
		if de := tr.compare(tr.prevCall, src, st); de != nil {
			return true, de, tr
		}
	}
	return false, nil, tr
}

// failColl fails the receives of group id's collective tags with err (its
// tracking tr keeps the first error); the returned hooks must run after
// unlocking. Called with mb.mu held.
func (mb *Mailbox) failColl(tr *tracking, id uint16, err error) ([]*Recv, []func(*Recv)) {
	if tr.collErr == nil {
		tr.collErr = err
		mb.anyCollErr = true
	}
	err = tr.collErr
	var failed []*Recv
	for k, q := range mb.posted {
		if k.tag.Collective() && k.tag.group() == id {
			failed = append(failed, q...)
			delete(mb.posted, k)
		}
	}
	for t, q := range mb.anyPosted {
		if t.Collective() && t.group() == id {
			failed = append(failed, q...)
			delete(mb.anyPosted, t)
		}
	}
	hooks := make([]func(*Recv), len(failed))
	for i, r := range failed {
		hooks[i] = mb.complete(r, r.Peer, &PeerError{Op: "recv", Peer: tr.rankOf(r.Peer), Err: err})
	}
	return failed, hooks
}
