package shm

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/transport"
)

// TestDirectSend: messages of cmaMin bytes and more are copied straight
// out of the sender's memory, into a posted receive or, when none is
// posted, into the mailbox's unexpected store; smaller ones use the ring.
func TestDirectSend(t *testing.T) {
	trs := newTransports(t, 3, nil)
	ctx := testCtx(t, 10*time.Second)
	tag := transport.P2PTag(1)
	for _, n := range []int{cmaMin - 1, cmaMin, cmaMin + 7, 3 << 20} {
		want := randBytes(n, uint64(n))
		// Posted first.
		got := make([]byte, n)
		r := trs[2].PostRecv(0, tag, got)
		require.NoError(t, trs[0].Send(ctx, 2, tag, want))
		require.NoError(t, r.Wait(ctx))
		require.Equal(t, want, got)
		// Not posted: Send returns once the receiver goroutine has read it.
		require.NoError(t, trs[1].Send(ctx, 2, tag, want))
		got2 := make([]byte, n)
		require.NoError(t, trs[2].PostRecv(1, tag, got2).Wait(ctx))
		require.Equal(t, want, got2)
	}
	a := trs[2].Arena()
	a.p2p.role.Lock()
	require.True(t, a.p2p.directOK[0])
	a.p2p.role.Unlock()
	require.Zero(t, a.u32(a.lay.ch(0, 2)+chRefused).Load())
}

// TestDirectRefused: a receiver that cannot read the sender's memory
// refuses; the sender sends that message and later ones through the ring.
func TestDirectRefused(t *testing.T) {
	readMemory = func(int, uintptr, []byte) (int, error) { return 0, syscall.EPERM }
	t.Cleanup(func() { readMemory = readProcess })
	trs := newTransports(t, 2, nil)
	ctx := testCtx(t, 10*time.Second)
	tag := transport.P2PTag(2)
	for i, n := range []int{cmaMin, 1 << 20, cmaMin + 1} {
		sendPosted(t, ctx, trs, 0, 1, tag, randBytes(n, uint64(i)), fmt.Sprintf("message %d", i))
	}
	a := trs[0].Arena()
	require.Equal(t, uint32(1), a.u32(a.lay.ch(0, 1)+chRefused).Load())
}

// TestDirectSenderTimeout: a sender whose receiver never reads gives up at
// its deadline and cuts the channel.
func TestDirectSenderTimeout(t *testing.T) {
	arenas := openGroup(t, 2, nil)
	t.Cleanup(func() { closeAll(arenas) })
	ctx := testCtx(t, 200*time.Millisecond)
	// No mailbox attached at rank 1: nobody reads the descriptor.
	err := arenas[0].Send(ctx, 1, transport.P2PTag(3), make([]byte, cmaMin))
	require.ErrorIs(t, err, transport.ErrTimeout)
	require.Equal(t, uint32(1), arenas[0].u32(arenas[0].lay.ch(0, 1)+chBroken).Load())
}

// TestProgress: a waiter that calls Progress receives on its own
// goroutine, also while the receiver goroutine runs, and Progress returns
// at its time limit when nothing comes.
func TestProgress(t *testing.T) {
	trs := newTransports(t, 2, nil)
	a := trs[1].Arena()
	inProgress := func() bool { return a.u32(a.ctl(1)+ctlWaiters).Load() > 0 }
	ctx := testCtx(t, 10*time.Second)
	tag := transport.P2PTag(4)
	for _, n := range []int{8, 4096, cmaMin, 1 << 20} {
		want := randBytes(n, 7)
		got := make([]byte, n)
		r := trs[1].PostRecv(0, tag, got)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Sent while the waiter waits in Progress.
			if !testutil.WaitUntil(10*time.Second, inProgress) {
				t.Error("the waiter never waited in Progress")
			}
			if err := trs[0].Send(ctx, 1, tag, want); err != nil {
				t.Error(err)
			}
		}()
		for {
			a.Progress(r.Done(), time.Now().Add(50*time.Millisecond))
			select {
			case <-r.Done():
			default:
				continue
			}
			break
		}
		wg.Wait()
		require.NoError(t, r.Err())
		require.Equal(t, want, got)
	}
	// Nothing arrives: Progress gives up at its limit, and a zero limit polls.
	r := trs[1].PostRecv(0, tag, make([]byte, 1))
	start := time.Now()
	a.Progress(r.Done(), start.Add(20*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	require.Less(t, time.Since(start), 2*time.Second)
	a.Progress(r.Done(), time.Time{})
	// Closing the arena ends a Progress wait.
	go func() {
		if !testutil.WaitUntil(10*time.Second, inProgress) {
			t.Error("the waiter never waited in Progress")
		}
		trs[1].Close()
	}()
	start = time.Now()
	a.Progress(r.Done(), start.Add(5*time.Second))
	require.Less(t, time.Since(start), 2*time.Second)
}
