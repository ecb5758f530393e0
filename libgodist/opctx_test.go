package libgodist

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var errGroupClosed = errors.New("group closed")

func closedWithin(t *testing.T, ch <-chan struct{}, d time.Duration) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("channel not closed within %v", d)
	}
}

func requireOpen(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("channel closed")
	default:
	}
}

// TestOpContextDeadline: Err reports the deadline once it has passed,
// whether or not Done was asked for, and a Done asked for before or after
// the deadline is closed.
func TestOpContextDeadline(t *testing.T) {
	for _, early := range []bool{true, false} {
		const timeout = 100 * time.Millisecond
		before := time.Now()
		c := newOpContext(context.Background(), timeout)
		after := time.Now()
		dl, ok := c.Deadline()
		require.True(t, ok)
		require.False(t, dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout)),
			"deadline %v not within [%v, %v]", dl, before.Add(timeout), after.Add(timeout))
		// Before the deadline: no error, Done open (unless this goroutine
		// was descheduled past the deadline meanwhile).
		if err := c.Err(); err != nil {
			require.False(t, time.Now().Before(dl), "Err %v before the deadline", err)
		}
		var done <-chan struct{}
		if early {
			done = c.Done()
			select {
			case <-done:
				require.False(t, time.Now().Before(dl), "Done closed before the deadline")
			default:
			}
		}
		// The deadline passing is what is tested: sleep until it has, and
		// no longer (Err must not wait for Done's timer).
		time.Sleep(time.Until(dl))
		require.ErrorIs(t, c.Err(), context.DeadlineExceeded, "early Done: %v", early)
		if !early {
			done = c.Done()
		}
		closedWithin(t, done, time.Second)
		c.cancel()
		require.ErrorIs(t, c.Err(), context.DeadlineExceeded, "cancel after the deadline keeps its error")
	}
}

// TestOpContextParent: cancelling the group's context ends the op's, with
// the group's cause reachable through context.Cause.
func TestOpContextParent(t *testing.T) {
	for _, early := range []bool{true, false} {
		parent, stop := context.WithCancelCause(context.Background())
		c := newOpContext(parent, time.Hour)
		var done <-chan struct{}
		if early {
			done = c.Done()
		}
		stop(errGroupClosed)
		require.ErrorIs(t, c.Err(), context.Canceled)
		require.ErrorIs(t, context.Cause(c), errGroupClosed)
		if !early {
			done = c.Done()
		}
		closedWithin(t, done, time.Second)
	}
}

// TestOpContextCancel: cancel ends the context (idempotently); a Done made
// before is closed, one asked for after comes closed, and contexts derived
// from it end too.
func TestOpContextCancel(t *testing.T) {
	c := newOpContext(context.Background(), time.Hour)
	early := c.Done()
	derived, stop := context.WithTimeout(c, time.Hour)
	defer stop()
	c.cancel()
	c.cancel()
	require.ErrorIs(t, c.Err(), context.Canceled)
	closedWithin(t, early, time.Second)
	closedWithin(t, derived.Done(), time.Second)

	c2 := newOpContext(context.Background(), time.Hour)
	c2.cancel()
	closedWithin(t, c2.Done(), time.Second)
	require.ErrorIs(t, c2.Err(), context.Canceled)
}

// TestWorkDoneLazily: a work's Done channel works whether it is asked for
// before completion (closed by finish) or after (already closed), and hooks
// and outcomes are the same either way.
func TestWorkDoneLazily(t *testing.T) {
	errOp := errors.New("op failed")
	w := newWork("x", 1)
	before := w.Done()
	requireOpen(t, before)
	require.ErrorIs(t, w.Wait(0), ErrNotReady)
	require.ErrorIs(t, w.Wait(5*time.Millisecond), ErrNotReady)
	hook := make(chan struct{})
	w.OnDone(func() { close(hook) })
	go w.finish(errOp, 3)
	closedWithin(t, before, time.Second)
	require.ErrorIs(t, w.Err(), errOp)
	require.Equal(t, 3, w.Source())
	closedWithin(t, hook, time.Second)

	w2 := completedWork("y", 2, nil)
	closedWithin(t, w2.Done(), time.Second)
	require.NoError(t, w2.Wait(0))
	require.NoError(t, w2.Err())
	ran := false
	w2.OnDone(func() { ran = true }) // runs at once: the work is done
	require.True(t, ran)
	w2.finish(errOp, 0) // a second finish changes nothing
	require.NoError(t, w2.Err())
}
