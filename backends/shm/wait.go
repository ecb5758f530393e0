package shm

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/gosched"
	"github.com/godist/godist/libgodist/transport"
)

// The wait policy. A rank that needs a word a peer publishes goes through
// three phases, each bounded by WaitPolicy:
//
//  1. Spin (only when the local ranks fit on the CPUs): poll the word with
//     a CPU pause hint for WaitPolicy.Spin. A peer that is running on
//     another core answers within a cache-line transfer (~0.1 µs).
//  2. Yield: poll, then the sched_yield syscall, for WaitPolicy.Yield. When ranks outnumber cores this hands the core to
//     the very rank being waited for, which is what makes 8 ranks on 2
//     cores fast; pure spinning would keep it off the CPU for a whole time
//     slice.
//  3. Sleep: register in the owner's sleeper count for the word, re-check,
//     and FUTEX_WAIT on the word's low 32 bits for at most WaitPolicy.Sleep.
//     The owner, after each publish, issues FUTEX_WAKE only when the
//     sleeper count is non-zero, so publishing costs one load when nobody
//     sleeps. (Both sides use sequentially consistent atomics: either the
//     owner sees the count or the sleeper sees the new value.)
//
// Between polls the waiter checks, in this order: this rank closing, the
// deadline, the context, the awaited peer's state word (closed or failed),
// and every WaitPolicy.Liveness whether the peer's process still exists
// (pidfd, else kill(pid, 0)). A sleeping waiter wakes at least every
// WaitPolicy.Sleep to do so, and Close wakes every word at once.

// opCtx is an operation's name and its way out: the context and its
// deadline (zero when none). Waits poll the context's Err rather than
// select on its Done channel, which some contexts make only when asked
// for (libgodist's per-op context).
type opCtx struct {
	ctx   context.Context
	op    string
	dl    time.Time
	first uint64 // a collective's first step (agree.go); 0 for others
}

func newOpCtx(ctx context.Context, op string) opCtx {
	c := opCtx{ctx: ctx, op: op}
	c.dl, _ = ctx.Deadline()
	return c
}

// await waits until the 64-bit counter at off, owned by local rank q, is
// at least target, and returns the value it saw. sleepIdx is the counter's
// slot in q's sleeper counts.
func (a *Arena) await(c *opCtx, q, off, sleepIdx int, target uint64) (uint64, error) {
	w := a.u64(off)
	if v := w.Load(); v >= target && v < poisonBit {
		return v, nil
	}
	if c.first != 0 && a.poisonFails {
		// A peer gave up on this collective (agree.go): so does this rank.
		return a.giveUp(c, w, off, target, a.poison)
	}
	// A poisoned word is never published: wait on as for a rank that is
	// late (and give up in turn). But a step block poisoned by a rank
	// that waited for the next step of its parity still holds the step
	// before, which is target (readers are never further behind: waitFree).
	var v uint64
	err := a.waitLoop(func() bool {
		v = w.Load()
		return v >= target && (v < poisonBit || sleepIdx <= sleepBlk0+1 && v&poisonStepMask == target+2)
	}, a.low(off), a.sleepers(q, sleepIdx), c.dl,
		func(now time.Time, live bool) error { return a.checkWait(c, q, now, live) })
	if err != nil {
		return a.giveUp(c, w, off, target, err)
	}
	if v >= poisonBit {
		v = target
	}
	return v, nil
}

// checkWait is the periodic check of a collective or send waiting for q.
func (a *Arena) checkWait(c *opCtx, q int, now time.Time, live bool) error {
	if a.closing.Load() {
		return errClosed(c.op)
	}
	if !c.dl.IsZero() && !now.Before(c.dl) {
		return &transport.PeerError{Op: c.op, Peer: a.globalRank(q),
			Err: fmt.Errorf("%w: waiting for local rank %d", transport.ErrTimeout, q)}
	}
	if c.ctx.Err() != nil {
		return &transport.PeerError{Op: c.op, Peer: a.globalRank(q), Err: ctxErr(c.ctx)}
	}
	if live {
		if err := a.crossCheck(c.op, q); err != nil {
			return err
		}
	}
	return a.peerErr(c.op, q, live)
}

// waitLoop runs the wait policy until ready reports true, or check (called
// between polls with the time and whether a liveness check is due) returns
// an error. word is the 32-bit futex word that changes whenever ready may
// become true, and sleepers the count its owner reads before waking it.
// deadline (zero: none) caps the sleeps.
func (a *Arena) waitLoop(ready func() bool, word *uint32, sleepers *atomic.Uint32, deadline time.Time,
	check func(now time.Time, live bool) error) error {
	return a.waitLoopWith(&a.pol, ready, word, sleepers, deadline, check)
}

// waitLoopWith is waitLoop under the policy pol.
func (a *Arena) waitLoopWith(pol *WaitPolicy, ready func() bool, word *uint32, sleepers *atomic.Uint32, deadline time.Time,
	check func(now time.Time, live bool) error) error {
	start := time.Now()
	a.spread(start)
	if pol.Spin > 0 {
		for i := 1; ; i++ {
			if ready() {
				return nil
			}
			pause()
			if i%128 == 0 && (time.Since(start) >= pol.Spin || a.closing.Load()) {
				break
			}
		}
	}
	nextLive := start.Add(pol.Liveness)
	var tick gosched.Ticker
	for {
		now := time.Now()
		live := !now.Before(nextLive)
		if live {
			nextLive = now.Add(pol.Liveness)
		}
		if err := check(now, live); err != nil {
			if ready() {
				return nil
			}
			return err
		}
		tick.Tick(now) // see libgodist/gosched
		if now.Sub(start) < pol.Spin+pol.Yield {
			a.yield()
		} else {
			d := min(pol.Sleep, nextLive.Sub(now))
			if !deadline.IsZero() {
				d = min(d, deadline.Sub(now)+time.Microsecond)
			}
			sleepers.Add(1)
			v := atomic.LoadUint32(word)
			if ready() {
				sleepers.Add(^uint32(0))
				return nil
			}
			futexWait(word, v, d)
			sleepers.Add(^uint32(0))
		}
		if ready() {
			return nil
		}
	}
}

// yield gives the CPU to another thread. When other local ranks run as
// goroutines of this process and may lack a P of their own, it yields to
// the Go scheduler first. (Only then: runtime.Gosched wakes an idle thread
// to take the goroutine, which costs more than the yield itself.)
func (a *Arena) yield() {
	if a.sameProc > 1 && runtime.GOMAXPROCS(0) < a.sameProc {
		runtime.Gosched()
	}
	schedYield()
}
