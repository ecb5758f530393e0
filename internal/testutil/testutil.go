// Package testutil holds the helpers that godist's Go tests share. Only
// test files import it.
package testutil

import (
	"testing"
	"time"
)

// WaitUntil polls cond every millisecond until it holds or within has
// passed, and reports whether it held. Safe on any goroutine.
func WaitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Eventually fails t with what (what was waited for) if cond does not hold
// within the given time. Call it from the test's goroutine.
func Eventually(t testing.TB, within time.Duration, cond func() bool, what string) {
	t.Helper()
	if !WaitUntil(within, cond) {
		t.Fatalf("not within %v: %s", within, what)
	}
}
