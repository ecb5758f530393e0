package main

/*
#include "godist.h"
*/
import "C"

import (
	"fmt"

	"github.com/godist/godist/libgodist"
)

// The two-buffer entry points: the input is the block's buffer (data,
// nbytes), the output its out and outbytes, and the op splits one of them
// into as many equal parts as the group has ranks (rank r's part at r
// times the part's size), as torch's all_gather_into_tensor,
// reduce_scatter_tensor and all_to_all_single without split sizes do.

// runCall2 runs f on the block's group, input and output, and stores the
// outcome as runCall does.
func runCall2(c *C.godist_call, f func(pg *libgodist.ProcessGroup, in, out []byte, o libgodist.Opts) (*libgodist.Work, error)) C.int {
	return runCall(c, func(pg *libgodist.ProcessGroup, in []byte, o libgodist.Opts) (*libgodist.Work, error) {
		out, err := viewBytes(c.out, int64(c.outbytes), "output buffer")
		if err != nil {
			return nil, err
		}
		return f(pg, in, out, o)
	})
}

// parts splits b into n equal parts; what names b in the error when its
// length is not a multiple of n.
func parts(b []byte, n int, op, what string) ([][]byte, error) {
	if n <= 0 || len(b)%n != 0 {
		return nil, fmt.Errorf("%w: %s: the %s's %d bytes do not split into %d equal parts", libgodist.ErrInvalid, op, what, len(b), n)
	}
	k := len(b) / n
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = b[i*k : (i+1)*k : (i+1)*k]
	}
	return ps, nil
}

// godist_call_allgather gathers every rank's input into the output, rank
// r's at r times the input's size.
//
//export godist_call_allgather
func godist_call_allgather(c *C.godist_call) C.int {
	return runCall2(c, func(pg *libgodist.ProcessGroup, in, out []byte, o libgodist.Opts) (*libgodist.Work, error) {
		outs, err := parts(out, pg.Size(), "allgather", "output")
		if err != nil {
			return nil, err
		}
		return pg.AllGather(in, outs, o)
	})
}

// godist_call_reduce_scatter reduces the ranks' inputs (dtype arg0, reduce
// op arg1) and leaves part r of the result in rank r's output.
//
//export godist_call_reduce_scatter
func godist_call_reduce_scatter(c *C.godist_call) C.int {
	return runCall2(c, func(pg *libgodist.ProcessGroup, in, out []byte, o libgodist.Opts) (*libgodist.Work, error) {
		ra, err := callReduce(c)
		if err != nil {
			return nil, err
		}
		ins, err := parts(in, pg.Size(), "reduce_scatter", "input")
		if err != nil {
			return nil, err
		}
		return pg.ReduceScatter(ins, out, ra, o)
	})
}

// godist_call_alltoall sends part r of the input to rank r and receives
// rank r's part for this rank into part r of the output.
//
//export godist_call_alltoall
func godist_call_alltoall(c *C.godist_call) C.int {
	return runCall2(c, func(pg *libgodist.ProcessGroup, in, out []byte, o libgodist.Opts) (*libgodist.Work, error) {
		ins, err := parts(in, pg.Size(), "alltoall", "input")
		if err != nil {
			return nil, err
		}
		outs, err := parts(out, pg.Size(), "alltoall", "output")
		if err != nil {
			return nil, err
		}
		return pg.AllToAll(ins, outs, o)
	})
}
