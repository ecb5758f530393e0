package store

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors, compared with errors.Is. Errors returned by this package
// wrap the one that applies, usually inside a *TimeoutError or *OpError that
// adds context; an operation ended by ctx wraps ctx.Err() instead, and an OS
// error from FileStore (permissions, disk full) wraps the *os.PathError.
var (
	// ErrTimeout reports that a wait (Get, Wait, MultiGet, blocking QueuePop,
	// connect, waiting for workers) reached its deadline. It satisfies
	// interface{ Timeout() bool } with Timeout() == true.
	ErrTimeout error = timeoutSentinel{}

	// ErrClosed reports an operation on a store (or server) after Close, or
	// one that Close interrupted.
	ErrClosed = errors.New("store: closed")

	// ErrNotFound reports that a non-blocking lookup (QueuePop with
	// block=false on an empty queue) found nothing.
	ErrNotFound = errors.New("store: not found")

	// ErrProtocol reports bytes that break the TCPStore wire protocol or the
	// FileStore file format: a bad reply, a failed ping echo, a truncated or
	// oversized record.
	ErrProtocol = errors.New("store: protocol error")

	// ErrInvalid reports an invalid argument or stored value: ADD on a value
	// that is not a decimal integer, MultiSet with mismatched lengths, a nil
	// inner store.
	ErrInvalid = errors.New("store: invalid argument")

	// ErrNotSupported reports an operation the store (or the server it talks
	// to) does not implement, such as queues on FileStore or on torch's
	// classic (non-libuv) TCPStore server.
	ErrNotSupported = errors.New("store: operation not supported")

	// ErrConnLost reports that the connection to a TCPStore server broke
	// during an operation (the peer closed it, for example after a request it
	// rejected). The client dials again on its next operation.
	ErrConnLost = errors.New("store: connection to server lost")
)

// timeoutSentinel is the type of ErrTimeout.
type timeoutSentinel struct{}

func (timeoutSentinel) Error() string { return "store: timed out" }

// Timeout reports true.
func (timeoutSentinel) Timeout() bool { return true }

// TimeoutError is returned when a blocking operation reaches its deadline. It
// names the operation, how long it waited and the keys it waited for, as the
// caller passed them to the store that timed out (for a PrefixStore, the
// joined keys). It wraps ErrTimeout.
type TimeoutError struct {
	Op     string        // "wait", "get", "multi_get", "queue_pop", "connect", ...
	Keys   []string      // keys waited for; may be empty
	After  time.Duration // how long the operation was allowed to wait
	Detail string        // optional extra context, e.g. "1/2 clients joined"
}

// Error renders, e.g., "store: wait timed out after 3s for keys [a b]".
func (e *TimeoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store: %s timed out after %v", e.Op, e.After)
	if len(e.Keys) > 0 {
		fmt.Fprintf(&b, " for keys %v", e.Keys)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns ErrTimeout.
func (e *TimeoutError) Unwrap() error { return ErrTimeout }

// Timeout reports true.
func (e *TimeoutError) Timeout() bool { return true }

// OpError adds context to a failed store operation: which store, which
// operation, which keys, and the server address or file path. Err is the
// cause and wraps one of the sentinels above (or a context error).
type OpError struct {
	Store string   // "tcp", "tcp-server", "file", "hash", "prefix"
	Op    string   // operation name, as in the Store interface ("add", "get", ...)
	Keys  []string // keys involved, if any
	Addr  string   // server address or file path, if any
	Err   error
}

// Error renders, e.g., `store: tcp add [ctr] 127.0.0.1:29500: store: connection to server lost: EOF`.
func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString("store: ")
	b.WriteString(e.Store)
	b.WriteString(" ")
	b.WriteString(e.Op)
	if len(e.Keys) > 0 {
		fmt.Fprintf(&b, " %q", e.Keys)
	}
	if e.Addr != "" {
		b.WriteString(" ")
		b.WriteString(e.Addr)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Timeout reports whether the cause is a timeout.
func (e *OpError) Timeout() bool { return errors.Is(e.Err, ErrTimeout) }

// errf wraps a sentinel with a formatted message: errf(ErrInvalid, "x %d", 1)
// renders "store: invalid argument: x 1" and matches errors.Is(err, ErrInvalid).
func errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
