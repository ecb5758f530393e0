package mpi

import (
	"bytes"
	"fmt"
)

func pattern(n, salt int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + salt*31 + 1)
	}
	return b
}

func (r *rankT) bcast() error {
	root := r.n / 2
	want := pattern(1000, root)
	buf, free := Alloc(len(want))
	defer free()
	if r.rank == root {
		copy(buf, want)
	}
	req, err := r.l.Ibcast(World, buf, root)
	if err != nil {
		return fmt.Errorf("Ibcast: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Ibcast: %w", err)
	}
	if !bytes.Equal(buf, want) {
		r.fail("Ibcast: wrong bytes")
	}
	// Blocking Bcast on Go memory.
	g := make([]byte, 16)
	if r.rank == 0 {
		copy(g, "rendezvous:1234")
	}
	if err := r.l.Bcast(World, g, 0); err != nil {
		return fmt.Errorf("Bcast: %w", err)
	}
	if string(g[:15]) != "rendezvous:1234" {
		r.fail("Bcast: got %q", g)
	}
	return nil
}

func (r *rankT) allgather() error {
	const n = 7
	in, freeIn := cbuf(pattern(n, r.rank))
	defer freeIn()
	out, freeOut := Alloc(n * r.n)
	defer freeOut()
	req, err := r.l.Iallgather(World, in, out)
	if err != nil {
		return fmt.Errorf("Iallgather: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Iallgather: %w", err)
	}
	for s := 0; s < r.n; s++ {
		if !bytes.Equal(out[s*n:(s+1)*n], pattern(n, s)) {
			r.fail("Iallgather: block %d wrong", s)
		}
	}
	return nil
}

// a2aCount is how many bytes rank from sends to rank to (0 included).
func a2aCount(from, to int) int64 { return int64((from + 2*to) % 4) }

func (r *rankT) alltoallv() error {
	n := r.n
	scounts, sdispls := make([]int64, n), make([]int64, n)
	rcounts, rdispls := make([]int64, n), make([]int64, n)
	var stotal, rtotal int64
	for s := 0; s < n; s++ {
		scounts[s], sdispls[s] = a2aCount(r.rank, s), stotal+1 // a gap byte before each block
		stotal += scounts[s] + 1
		rcounts[s], rdispls[s] = a2aCount(s, r.rank), rtotal
		rtotal += rcounts[s]
	}
	in, freeIn := Alloc(int(stotal))
	defer freeIn()
	for s := 0; s < n; s++ {
		for k := int64(0); k < scounts[s]; k++ {
			in[sdispls[s]+k] = byte(r.rank*16 + s + int(k)*64)
		}
	}
	out, freeOut := Alloc(int(rtotal) + 1)
	defer freeOut()
	req, err := r.l.Ialltoallv(World, in, scounts, sdispls, out, rcounts, rdispls)
	if err != nil {
		return fmt.Errorf("Ialltoallv: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Ialltoallv: %w", err)
	}
	for s := 0; s < n; s++ {
		for k := int64(0); k < rcounts[s]; k++ {
			if got, want := out[rdispls[s]+k], byte(s*16+r.rank+int(k)*64); got != want {
				r.fail("Ialltoallv: from %d byte %d = %d, want %d", s, k, got, want)
			}
		}
	}
	return nil
}

func (r *rankT) gatherScatter() error {
	n := r.n
	root := 1 % n
	counts, displs := make([]int64, n), make([]int64, n)
	var total int64
	for s := 0; s < n; s++ {
		counts[s], displs[s] = int64(s+1), total
		total += counts[s]
	}
	in, freeIn := cbuf(bytes.Repeat([]byte{byte(r.rank + 1)}, r.rank+1))
	defer freeIn()
	var out []byte
	if r.rank == root {
		var free func()
		out, free = Alloc(int(total))
		defer free()
	}
	req, err := r.l.Igatherv(World, in, out, counts, displs, root)
	if err != nil {
		return fmt.Errorf("Igatherv: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Igatherv: %w", err)
	}
	if r.rank == root {
		for s := 0; s < n; s++ {
			if want := bytes.Repeat([]byte{byte(s + 1)}, s+1); !bytes.Equal(out[displs[s]:displs[s]+counts[s]], want) {
				r.fail("Igatherv: block %d = %x, want %x", s, out[displs[s]:displs[s]+counts[s]], want)
			}
		}
	}

	// Iscatterv from rank 0: block s is s+2 bytes of pattern(s).
	var src []byte
	scounts, sdispls := make([]int64, n), make([]int64, n)
	total = 0
	for s := 0; s < n; s++ {
		scounts[s], sdispls[s] = int64(s+2), total
		total += scounts[s]
	}
	if r.rank == 0 {
		var free func()
		src, free = Alloc(int(total))
		defer free()
		for s := 0; s < n; s++ {
			copy(src[sdispls[s]:], pattern(s+2, s))
		}
	}
	dst, freeDst := Alloc(r.rank + 2)
	defer freeDst()
	req, err = r.l.Iscatterv(World, src, scounts, sdispls, dst, 0)
	if err != nil {
		return fmt.Errorf("Iscatterv: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Iscatterv: %w", err)
	}
	if !bytes.Equal(dst, pattern(r.rank+2, r.rank)) {
		r.fail("Iscatterv: got %x", dst)
	}
	return nil
}

func (r *rankT) barrier() error {
	req, err := r.l.Ibarrier(World)
	if err != nil {
		return fmt.Errorf("Ibarrier: %w", err)
	}
	_, _, err = r.wait(req)
	return err
}
