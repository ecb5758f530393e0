// Package store implements the key-value stores godist uses for rendezvous,
// with the semantics of torch.distributed's c10d stores (torch 2.11–2.15):
//
//   - HashStore: in-process map (hash.go).
//   - PrefixStore: a key-prefix view of another store (prefix.go).
//   - TCPStore: a client and a server that speak torch's TCPStore wire
//     protocol byte for byte, so torch clients can use a godist server and
//     godist clients a torch server (tcp_*.go).
//   - FileStore: reads and writes torch's FileStore file format with the
//     same flock locking and refcount clean-up, so torch and godist can share
//     one file (file*.go).
//
// All of them implement Store. The protocol and format facts they rest on are
// in docs/STORES.md.
package store

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// DefaultTimeout is the store timeout used when none is given (torch's
// default TCPStore/FileStore timeout).
const DefaultTimeout = 300 * time.Second

// Store is a key-value store shared by the ranks of a job.
//
// Keys are arbitrary byte strings. Values returned by a Store belong to the
// caller; values passed in may be retained only as copies (callers may reuse
// their slices after the call returns).
//
// Every method that can block uses ctx's deadline when ctx has one, else the
// store's Timeout (see each implementation for what a zero timeout means),
// and also returns early when ctx is cancelled (with an error wrapping
// ctx.Err()) or the store is closed (ErrClosed). A wait that reaches its
// deadline returns a *TimeoutError (errors.Is(err, ErrTimeout)).
//
// All methods are safe for concurrent use.
type Store interface {
	// Set stores value under key, overwriting any previous value, and wakes
	// waiters on key.
	Set(ctx context.Context, key string, value []byte) error

	// Get returns the value of key, blocking until the key exists or the
	// deadline passes.
	Get(ctx context.Context, key string) ([]byte, error)

	// Add adds delta to the integer stored under key and returns the new
	// value. A missing key counts as 0. An existing value is parsed like
	// C++ std::stoll (leading blanks, optional sign, decimal digits, stops at
	// the first non-digit: "12abc" is 12); a value with no leading digits
	// gives ErrInvalid (HashStore, FileStore; an empty value counts as 0
	// there) or, on TCPStore, makes the server close the connection
	// (ErrConnLost), exactly as torch's server does. The result is stored as
	// a decimal string.
	Add(ctx context.Context, key string, delta int64) (int64, error)

	// CompareSet stores desired under key if the key is missing and expected
	// is empty, or if the current value equals expected; it then returns
	// desired. Otherwise it stores nothing and returns the current value, or
	// expected itself when the key is missing (torch's behaviour).
	CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error)

	// Check reports, without blocking, whether all keys exist (a non-empty
	// queue of that name counts as existing on stores with queues).
	Check(ctx context.Context, keys []string) (bool, error)

	// Wait blocks until all keys exist or the deadline passes. Wait with no
	// keys returns at once.
	Wait(ctx context.Context, keys []string) error

	// DeleteKey removes key and reports whether it existed (FileStore always
	// reports true, like torch). Deleting does not wake waiters.
	DeleteKey(ctx context.Context, key string) (bool, error)

	// NumKeys returns the number of keys in the underlying store, including
	// internal ones (TCPStore's "init/", FileStore's "refcount/" and
	// "cleanup/"); PrefixStore does not filter it.
	NumKeys(ctx context.Context) (int64, error)

	// Append appends value to the value of key, creating the key if it is
	// missing, and wakes waiters on key.
	Append(ctx context.Context, key string, value []byte) error

	// MultiGet waits for all keys (one deadline for all) and returns their
	// values in order.
	MultiGet(ctx context.Context, keys []string) ([][]byte, error)

	// MultiSet sets keys[i] to values[i]; it fails with ErrInvalid if the
	// lengths differ.
	MultiSet(ctx context.Context, keys []string, values [][]byte) error

	// ListKeys returns the keys of the store, in no particular order (see
	// each implementation for which internal keys appear).
	ListKeys(ctx context.Context) ([]string, error)

	// QueuePush appends value to the queue named key and wakes one waiter.
	QueuePush(ctx context.Context, key string, value []byte) error

	// QueuePop removes and returns the first value of the queue named key.
	// With block it waits until the queue is non-empty or the deadline
	// passes (ErrTimeout); without, an empty queue gives ErrNotFound.
	QueuePop(ctx context.Context, key string, block bool) ([]byte, error)

	// QueueLen returns the length of the queue named key (0 if missing).
	QueueLen(ctx context.Context, key string) (int64, error)

	// Clone returns a new handle on the same store (a new connection for
	// TCPStore, a new opener of the file for FileStore). The clone is
	// closed independently.
	Clone(ctx context.Context) (Store, error)

	// Timeout returns the store's default timeout.
	Timeout() time.Duration

	// SetTimeout sets the store's default timeout.
	SetTimeout(d time.Duration)

	// Close releases the store's resources and makes pending and later
	// operations fail with ErrClosed. It is idempotent; only the first call
	// does anything and later calls return nil.
	Close() error
}

