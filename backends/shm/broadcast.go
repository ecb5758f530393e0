package shm

import "context"

// Broadcast copies root's buf into every local rank's buf. Every rank must
// pass the same len(buf) and root: a rank whose size differs from the
// root's gets an error wrapping transport.ErrSizeMismatch (the arena stays
// usable); a different root is a desync.
//
// Protocol: the root copies chunk i (inline up to InlineSize bytes) into
// its step area of step s0+i and publishes the step; every other rank
// waits for it, copies it out and publishes D = s0+i. With two slot halves
// the root fills chunk i+1 while the others copy chunk i out, and waits
// (waitFree) only before reusing a half. Non-roots publish their own step
// block at s0 (descriptor only) so that a peer that disagrees about the
// root or the operation notices.
func (a *Arena) Broadcast(ctx context.Context, buf []byte, root int) error {
	const op = "broadcast"
	if root < 0 || root >= a.size {
		return invalidf("%s: root %d is out of range for %d local ranks", op, root, a.size)
	}
	c, err := a.begin(ctx, op)
	if err != nil {
		return err
	}
	if a.size == 1 {
		return a.end(nil)
	}
	return a.end(a.broadcast(&c, buf, root))
}

// broadcastSteps is the number of steps a broadcast of n bytes takes.
func (a *Arena) broadcastSteps(n int) int {
	if n <= InlineSize {
		return 1
	}
	return chunks(n, a.lay.chunk)
}

func (a *Arena) broadcast(c *opCtx, buf []byte, root int) error {
	if a.useSharedBroadcast(len(buf)) {
		return a.broadcastShared(c, buf, root) // broadcast_shared.go
	}
	n, me, piece := len(buf), a.rank, a.lay.chunk
	d := desc{kind: kindBroadcast, arg: uint32(root), n: uint64(n)}
	inline := n <= InlineSize
	steps := a.broadcastSteps(n)
	s0 := a.step
	at := func(i int) []byte {
		lo := i * piece
		return buf[lo:min(n, lo+piece)]
	}
	if me == root {
		for i := 0; i < steps; i++ {
			s := s0 + uint64(i)
			if err := a.waitFree(c, s); err != nil {
				return err
			}
			p := at(i)
			publish(a.area(me, s, len(p), inline), p)
			a.pubA(s, d)
		}
		a.pubD(s0 + uint64(steps) - 1)
		a.step = s0 + uint64(steps)
		return nil
	}
	if err := a.waitFree(c, s0); err != nil {
		return err
	}
	a.pubA(s0, d)
	for i := 0; i < steps; i++ {
		s := s0 + uint64(i)
		got, err := a.waitA(c, root, s)
		if err == nil {
			err = a.match(c, root, got, d, i == 0)
		}
		if err != nil {
			if fatal(err) {
				return err
			}
			// The root sends a different size: skip its steps.
			rs := uint64(a.broadcastSteps(int(got.n)))
			a.pubD(s0 + rs - 1)
			a.step = s0 + rs
			return err
		}
		p := at(i)
		copy(p, a.area(root, s, len(p), inline))
		a.pubD(s)
	}
	a.step = s0 + uint64(steps)
	return nil
}
