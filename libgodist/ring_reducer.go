package libgodist

import "context"

// ringReducer reduces the ring's received segments on a goroutine of its
// own, so that the caller's thread goes straight back to reading the next
// segment off the wire: with a core per rank, receiving and reducing then
// overlap instead of taking turns (the sender, left waiting on a full
// socket while its peer reduced, was idle half the time). Used only when
// the host's ranks fit its cores (comm.spare) and a step has several
// segments. Jobs run in the order added; each reduced segment is queued for
// sending (in order) when its step forwards it.
type ringReducer struct {
	s    reduceSpec
	sq   *sendQueue
	jobs chan reduceJob
	// ended carries each step's number once its segments are reduced.
	ended  chan int
	failed chan struct{} // closed with err set when a reduction fails
	done   chan struct{} // closed when the goroutine has returned
	err    error
}

type reduceJob struct {
	step    int
	dst     []byte // reduced into
	src     []byte // the received segment
	forward bool   // queue dst for sending as step+1 once reduced
	end     bool   // no data: step's segments are all queued
}

func newRingReducer(s reduceSpec, sq *sendQueue, steps, segs int) *ringReducer {
	rr := &ringReducer{
		s:      s,
		sq:     sq,
		jobs:   make(chan reduceJob, steps*(segs+1)),
		ended:  make(chan int, steps),
		failed: make(chan struct{}),
		done:   make(chan struct{}),
	}
	go rr.run()
	return rr
}

func (rr *ringReducer) run() {
	defer close(rr.done)
	for j := range rr.jobs {
		if rr.err != nil {
			continue
		}
		if j.end {
			rr.ended <- j.step
			continue
		}
		if err := rr.s.combine(j.dst, j.src); err != nil {
			rr.err = err
			close(rr.failed)
			continue
		}
		if j.forward {
			rr.sq.push(uint16(j.step+1), j.dst)
		}
	}
}

// add queues the reduction of src into dst (never blocks: the queue holds
// the whole op).
func (rr *ringReducer) add(step int, dst, src []byte, forward bool) {
	rr.jobs <- reduceJob{step: step, dst: dst, src: src, forward: forward}
}

// endStep marks the end of step's segments.
func (rr *ringReducer) endStep(step int) { rr.jobs <- reduceJob{step: step, end: true} }

// waitStep waits until step's segments are reduced (their source buffers
// may then be reused), a reduction failed, or ctx ends.
func (rr *ringReducer) waitStep(ctx context.Context, step int, last *int) error {
	for *last < step {
		select {
		case s := <-rr.ended:
			*last = s
		case <-rr.failed:
			return rr.err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// finish waits until every queued job has run (or was skipped after a
// failure) and returns the first reduction error. Idempotent.
func (rr *ringReducer) finish() error {
	select {
	case <-rr.done:
	default:
		close(rr.jobs)
		<-rr.done
	}
	return rr.err
}
