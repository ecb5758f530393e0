package shm

import "context"

// Barrier returns once every local rank has entered it. Protocol: publish
// a step block with no payload, wait for every peer's, publish D. Cost:
// one synchronization, the same as a one-shot all-reduce of 0 bytes.
func (a *Arena) Barrier(ctx context.Context) error {
	c, err := a.begin(ctx, "barrier")
	if err != nil {
		return err
	}
	if a.size == 1 {
		return a.end(nil)
	}
	s := a.step
	d := desc{kind: kindBarrier}
	if err := a.waitFree(&c, s); err != nil {
		return a.end(err)
	}
	a.pubA(s, d)
	if err := a.gatherA(&c, s, d, true); err != nil {
		return a.end(err)
	}
	a.pubD(s)
	a.step = s + 1
	return a.end(nil)
}
