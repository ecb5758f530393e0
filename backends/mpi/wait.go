package mpi

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// MPI requests cannot be cancelled (a receive can, a collective cannot), so
// waiting for one polls MPI_Test until it completes or the caller's
// deadline passes. A non-blocking collective advances only inside MPI
// calls, so polling spins for spinFor (most collectives end within it),
// then backs off to sleeps of up to maxNap, so a long wait costs little CPU
// on few cores.
const (
	spinFor = 2 * time.Millisecond
	maxNap  = 200 * time.Microsecond
)

// abandoned keeps the buffers of requests given up on at a deadline: MPI
// may still write into them, so they must never be freed or reused.
var abandoned struct {
	sync.Mutex
	bufs [][]byte
}

func keepForever(bufs ...[]byte) {
	abandoned.Lock()
	abandoned.bufs = append(abandoned.bufs, bufs...)
	abandoned.Unlock()
}

// waitAll waits for every request of reqs (what names the call in errors)
// within ctx. On a deadline or an error the requests left are abandoned
// and keep lists the buffers MPI may still use.
func (l *Lib) waitAll(ctx context.Context, what string, reqs []Request, keep ...[]byte) error {
	left := append([]Request(nil), reqs...)
	start := time.Now()
	nap := 10 * time.Microsecond
	for len(left) > 0 {
		n := 0
		for _, r := range left {
			done, _, _, err := l.Test(r)
			if err != nil {
				l.abandon(left, r)
				keepForever(keep...)
				return fmt.Errorf("%s: %w", what, err)
			}
			if !done {
				left[n] = r
				n++
			}
		}
		left = left[:n]
		if n == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			l.abandon(left, 0)
			keepForever(keep...)
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("%w: %s did not complete (MPI cannot cancel it; the group is broken)",
					transport.ErrTimeout, what)
			}
			return fmt.Errorf("%s: %w", what, context.Cause(ctx))
		}
		if time.Since(start) < spinFor {
			runtime.Gosched()
			continue
		}
		t := time.NewTimer(nap)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if nap < maxNap {
			nap *= 2
		}
	}
	return nil
}

// abandon gives up on every request of rs but skip (0 for none).
func (l *Lib) abandon(rs []Request, skip Request) {
	for _, r := range rs {
		if r != skip {
			_ = l.Abandon(r)
		}
	}
}
