package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/store"
)

// Store errors map to the codes Python turns into torch's exceptions; a
// store timeout is statusStore (DistStoreError) even though the generic
// timeout rule of pg.go is registered first.
func TestStoreErrorCodes(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"timeout", storeFail(&store.TimeoutError{Op: "wait", Keys: []string{"k"}, After: time.Second}, true), statusStore},
		{"closed", storeFail(&store.OpError{Store: "tcp", Op: "get", Err: store.ErrClosed}, true), statusClosed},
		{"invalid", storeFail(fmt.Errorf("x: %w", store.ErrInvalid), false), statusInvalid},
		{"unsupported", storeFail(store.ErrNotSupported, false), statusUnsupported},
		{"conn lost", storeFail(store.ErrConnLost, true), statusStore},
		{"not found", storeFail(store.ErrNotFound, false), statusStore},
		{"bad argument", invalidArg("NULL out"), statusInvalid},
		{"rendezvous timeout", &libgodist.RendezvousError{Group: "g", Err: &store.TimeoutError{Op: "wait"}}, statusTimeout},
		{"bad handle", fmt.Errorf("%w 7", errInvalidHandle), statusInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := int(codeOf(tc.err)); got != tc.want {
				t.Fatalf("codeOf(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

// Timeout messages follow torch's wording, so torch-style regexes match.
func TestStoreMessages(t *testing.T) {
	cases := []struct {
		err    error
		prefix string
		want   string
	}{
		{&store.TimeoutError{Op: "wait", Keys: []string{"a", "b"}, After: 100 * time.Millisecond}, "/",
			"wait timeout after 100ms, keys: /a, /b"},
		{&store.TimeoutError{Op: "get", Keys: []string{"nonexistent key"}, After: 100 * time.Millisecond}, "/",
			"wait timeout after 100ms, keys: /nonexistent key"},
		{&store.TimeoutError{Op: "queue_pop", Keys: []string{"q"}, After: 10 * time.Millisecond}, "",
			"wait timeout after 10ms, keys: q"},
		{&store.TimeoutError{Op: "add", Keys: []string{"c"}, After: time.Second}, "/",
			"add timeout after 1000ms, keys: /c"},
		{&store.TimeoutError{Op: "wait_for_workers", After: 2 * time.Second, Detail: "1/2 clients joined"}, "/",
			"Timed out after 2 seconds waiting for clients. 1/2 clients joined. (wait_for_workers timeout)"},
		{store.ErrClosed, "/", "store: closed"},
	}
	for _, tc := range cases {
		if got := storeMessage(tc.err, tc.prefix); got != tc.want {
			t.Errorf("storeMessage(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// requested makes a timeout report the timeout the caller asked for.
func TestRequestedTimeout(t *testing.T) {
	err := requested(&store.TimeoutError{Op: "wait", After: 97 * time.Millisecond}, 100)
	var te *store.TimeoutError
	if !errors.As(err, &te) || te.After != 100*time.Millisecond {
		t.Fatalf("After = %v, want 100ms", te.After)
	}
	err = requested(&store.TimeoutError{Op: "wait", After: 3 * time.Second}, -1)
	if errors.As(err, &te); te.After != 3*time.Second {
		t.Fatalf("store default: After = %v, want 3s", te.After)
	}
}
