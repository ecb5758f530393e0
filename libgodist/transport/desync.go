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

// SetOnDesync sets the function called (without locks, on the goroutine
// that delivers the message; it must not block) when a stamped message
// arrives whose collective differs from this rank's at the same sequence
// number. By then receives of collective tags fail with the error.
func (mb *Mailbox) SetOnDesync(f func(*DesyncError)) {
	mb.mu.Lock()
	mb.onDesync = f
	mb.mu.Unlock()
}

// Track records that this rank runs c from now on: stamped messages that
// arrive for c's sequence number are compared with it, and so are those
// that arrived before. It returns the first difference found among the
// latter; receives of collective tags then fail with it. (A message for
// the collective before c is still compared with that one.)
func (mb *Mailbox) Track(c *Call) *DesyncError {
	mb.mu.Lock()
	mb.prevCall, mb.call = mb.call, c
	var de *DesyncError
	if mb.nEarly > 0 {
		for src, q := range mb.early {
			k := 0
			for k < len(q) && q[k].Seq <= c.Seq {
				if q[k].Seq == c.Seq && de == nil && mb.collErr == nil {
					de = mb.compare(c, src, q[k])
				}
				k++
			}
			if k > 0 {
				mb.nEarly -= k
				n := copy(q, q[k:])
				mb.early[src] = q[:n]
			}
		}
	}
	if de == nil {
		mb.mu.Unlock()
		return nil
	}
	failed, hooks := mb.failColl(de)
	mb.mu.Unlock()
	for i, r := range failed {
		runHook(hooks[i], r)
	}
	return de
}

// compare returns the desync between c and a message stamped st from src,
// if they differ. Called with mb.mu held.
func (mb *Mailbox) compare(c *Call, src int, st Stamp) *DesyncError {
	if c.Blocks == nil && st == c.Stamp || st.Matches(c.From(src)) {
		return nil
	}
	return &DesyncError{Rank: c.Rank, Peer: src, Mine: c.To(src), Theirs: st}
}

// maxEarly bounds the stamps remembered per source for collectives this
// rank has not started (a root may run far ahead); the oldest are kept.
const maxEarly = 64

// arrival checks a message from src under tag stamped st. It reports
// whether the message must be dropped (collectives have failed, or it
// showed a desync, which it returns). Called with mb.mu held.
func (mb *Mailbox) arrival(src int, tag Tag, st Stamp) (bool, *DesyncError) {
	if mb.collErr != nil && tag.Collective() {
		return true, nil
	}
	if st.Op == OpNone || src < 0 || src >= mb.size {
		return false, nil
	}
	c := mb.call
	switch {
	case c == nil || st.Seq > c.Seq:
		q := mb.early[src]
		if n := len(q); (n == 0 || q[n-1] != st) && n < maxEarly {
			mb.early[src] = append(q, st)
			mb.nEarly++
		}
		return false, nil
	case st.Seq == c.Seq:
		if de := mb.compare(c, src, st); de != nil {
			return true, de
		}
	case mb.prevCall != nil && st.Seq == mb.prevCall.Seq:
		if de := mb.compare(mb.prevCall, src, st); de != nil {
			return true, de
		}
	}
	return false, nil
}

// FailCollectives fails every posted and later receive of a collective
// tag with err (the first error recorded wins); stamped messages that
// arrive afterwards are dropped. Control and point-to-point receives are
// unaffected, so the group can still tell its peers.
func (mb *Mailbox) FailCollectives(err error) {
	mb.mu.Lock()
	failed, hooks := mb.failColl(err)
	mb.mu.Unlock()
	for i, r := range failed {
		runHook(hooks[i], r)
	}
}

// failColl is FailCollectives with mb.mu held; the returned hooks must run
// after unlocking.
func (mb *Mailbox) failColl(err error) ([]*Recv, []func(*Recv)) {
	if mb.collErr == nil {
		mb.collErr = err
	}
	err = mb.collErr
	var failed []*Recv
	for k, q := range mb.posted {
		if k.tag.Collective() {
			failed = append(failed, q...)
			delete(mb.posted, k)
		}
	}
	for t, q := range mb.anyPosted {
		if t.Collective() {
			failed = append(failed, q...)
			delete(mb.anyPosted, t)
		}
	}
	hooks := make([]func(*Recv), len(failed))
	for i, r := range failed {
		hooks[i] = mb.complete(r, r.Peer, &PeerError{Op: "recv", Peer: r.Peer, Err: err})
	}
	return failed, hooks
}
