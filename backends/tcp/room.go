package tcp

import (
	"net"
	"time"
)

// waitRoom is the wait of a send whose socket out is full (a roomWaiter):
// one poll(2) for room on out and for bytes on the sockets whose reader
// goroutines rest with no waiter reading them (see linger). Bulk traffic in
// the other direction may be what keeps out full: in an exchange of large
// messages both ranks may be sending before either posts its receive, and
// each one's bytes then wait on a resting reader of the other. A socket
// that has bytes gets its reader kicked back onto it, where it stays while
// any send waits for room (peer.draining); a socket that stays empty keeps
// its reader off it, so a reply that arrives after the send is read by its
// receive, straight into place. Waking every resting reader at the first
// full write instead made most replies of a large ping-pong arrive before
// their receive (8 ranks on 2 cores), each read into a buffer and copied
// again.
//
// It returns nil once out has room (or hung up or failed),
// os.ErrDeadlineExceeded (pollUntil) when deadline passes first.
func (t *Transport) waitRoom(out *sock, deadline time.Time) error {
	t.roomWaits.Add(1)
	defer t.roomWaits.Add(-1)
	var pfdBuf [9]pollFd
	var whoBuf [9]*peer
	for {
		pfds := append(pfdBuf[:0], pollFd{fd: int32(out.fd), events: pollOut})
		who := append(whoBuf[:0], nil)
		for _, p := range t.peers {
			if p == nil || p.helpers.Load() != 0 || !p.resting.Load() || p.kicked.Load() {
				continue // a waiter or the reader goroutine is on it, or will be
			}
			if p.sk == out { // held by the caller
				pfds[0].events |= pollIn
				who[0] = p
				continue
			}
			if !p.sk.acquire() {
				continue
			}
			pfds = append(pfds, pollFd{fd: int32(p.sk.fd), events: pollIn})
			who = append(who, p)
		}
		err := pollUntil(pfds, deadline)
		for i := 1; i < len(pfds); i++ {
			who[i].sk.mu.RUnlock()
		}
		if err != nil {
			return err
		}
		for i, pf := range pfds {
			if who[i] != nil && pf.revents&^pollOut != 0 {
				who[i].draining.Store(true)
				who[i].kick()
			}
		}
		switch {
		case out.broken.Load():
			return net.ErrClosed
		case pfds[0].revents&^pollIn != 0:
			return nil // room, or an error the write reports
		}
	}
}
