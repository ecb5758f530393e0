package mpi

import (
	"bytes"
	"fmt"
)

func (r *rankT) p2p() error {
	n := r.n
	next, prev := (r.rank+1)%n, (r.rank+n-1)%n
	// Any-source receive with tag 7, a specific-source receive with tag 9.
	rbuf, freeR := Alloc(64)
	defer freeR()
	rbuf9, freeR9 := Alloc(64)
	defer freeR9()
	recv9, err := r.l.Irecv(World, rbuf9, prev, 9)
	if err != nil {
		return fmt.Errorf("Irecv: %w", err)
	}
	recv, err := r.l.Irecv(World, rbuf, -1, 7)
	if err != nil {
		return fmt.Errorf("Irecv: %w", err)
	}
	s7, free7 := cbuf(pattern(10+r.rank, r.rank))
	defer free7()
	s9, free9 := cbuf(pattern(3, 100+r.rank))
	defer free9()
	send9, err := r.l.Isend(World, s9, next, 9)
	if err != nil {
		return fmt.Errorf("Isend: %w", err)
	}
	send7, err := r.l.Isend(World, s7, next, 7)
	if err != nil {
		return fmt.Errorf("Isend: %w", err)
	}
	src, nb, err := r.wait(recv)
	if err != nil {
		return fmt.Errorf("Irecv any source: %w", err)
	}
	if src != prev || nb != int64(10+prev) || !bytes.Equal(rbuf[:nb], pattern(10+prev, prev)) {
		r.fail("Irecv any source: source %d, %d bytes, want %d, %d", src, nb, prev, 10+prev)
	}
	src, nb, err = r.wait(recv9)
	if err != nil {
		return fmt.Errorf("Irecv tag 9: %w", err)
	}
	if src != prev || nb != 3 || !bytes.Equal(rbuf9[:3], pattern(3, 100+prev)) {
		r.fail("Irecv tag 9: source %d, %d bytes", src, nb)
	}
	for _, q := range []Request{send7, send9} {
		if _, _, err := r.wait(q); err != nil {
			return fmt.Errorf("Isend: %w", err)
		}
	}
	// A receive nobody matches, abandoned (cancelled).
	lost, err := r.l.Irecv(World, rbuf, -1, 12345)
	if err != nil {
		return fmt.Errorf("Irecv: %w", err)
	}
	if err := r.l.Abandon(lost); err != nil {
		r.fail("Abandon: %v", err)
	}
	if _, _, _, err := r.l.Test(lost); !isArgError(err) {
		r.fail("Test of an abandoned request: %v, want GM_ERR_ARG", err)
	}
	return nil
}
