package shm

// allReduceOneShot is the latency algorithm, one step and one
// synchronization: every rank copies its buffer into its step area (the
// inline part of its step block up to InlineSize bytes, else its data
// slot), publishes the step, waits for every peer's step, and reduces all
// Size areas in rank order into its own buffer. Each rank computes the
// same expression in the same order, so the results are bitwise identical.
//
// Memory traffic per rank: n bytes copied in, Size*n bytes read.
func (a *Arena) allReduceOneShot(c *opCtx, buf []byte, d desc, combine CombineFunc) error {
	s := a.step
	n := len(buf)
	inline := n <= InlineSize
	if err := a.waitFree(c, s); err != nil {
		return err
	}
	publish(a.area(a.rank, s, n, inline), buf)
	a.pubA(s, d)
	err := a.gatherA(c, s, d, true)
	if fatal(err) {
		return err
	}
	if err == nil && n > 0 {
		// buf holds this rank's own contribution: ranks 0 and 1 fold the
		// other of x0, x1 into it (combine is commutative), the others
		// start over from x0 (op) x1.
		switch a.rank {
		case 0:
			err = combine(buf, buf, a.area(1, s, n, inline))
		case 1:
			err = combine(buf, buf, a.area(0, s, n, inline)) // x1 op x0 == x0 op x1
		default:
			err = combine(buf, a.area(0, s, n, inline), a.area(1, s, n, inline))
		}
		for q := 2; q < a.size && err == nil; q++ {
			err = combine(buf, buf, a.area(q, s, n, inline))
		}
		if err != nil {
			err = combineErr(c.op, err)
		}
	}
	a.pubD(s)
	a.step = s + 1
	return err
}
