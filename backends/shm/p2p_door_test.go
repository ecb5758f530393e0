package shm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/transport"
)

// setIdlePark sets idlePark for one test. Call it before opening arenas:
// the old value comes back after they are closed (cleanups run last in,
// first out), when no receiver reads it any more.
func setIdlePark(t *testing.T, d time.Duration) {
	old := idlePark
	idlePark = d
	t.Cleanup(func() { idlePark = old })
}

// idleMode is what local rank r's idle receiver sleeps on now.
func idleMode(a *Arena, r int) uint32 { return a.u32(a.ctl(r) + ctlIdle + 4).Load() }

// TestIdleReceiverWakesOnDoorbell: a receiver idle for deepIdle parks on
// its doorbell socket and a message sent to it (no one waiting for it on the receiving
// side, so only the receiver goroutine can deliver it) arrives at once,
// not at the end of the park; with the doorbell off (ctlDoorOff) it sleeps
// on the futex and is woken there. idlePark is made long so that a missed
// wake-up shows as a delay.
func TestIdleReceiverWakesOnDoorbell(t *testing.T) {
	if !supported {
		t.Skip("no shared memory transport on this OS")
	}
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("door-off=%v", off), func(t *testing.T) {
			setIdlePark(t, 20*time.Second)
			arenas := openGroup(t, 2, nil)
			if off {
				arenas[1].u32(arenas[1].ctl(1) + ctlDoorOff).Store(1)
			}
			mbs := make([]*transport.Mailbox, 2)
			for i, a := range arenas {
				mbs[i] = transport.NewMailbox(2)
				require.NoError(t, a.Attach(mbs[i]))
			}
			want := uint32(sleepDoor)
			if off {
				want = sleepFutex
			}
			ctx := testCtx(t, 30*time.Second)
			for i := 0; i < 5; i++ {
				require.Eventually(t, func() bool { return idleMode(arenas[0], 1) == want },
					10*time.Second, time.Millisecond, "the receiver never went idle")
				got := make([]byte, 3)
				r := mbs[1].Post(0, transport.P2PTag(int64(i)), got)
				start := time.Now()
				require.NoError(t, arenas[0].Send(ctx, 1, transport.P2PTag(int64(i)), []byte{1, 2, byte(i)}))
				select {
				case <-r.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the parked receiver was not woken")
				}
				require.NoError(t, r.Err())
				require.Equal(t, []byte{1, 2, byte(i)}, got)
				require.Less(t, time.Since(start), 2*time.Second)
			}
		})
	}
}

// TestUnreachableDoorbellFallsBack: a sender that cannot ring a parked
// receiver's doorbell turns the doorbell off; the receiver gets that
// message at the end of its park and sleeps on the futex from then on,
// where later messages wake it at once.
func TestUnreachableDoorbellFallsBack(t *testing.T) {
	if !supported {
		t.Skip("no shared memory transport on this OS")
	}
	setIdlePark(t, 300*time.Millisecond)
	old := deepIdle
	deepIdle = 0
	t.Cleanup(func() { deepIdle = old })
	arenas := openGroup(t, 2, nil)
	mbs := make([]*transport.Mailbox, 2)
	for i, a := range arenas {
		mbs[i] = transport.NewMailbox(2)
		require.NoError(t, a.Attach(mbs[i]))
	}
	// The sender loses its ringing socket.
	if out := arenas[0].p2p.door.out.Swap(-1); out >= 0 {
		closeFD(int(out))
	}
	ctx := testCtx(t, 30*time.Second)
	for i := 0; i < 3; i++ {
		want := uint32(sleepDoor)
		if i > 0 {
			want = sleepFutex
		}
		require.Eventually(t, func() bool { return idleMode(arenas[0], 1) == want },
			10*time.Second, time.Millisecond, "the receiver never went idle")
		r := mbs[1].Post(0, transport.P2PTag(int64(i)), make([]byte, 1))
		require.NoError(t, arenas[0].Send(ctx, 1, transport.P2PTag(int64(i)), []byte{byte(i)}))
		select {
		case <-r.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the message was never delivered")
		}
		require.NoError(t, r.Err())
	}
	require.NotZero(t, arenas[1].u32(arenas[1].ctl(1)+ctlDoorOff).Load())
	require.False(t, arenas[1].doorUsable())
	require.Eventually(t, func() bool { return idleMode(arenas[0], 1) == sleepFutex },
		10*time.Second, time.Millisecond)
}

