package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Timeout messages follow torch's wording, so torch-style regexes match.
func TestTorchMessage(t *testing.T) {
	cases := []struct {
		err  error
		tcp  bool
		want string
	}{
		{&TimeoutError{Op: "wait", Keys: []string{"a", "b"}, After: 100 * time.Millisecond}, true,
			"wait timeout after 100ms, keys: /a, /b"},
		{&TimeoutError{Op: "get", Keys: []string{"nonexistent key"}, After: 100 * time.Millisecond}, true,
			"wait timeout after 100ms, keys: /nonexistent key"},
		{&TimeoutError{Op: "queue_pop", Keys: []string{"q"}, After: 10 * time.Millisecond}, false,
			"wait timeout after 10ms, keys: q"},
		{&TimeoutError{Op: "add", Keys: []string{"c"}, After: time.Second}, true,
			"add timeout after 1000ms, keys: /c"},
		{&TimeoutError{Op: "wait_for_workers", After: 2 * time.Second, Detail: "1/2 clients joined"}, true,
			"Timed out after 2 seconds waiting for clients. 1/2 clients joined. (wait_for_workers timeout)"},
		{ErrClosed, true, "store: closed"},
	}
	for _, tc := range cases {
		if got := TorchMessage(tc.err, tc.tcp); got != tc.want {
			t.Errorf("TorchMessage(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// Requested makes a timeout report the timeout the caller asked for.
func TestRequested(t *testing.T) {
	err := Requested(&TimeoutError{Op: "wait", After: 97 * time.Millisecond}, 100*time.Millisecond)
	var te *TimeoutError
	if !errors.As(err, &te) || te.After != 100*time.Millisecond {
		t.Fatalf("After = %v, want 100ms", te.After)
	}
	err = Requested(&TimeoutError{Op: "wait", After: 3 * time.Second}, -time.Millisecond)
	if errors.As(err, &te); te.After != 3*time.Second {
		t.Fatalf("store default: After = %v, want 3s", te.After)
	}
}

// A zero timeout fails at once on no store but a TCPStore's waits: on a
// HashStore (and a PrefixStore over it) it means no limit.
func TestZeroTimeout(t *testing.T) {
	h := NewHashStore(time.Second)
	p, err := NewPrefixStore("p", h)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Store{h, p} {
		if OnTCP(s) {
			t.Fatalf("OnTCP(%T) = true", s)
		}
		ctx, cancel, err := WaitContext(s, 0, "get", []string{"k"})
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := ctx.Deadline(); !ok || time.Until(d) < 24*time.Hour {
			t.Fatalf("%T: deadline %v, want far away", s, d)
		}
		cancel()
	}
	ctx, cancel := CallContext(h, -1)
	defer cancel()
	if ctx != context.Background() {
		t.Fatal("a negative timeout should leave the call without a deadline")
	}
}
