package hier

import "context"

// pipeline runs n segments through up to three stages: before(s) on this
// goroutine (a host stage), cross(x, s) on a goroutine of its own (the
// cross-host stage, in segment order), after(s) on this goroutine once
// segment s has crossed. Host stages of one segment overlap the crossing
// of another; a nil stage is skipped. On an error it stops the crossing
// goroutine, waits for it and returns the first error.
func (o *Offload) pipeline(ctx context.Context, x *xfer, n int, cross func(*xfer, int) error, before, after func(int) error) error {
	if n == 1 {
		for _, f := range []func() error{
			func() error { return call(before, 0) },
			func() error { return cross(x, 0) },
			func() error { return call(after, 0) },
		} {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x.ctx = cctx
	ready, crossed, exited := make(chan int, n), make(chan error, n), make(chan struct{})
	go func() {
		defer close(exited)
		for s := range ready {
			crossed <- cross(x, s)
		}
	}()
	stop := func(err error) error {
		cancel(err)
		<-exited
		return err
	}
	for s := range n {
		if err := call(before, s); err != nil {
			close(ready)
			return stop(err)
		}
		ready <- s
	}
	close(ready)
	for s := range n {
		if err := <-crossed; err != nil {
			return stop(err)
		}
		if err := call(after, s); err != nil {
			return stop(err)
		}
	}
	<-exited
	return nil
}

func call(f func(int) error, s int) error {
	if f == nil {
		return nil
	}
	return f(s)
}