// standAsideGroup opens two ranks whose idle receivers sleep up to 20 s
// (so a missed wake-up shows) and makes rank 1's receiver stand aside for
// a waiter that is present but holds no role. before, if set, runs just
// before rank 1's receiver starts; onAside runs each time that receiver
// decides to stand aside, and the call returns once onAside has reported
// true.
func standAsideGroup(t *testing.T, onAside func(*Arena) bool, before func(*Arena)) *Arena {
	pol := DefaultWaitPolicy(2)
	pol.Idle = 20 * time.Second
	aside := make(chan struct{})
	var once sync.Once
	testHookStandAside = func(x *Arena) {
		if x.rank == 1 && onAside(x) {
			once.Do(func() { close(aside) })
		}
	}
	// Registered first, so it runs last: after the receivers have ended.
	t.Cleanup(func() { testHookStandAside = nil })
	a := openGroup(t, 2, func(c *Config) { c.Wait = &pol })[1]
	waiters := a.u32(a.ctl(1) + ctlWaiters)
	waiters.Add(1)
	t.Cleanup(func() { waiters.Add(^uint32(0)) })
	if before != nil {
		before(a)
	}
	require.NoError(t, a.Attach(transport.NewMailbox(2)))
	select {
	case <-aside:
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver never stood aside")
	}
	return a
}

// TestStreamedHandOverIsNotMissed: a waiter that meets a message still
// being written hands it to the receiver goroutine (streaming, then a
// wake-up). The hand-over here comes at the worst moment: after the
// receiver saw no streaming message and decided to stand aside for the
// waiter, before it sleeps. The receiver must take the message up at once,
// not at the end of its idle sleep.
func TestStreamedHandOverIsNotMissed(t *testing.T) {
	if !supported {
		t.Skip("no shared memory transport on this OS")
	}
	var once sync.Once
	a := standAsideGroup(t, func(x *Arena) bool {
		once.Do(func() {
			x.p2p.streaming.Store(true)
			x.wakeIdle()
		})
		return true
	}, nil)
	// The receiver takes the role and clears streaming when it scans.
	require.Eventually(t, func() bool { return !a.p2p.streaming.Load() }, 2*time.Second, time.Millisecond,
		"the receiver slept through the hand-over")
}

// TestHandOverAfterRoleReleased: the hand-over's wake-up comes while the
// waiter still holds the receiving role, so the receiver, woken, cannot
// take the role and stands aside to sleep. The waiter letting go of the
// role (releaseRole) must wake it again, or it sleeps until its timeout.
func TestHandOverAfterRoleReleased(t *testing.T) {
	if !supported {
		t.Skip("no shared memory transport on this OS")
	}
	var held atomic.Bool
	a := standAsideGroup(t, func(x *Arena) bool { return x.p2p.streaming.Load() }, func(a *Arena) {
		// The waiter holds the role and hands a message over.
		a.p2p.role.Lock()
		held.Store(true)
		t.Cleanup(func() {
			if held.Load() {
				a.p2p.role.Unlock()
			}
		})
		a.p2p.streaming.Store(true)
		a.wakeIdle()
	})
	held.Store(false)
	a.releaseRole()
	require.Eventually(t, func() bool { return !a.p2p.streaming.Load() }, 2*time.Second, time.Millisecond,
		"the receiver slept through the hand-over")
}
