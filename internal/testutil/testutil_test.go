package testutil

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitUntil(t *testing.T) {
	var n atomic.Int32
	if !WaitUntil(time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("WaitUntil gave up on a condition that came true")
	}
	start := time.Now()
	if WaitUntil(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("WaitUntil reported a condition that never held")
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("WaitUntil gave up after %v, before its 20ms", d)
	}
}
