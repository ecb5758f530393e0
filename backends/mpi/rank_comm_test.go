package mpi

import (
	"encoding/binary"
	"fmt"

	"github.com/godist/godist/libgodist/reduce"
)

func (r *rankT) subComm() error {
	if r.n < 3 {
		return nil
	}
	if r.rank != 0 && r.rank != 2 {
		if _, err := r.l.CommCreate([]int{0, 2}, 5); !isArgError(err) {
			r.fail("CommCreate without this rank: %v, want GM_ERR_ARG", err)
		}
		return nil
	}
	c, err := r.l.CommCreate([]int{0, 2}, 5)
	if err != nil {
		return fmt.Errorf("CommCreate: %w", err)
	}
	buf, free := Alloc(4)
	defer free()
	binary.LittleEndian.PutUint32(buf, uint32(r.rank+1))
	req, err := r.l.Iallreduce(c, buf, 1, reduce.Int32, reduce.Sum)
	if err != nil {
		return fmt.Errorf("Iallreduce on the sub-communicator: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return err
	}
	if v := binary.LittleEndian.Uint32(buf); v != 4 {
		r.fail("Iallreduce on {0, 2}: %d, want 4", v)
	}
	// Ranks of the sub-communicator: world 2 is rank 1 there.
	g := make([]byte, 4)
	if r.rank == 2 {
		copy(g, "sub!")
	}
	if err := r.l.Bcast(c, g, 1); err != nil || string(g) != "sub!" {
		r.fail("Bcast on {0, 2} from its rank 1: %q %v", g, err)
	}
	return nil
}
