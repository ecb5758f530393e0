package shm

import (
	"errors"
	"time"
)

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
			if a.scan(mb) && st.assisting.Load() > 1 {
				a.kick() // another waiter's message may be among them
			}
			st.role.Unlock()
		}
		return finished()
	}
	if try() || until.IsZero() {
		return
	}
	st.assisting.Add(1)
	defer func() {
		if st.assisting.Add(-1) == 0 && st.parked.Load() {
			a.kick()
		}
	}()
	bellOff := a.ctl(a.rank) + ctlBell
	_ = a.waitLoop(try, (*uint32)(a.ptr(bellOff)), a.u32(bellOff+4), until,
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
