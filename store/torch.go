package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Torch's conventions for one call through its Store API, which godist's
// C ABI follows so that Python's stores behave like torch's: what a
// per-call timeout means, and how a store error reads.

// OnTCP reports whether s talks to a TCPStore server, itself or through
// PrefixStores: its keys go on the wire with a "/" prefix, and a zero
// timeout means "fail at once unless ready".
func OnTCP(s Store) bool {
	if p, ok := s.(*PrefixStore); ok {
		s = p.UnderlyingNonPrefix()
	}
	_, ok := s.(*TCPStore)
	return ok
}

// farFuture stands for "no limit" in a per-call deadline.
const farFuture = 100 * 365 * 24 * time.Hour

// CallContext returns the context of one call to s given timeout: < 0,
// the store's own timeout (no deadline of the call's); 0, what a zero
// timeout means for s (OnTCP: fail at once; otherwise no limit); > 0, that
// bound.
func CallContext(s Store, timeout time.Duration) (context.Context, context.CancelFunc) {
	switch {
	case timeout < 0:
		return context.Background(), func() {}
	case timeout == 0 && !OnTCP(s):
		return context.WithTimeout(context.Background(), farFuture)
	default:
		return context.WithTimeout(context.Background(), timeout)
	}
}

// WaitContext is CallContext for a call op that waits for keys (get,
// wait, multi_get, blocking queue_pop). A zero timeout on a TCPStore fails
// at once with a *TimeoutError unless the keys exist (a context that has
// already expired would fail even then).
func WaitContext(s Store, timeout time.Duration, op string, keys []string) (context.Context, context.CancelFunc, error) {
	if timeout == 0 && OnTCP(s) {
		ok, err := s.Check(context.Background(), keys)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, &TimeoutError{Op: op, Keys: keys}
		}
		timeout = -1
	}
	ctx, cancel := CallContext(s, timeout)
	return ctx, cancel, nil
}

// Requested makes a *TimeoutError of a call with a timeout of its own
// (>= 0) report that timeout (the store measures what was left when it
// started waiting), and returns err.
func Requested(err error, timeout time.Duration) error {
	var te *TimeoutError
	if timeout >= 0 && errors.As(err, &te) {
		te.After = timeout
	}
	return err
}

// TorchMessage renders err as torch does, so torch-style regexes match:
// a timed-out wait reads "wait timeout after 100ms, keys: /k1, /k2", with
// the keys as on the wire of a TCPStore when tcp (a "/" prefix). Other
// errors read as err.Error().
func TorchMessage(err error, tcp bool) string {
	var te *TimeoutError
	if !errors.As(err, &te) {
		return err.Error()
	}
	wirePrefix := ""
	if tcp {
		wirePrefix = "/"
	}
	ms := te.After.Round(time.Millisecond).Milliseconds()
	switch te.Op {
	case "wait_for_workers":
		return fmt.Sprintf("Timed out after %d seconds waiting for clients. %s. (wait_for_workers timeout)",
			int64(te.After.Round(time.Second)/time.Second), te.Detail)
	case "connect":
		return fmt.Sprintf("The client socket has timed out after %dms while trying to connect. (connect timeout: %s)", ms, te.Detail)
	}
	op := te.Op
	switch op {
	case "get", "wait", "multi_get", "queue_pop": // torch: a WAIT that timed out
		op = "wait"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s timeout after %dms", op, ms)
	if len(te.Keys) > 0 {
		b.WriteString(", keys: ")
		for i, k := range te.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(wirePrefix)
			b.WriteString(k)
		}
	}
	if te.Detail != "" {
		b.WriteString(" (")
		b.WriteString(te.Detail)
		b.WriteString(")")
	}
	return b.String()
}
