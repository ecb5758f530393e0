package transport

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned for operations on a closed transport.
	ErrClosed = errors.New("transport: closed")
	// ErrPeerGone is wrapped by errors caused by a peer that shut its side
	// of the group down (destroy_process_group) while we still expected data.
	ErrPeerGone = errors.New("peer has shut the group down")
	// ErrConnLost is wrapped by errors caused by a connection that closed
	// without a goodbye: the peer process died or the network failed.
	ErrConnLost = errors.New("connection lost (peer process died or network failed)")
	// ErrSizeMismatch is wrapped when a message's length differs from the
	// posted receive's buffer.
	ErrSizeMismatch = errors.New("message size mismatch")
	// ErrTimeout is wrapped when a deadline passes.
	ErrTimeout = errors.New("timed out")
	// ErrAbandoned is wrapped by errors of collectives that a peer gave up
	// on (it timed out or failed) before this rank completed them: every
	// rank fails such a collective, none returns its result.
	ErrAbandoned = errors.New("a peer gave up on this collective")
)

// PeerError records a failure of one operation with one peer.
type PeerError struct {
	Op   string // "send", "recv", "connect", "read"
	Peer int    // the remote rank, or AnySource
	Err  error
}

func (e *PeerError) Error() string {
	if e.Peer == AnySource {
		return fmt.Sprintf("%s from any rank: %v", e.Op, e.Err)
	}
	dir := "with"
	switch e.Op {
	case "send":
		dir = "to"
	case "recv", "read":
		dir = "from"
	}
	return fmt.Sprintf("%s %s rank %d: %v", e.Op, dir, e.Peer, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// Timeout reports whether the error is a deadline expiry.
func (e *PeerError) Timeout() bool { return errors.Is(e.Err, ErrTimeout) }
