package libgodist

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

var (
	// ErrInvalid is wrapped by errors for bad arguments, detected before an
	// operation is queued.
	ErrInvalid = errors.New("invalid argument")
	// ErrBroken is wrapped by errors of operations issued after the group
	// failed (a timeout or a lost peer leaves the transport in an unknown
	// state, so the group refuses further work).
	ErrBroken = errors.New("process group is broken by an earlier error")
	// ErrClosed is wrapped by errors of operations on a closed group.
	ErrClosed = errors.New("process group is closed")
	// ErrNotSplittable is returned by Split for a group whose offload
	// cannot serve a child on its connections (several hosts' arenas, MPI's
	// collectives): the child is better formed anew.
	ErrNotSplittable = errors.New("the group's collectives cannot serve a child on its connections")
)

// invalidError is a bad-argument error; it matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return "godist: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// OpError describes the failure of one operation of a process group.
type OpError struct {
	Op      string        // "allreduce", "broadcast", ...
	Seq     uint64        // the op's sequence number in its group
	Group   string        // the group's name
	Peer    int           // the rank at fault, or -1 if unknown
	Missing []int         // ranks that had not started the op (on timeout)
	Silent  []int         // of those, the ranks that did not answer at all (unreachable or stopped)
	After   time.Duration // the timeout, when the op timed out
	Err     error
	// PeerLeft is why Peer left the group, when it shut its group down
	// after an error of its own (from its farewell).
	PeerLeft string
	// Detail is this rank's description of its tensors (Opts.Detail), shown
	// when ranks called different collectives.
	Detail string
}

func (e *OpError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "godist: %s (seq %d) in group %q", e.Op, e.Seq, e.Group)
	var me *monitoredError
	var de *desyncError
	switch {
	case errors.As(e.Err, &de):
		fmt.Fprintf(&b, " failed: %v", de)
		if e.Detail != "" {
			fmt.Fprintf(&b, " (this rank's tensors: %s)", e.Detail)
		}
		return b.String()
	case errors.As(e.Err, &me):
		fmt.Fprintf(&b, " failed")
	case e.Timeout() && len(e.Missing) > 0:
		fmt.Fprintf(&b, " timed out after %v: rank(s) %v did not join this %s", e.After, e.Missing, e.Op)
		if len(e.Silent) > 0 {
			fmt.Fprintf(&b, " (rank(s) %v did not answer: unreachable, stopped or stuck)", e.Silent)
		}
	case e.Timeout() && e.Peer >= 0:
		fmt.Fprintf(&b, " timed out after %v waiting for rank %d", e.After, e.Peer)
	case e.Timeout():
		fmt.Fprintf(&b, " timed out after %v", e.After)
	case e.Peer >= 0:
		fmt.Fprintf(&b, " failed with rank %d", e.Peer)
	default:
		b.WriteString(" failed")
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if e.PeerLeft != "" {
		fmt.Fprintf(&b, " (rank %d left after: %s)", e.Peer, e.PeerLeft)
	}
	return b.String()
}

func (e *OpError) Unwrap() error { return e.Err }

// Timeout reports whether the op failed because its deadline passed.
func (e *OpError) Timeout() bool { return errors.Is(e.Err, transport.ErrTimeout) }
