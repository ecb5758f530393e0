package main

import (
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