// deadline is the deadline of one operation, computed once at its start.
type deadline struct {
	at    time.Time     // valid if has
	has   bool          // false: no deadline (wait until ctx or close)
	after time.Duration // the allowed wait, for error messages
}

// newDeadline returns ctx's deadline if it has one, else now+timeout. A
// timeout <= 0 means "no deadline" if zeroForever is set (HashStore and
// FileStore, like torch's kNoTimeout), else "already expired" (TCPStore).
func newDeadline(ctx context.Context, timeout time.Duration, zeroForever bool) deadline {
	now := time.Now()
	if at, ok := ctx.Deadline(); ok {
		return deadline{at: at, has: true, after: max(at.Sub(now), 0).Round(time.Millisecond)}
	}
	if timeout <= 0 {
		if zeroForever {
			return deadline{}
		}
		return deadline{at: now, has: true}
	}
	return deadline{at: now.Add(timeout), has: true, after: timeout}
}

// timeout returns the *TimeoutError for op on keys.
func (d deadline) timeout(op string, keys []string) error {
	return &TimeoutError{Op: op, Keys: append([]string(nil), keys...), After: d.after}
}

// errWaitDeadline is returned by sleep when the operation's deadline passed;
// the caller turns it into a *TimeoutError naming its keys.
var errWaitDeadline = errors.New("store: deadline reached")

// sleep blocks until notify is ready (or closed), poll elapses (if > 0), the
// deadline passes (errWaitDeadline), ctx ends (its error; a ctx deadline
// counts as errWaitDeadline) or closed is closed (ErrClosed). It returns nil
// for notify and poll. A nil notify is never ready.
func (d deadline) sleep(ctx context.Context, notify <-chan struct{}, poll time.Duration, closed <-chan struct{}) error {
	var timer, poller <-chan time.Time
	if d.has {
		wait := time.Until(d.at)
		if wait <= 0 {
			return errWaitDeadline
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	if poll > 0 {
		t := time.NewTimer(poll)
		defer t.Stop()
		poller = t.C
	}
	select {
	case <-notify:
		return nil
	case <-poller:
		return nil
	case <-timer:
		return errWaitDeadline
	case <-closed:
		return ErrClosed
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errWaitDeadline
		}
		return ctx.Err()
	}
}

// parseStoll parses s the way C++ std::stoll(s) does (base 10): it skips
// leading whitespace, accepts one optional sign, then reads decimal digits up
// to the first non-digit. It fails with ErrInvalid when there are no digits
// or the number overflows int64.
func parseStoll(s []byte) (int64, error) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	start := i
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == digits {
		return 0, errf(ErrInvalid, "value %q is not an integer (stoll)", truncate(s, 32))
	}
	n, err := strconv.ParseInt(string(s[start:i]), 10, 64)
	if err != nil {
		return 0, errf(ErrInvalid, "value %q is out of range (stoll)", truncate(s, 32))
	}
	return n, nil
}

// isSpace reports whether c is a C isspace character.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// truncate returns at most n bytes of b, for error messages.
func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// addValue returns the new value of an ADD on a key whose current value is
// cur (present tells whether the key exists). emptyIsZero selects the
// HashStore/FileStore rule that an existing empty value counts as 0; torch's
// TCPStore server treats it as an error.
func addValue(cur []byte, present bool, delta int64, emptyIsZero bool) (int64, error) {
	if !present || (emptyIsZero && len(cur) == 0) {
		return delta, nil
	}
	n, err := parseStoll(cur)
	if err != nil {
		return 0, err
	}
	return n + delta, nil // wraps on overflow, like the C++ servers in practice
}

// compareSetResult applies torch's compare_set rules to a key whose current
// value is cur (present tells whether it exists). It returns the value to
// reply with and whether desired must be stored.
func compareSetResult(cur []byte, present bool, expected, desired []byte) (reply []byte, store bool) {
	switch {
	case !present && len(expected) == 0:
		return desired, true
	case !present:
		return expected, false
	case string(cur) == string(expected):
		return desired, true
	default:
		return cur, false
	}
}

// Barrier blocks until worldSize callers have called Barrier with the same
// key on s, or the deadline passes. It is torch's Store::barrier default
// (used by every store except a TCPStore talking to a 2.12+ server):
// add(key+"/num_members", 1); the caller that brings the count to worldSize
// sets key+"/last_member" to "1"; everyone waits for key+"/last_member". Like
// torch's, the counter is never reset, so a key can be used once.
func Barrier(ctx context.Context, s Store, key string, worldSize int64) error {
	if worldSize <= 0 {
		return errf(ErrInvalid, "barrier world size %d must be positive", worldSize)
	}
	n, err := s.Add(ctx, key+"/num_members", 1)
	if err != nil {
		return err
	}
	last := key + "/last_member"
	if n == worldSize {
		if err := s.Set(ctx, last, []byte("1")); err != nil {
			return err
		}
	}
	return s.Wait(ctx, []string{last})
}

// cloneBytes returns a copy of b that is never nil, so an empty value is
// returned as an empty slice rather than nil.
func cloneBytes(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}

// formatInt renders n the way C++ std::to_string does for an int64.
func formatInt(n int64) string { return strconv.FormatInt(n, 10) }
