package transport

import (
	"context"
	"time"
)

// GroupHelper reads messages from every peer in peers (distinct ranks) into
// the mailbox on the calling goroutine until done reports true or until
// passes. It returns false at once if it cannot help with these peers; the
// waiter then waits for the receives one by one.
type GroupHelper func(peers []int, done func() bool, until time.Time) bool

// SetGroupHelper installs the transport's GroupHelper (see WaitAll).
func (mb *Mailbox) SetGroupHelper(h GroupHelper) {
	mb.mu.Lock()
	mb.groupHelper = h
	mb.mu.Unlock()
}

func (mb *Mailbox) getGroupHelper() GroupHelper {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.groupHelper
}

// WaitAll waits for every receive in rs (all posted on one mailbox) within
// ctx. When the transport has a GroupHelper the calling goroutine first
// reads all their peers at once (one thread asleep on every socket instead
// of one woken per peer); then, in order, the first receive that failed
// fails the call and cancels the rest.
func WaitAll(ctx context.Context, rs []*Recv) error {
	if len(rs) > 1 {
		helpAll(ctx, rs)
	}
	for i, r := range rs {
		if err := r.Wait(ctx); err != nil {
			for _, o := range rs[i+1:] {
				o.Cancel(err)
			}
			return err
		}
	}
	return nil
}

// helpAll runs the mailbox's GroupHelper for rs until they all complete,
// ctx ends, or the helper declines.
func helpAll(ctx context.Context, rs []*Recv) {
	h := rs[0].mb.getGroupHelper()
	if h == nil {
		return
	}
	dl, hasDl := ctx.Deadline()
	peers := make([]int, 0, len(rs))
	pending := func() []int {
		peers = peers[:0]
		for _, r := range rs {
			select {
			case <-r.done:
				continue
			default:
			}
			if r.Peer == AnySource {
				return nil
			}
			dup := false
			for _, p := range peers {
				dup = dup || p == r.Peer
			}
			if !dup {
				peers = append(peers, r.Peer)
			}
		}
		return peers
	}
	done := func() bool {
		for _, r := range rs {
			select {
			case <-r.done:
			default:
				return false
			}
		}
		return true
	}
	for {
		ps := pending()
		if len(ps) == 0 || ctx.Err() != nil {
			return
		}
		until := time.Now().Add(helpSlice)
		if hasDl && dl.Before(until) {
			until = dl
		}
		if !h(ps, done, until) {
			return
		}
	}
}
