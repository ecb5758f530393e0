package shm

import (
	"errors"
	"time"
)

// p2pYieldOversubscribed caps the yield phase of point-to-point waits when
// the local ranks outnumber the cores.
const p2pYieldOversubscribed = 20 * time.Microsecond

// p2pPolicy is the wait policy of point-to-point waits. A message comes
// when its sender's program gets there, not within a collective step:
// when the ranks outnumber the cores (no spin phase), sleep early and leave
// the CPU to the ranks that have work.
func p2pPolicy(pol WaitPolicy) WaitPolicy {
	if pol.Spin == 0 {
		pol.Yield = min(pol.Yield, p2pYieldOversubscribed)
	}
	return pol
}

// errProgressDone ends a Progress wait that reached its time limit.
var errProgressDone = errors.New("progress: time limit")

// Progress reads point-to-point messages into the attached mailbox on the
// calling goroutine until done is closed, until passes, or the arena
// closes, following the wait policy on this rank's doorbell. A goroutine
// that is about to block for a receive calls it instead: the message is
// then read by the thread that wants it, without waking the receiver
// goroutine and handing the result back. Only one goroutine reads the
// rings at a time; while another does (the receiver goroutine or another
// Progress), this one waits for its doorbell, which the reader rings after
// each delivery. Peer failures are still detected and reported by the
// receiver goroutine. A zero until polls once.
func (a *Arena) Progress(done <-chan struct{}, until time.Time) {
	if a.enter("progress") != nil {
		return
	}
	defer a.exit()
	st := &a.p2p
	mb := st.mailbox()
	if mb == nil {
		return
	}
	waiters := a.u32(a.ctl(a.rank) + ctlWaiters)
	finished := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	try := func() bool {
		if finished() {
			return true
		}
		if st.role.TryLock() {
			if a.scan(mb, true) && waiters.Load() > 1 {
				a.kick() // another waiter's message may be among them
			}
			a.releaseRole()
		}
		return finished()
	}
	if try() || until.IsZero() {
		return
	}
	// While this rank has waiters, senders wake them and not the receiver
	// goroutine. The last to leave scans once more: a message published
	// before it left woke nobody else.
	waiters.Add(1)
	defer func() {
		waiters.Add(^uint32(0))
		if st.role.TryLock() {
			a.scan(mb, true)
			a.releaseRole()
		}
	}()
	bellOff := a.ctl(a.rank) + ctlBell
	_ = a.waitLoopWith(&a.p2pPol, try, (*uint32)(a.ptr(bellOff)), a.u32(bellOff+4), until,
		func(now time.Time, _ bool) error {
			if a.closing.Load() {
				return errClosed("progress")
			}
			if !now.Before(until) {
				return errProgressDone
			}
			return nil
		})
}

// releaseRole lets go of the receiving role taken by a waiter. If the
// waiter handed a streamed message to the receiver goroutine (scan with
// whole), it wakes the receiver once more now that the role is free: the
// wake-up that scan gave while still holding the role may have found the
// receiver failing to take it and about to sleep.
func (a *Arena) releaseRole() {
	a.p2p.role.Unlock()
	if a.p2p.streaming.Load() {
		a.wakeIdle()
	}
}
