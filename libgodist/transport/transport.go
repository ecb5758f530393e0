// Package transport declares the small interface that godist's collective
// algorithms are written against, and the receive-matching logic (Mailbox)
// that every concrete transport shares.
//
// A transport moves byte messages between the ranks of one process group.
// Messages carry a Tag; messages from one source with one tag are matched
// to posted receives in order (FIFO). Sends are eager: Send returns once the
// transport owns the bytes, whether or not a matching receive is posted, so
// a schedule of "post receive, send, wait" can never deadlock.
//
// Implementations: the in-memory transport in this package (tests), the TCP
// transport in backends/tcp, and the shared-memory transport in backends/shm.
package transport

import "context"

// AnySource may be passed to PostRecv to match a message from any peer.
const AnySource = -1

// Tag identifies a stream of messages. The top four bits name its kind.
type Tag uint64

const (
	kindColl    = 1
	kindP2P     = 2
	kindControl = 3
	kindOffload = 4
	kindGroup   = 5
)

// CollTag is the tag of step within collective number seq (seq < 2^44).
func CollTag(seq uint64, step uint16) Tag {
	return Tag(kindColl<<60 | (seq&(1<<44-1))<<16 | uint64(step))
}

// P2PTag is the tag of user point-to-point messages with the given c10d tag.
func P2PTag(tag int64) Tag { return Tag(kindP2P<<60 | uint64(uint32(tag))) }

// OffloadTag is the tag of step within call number seq of a group's
// offload (an offload that sends over the group's transport counts its own
// calls; seq < 2^44).
func OffloadTag(seq uint64, step uint16) Tag {
	return Tag(kindOffload<<60 | (seq&(1<<44-1))<<16 | uint64(step))
}

// MaxGroupID is the highest id GroupTag takes.
const MaxGroupID = 1<<16 - 1

// GroupTag is tag t of the child group id (1..MaxGroupID) that shares a
// transport with its parent: its own kind and 40 bits of t's payload (a
// collective's sequence number wraps at 2^24 there, a c10d tag keeps its
// 32 bits), so that no child message matches a receive of the parent or of
// another child, and none counts as one of the parent's collectives.
func GroupTag(id uint16, t Tag) Tag {
	return Tag(kindGroup<<60 | uint64(id)<<44 | uint64(t>>60)<<40 | uint64(t)&(1<<40-1))
}

// ControlTag is the tag of godist's own control messages (progress queries).
func ControlTag(id uint64) Tag { return Tag(kindControl<<60 | id&(1<<60-1)) }

// Transport connects the ranks of one group. All methods are safe for
// concurrent use.
type Transport interface {
	// Rank is this process's rank in the group; Size the number of ranks.
	Rank() int
	Size() int
	// Send delivers data to peer under tag. The transport does not keep data
	// after Send returns. It returns an error if the deadline of ctx passes,
	// the connection to peer fails or the transport is closed.
	Send(ctx context.Context, peer int, tag Tag, data []byte) error
	// PostRecv posts a receive of exactly len(buf) bytes from peer (or
	// AnySource) under tag and returns at once. The transport writes into buf
	// until the Recv completes; the caller must keep buf alive and untouched
	// until Recv.Wait returns.
	PostRecv(peer int, tag Tag, buf []byte) *Recv
	// PostFold is PostRecv for a receive that combines the message into
	// buf with f instead of overwriting it (see Fold).
	PostFold(peer int, tag Tag, buf []byte, f Fold) *Recv
	// Close shuts the transport down gracefully; it is idempotent. Pending
	// and later operations fail with ErrClosed.
	Close() error
	// Abort fails every pending and later operation with err and closes all
	// connections without the graceful goodbye.
	Abort(err error)
}
