package libgodist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// ErrNotArrived is wrapped by monitored barrier failures.
var ErrNotArrived = errors.New("did not arrive")

// monitoredBarrier is a barrier that tells who is late. Every rank sends an
// arrival token to rank 0, which waits for them until the deadline; on
// success rank 0 releases everyone with token 1. If some ranks are late,
// rank 0 reports them (the first late rank, or all of them with waitAll)
// and releases the others with token 0 so they fail at once too.
func monitoredBarrier(c *comm, waitAll bool, timeout time.Duration) error {
	if c.size == 1 {
		return nil
	}
	if c.rank != 0 {
		if err := c.send(0, 0, []byte{1}); err != nil {
			return err
		}
		var rel [1]byte
		if err := c.recv(0, 1, rel[:]); err != nil {
			return err
		}
		if rel[0] != 1 {
			return fmt.Errorf("monitored_barrier failed on rank 0: some ranks %w within %v (see rank 0's error)", ErrNotArrived, timeout)
		}
		return nil
	}
	tokens := make([][1]byte, c.size)
	rs := make([]*transport.Recv, c.size)
	for r := 1; r < c.size; r++ {
		rs[r] = c.post(r, 0, tokens[r][:])
	}
	// Rank 0 waits `timeout` for arrivals; the op's own deadline is longer
	// so the others can still hear the verdict.
	actx, cancelArrivals := context.WithTimeout(c.ctx, timeout)
	defer cancelArrivals()
	var late []int
	var firstErr error
	for r := 1; r < c.size; r++ {
		if len(late) > 0 && !waitAll {
			rs[r].Cancel(ErrNotArrived)
			continue
		}
		if err := rs[r].Wait(actx); err != nil {
			if !errors.Is(err, transport.ErrTimeout) {
				firstErr = err
			}
			late = append(late, r)
		}
	}
	release := []byte{1}
	if len(late) > 0 {
		release[0] = 0
	}
	// Release with a fresh short deadline: the op's own may have passed.
	ctx, cancel := context.WithTimeout(context.Background(), queryWait)
	defer cancel()
	for r := 1; r < c.size; r++ {
		_ = c.tr.Send(ctx, r, c.tag(1), release)
	}
	if firstErr != nil {
		return firstErr
	}
	if len(late) > 0 {
		what := fmt.Sprintf("rank %d", late[0])
		if waitAll {
			what = fmt.Sprintf("ranks %v", late)
		}
		return &monitoredError{msg: fmt.Sprintf("monitored_barrier: %s %v within %v", what, ErrNotArrived, timeout), late: late}
	}
	return nil
}

// monitoredError names the ranks that missed a monitored barrier.
type monitoredError struct {
	msg  string
	late []int
}

func (e *monitoredError) Error() string { return e.msg }
func (e *monitoredError) Unwrap() error { return ErrNotArrived }

// Timeout reports true: the late ranks missed the deadline.
func (e *monitoredError) Timeout() bool { return true }

// MonitoredBarrier is a barrier whose failure names the ranks that did not
// arrive within timeout (all of them if waitAll, else the first found).
func (pg *ProcessGroup) MonitoredBarrier(timeout time.Duration, waitAll bool) (*Work, error) {
	if timeout <= 0 {
		timeout = pg.Timeout()
	}
	return pg.submit("monitored_barrier", Opts{Timeout: timeout + 2*queryWait}, noData(transport.OpMonitoredBarrier), func(c *comm) error { return monitoredBarrier(c, waitAll, timeout) }), nil
}
