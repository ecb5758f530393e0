package main

/*
#include "godist.h"
*/
import "C"

import (
	"fmt"

	"github.com/godist/godist/libgodist"
)

// The godist_call_* functions are godist_allreduce, godist_broadcast,
// godist_barrier, godist_send and godist_recv with their arguments in a
// godist_call block (no reduce factor: PREMUL_SUM takes godist_allreduce),
// and godist_work_wait with godist_work_free. They exist for the Python
// fast paths: converting ten ctypes arguments cost more than the rest of a
// small synchronous all_reduce's Python side. The two-buffer ones
// (call_2buf.go) take the tensor-to-tensor forms of allgather,
// reduce_scatter and alltoall, with even splits.

// callBlock reads a block's buffer and error buffer.
func callBlock(c *C.godist_call) (buf []byte, errbuf *C.char, errlen C.int32_t, err error) {
	errbuf, errlen = callErr(c)
	buf, err = viewBytes(c.data, int64(c.nbytes), "buffer")
	return buf, errbuf, errlen, err
}

// callErr is a block's error buffer.
func callErr(c *C.godist_call) (*C.char, C.int32_t) {
	return c.errbuf, C.int32_t(min(max(int64(c.errlen), 0), 1<<30))
}

// runCall runs f on the block's group and buffer and stores the outcome.
// A NULL block gets statusInvalid, with nowhere to put a message.
func runCall(c *C.godist_call, f func(*libgodist.ProcessGroup, []byte, libgodist.Opts) (*libgodist.Work, error)) (rc C.int) {
	if c == nil {
		return statusInvalid
	}
	b, errbuf, errlen, err := callBlock(c)
	defer recoverTo(&rc, errbuf, errlen)
	c.work = 0
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	flags := C.int32_t(c.flags)
	if int64(c.flags) != int64(flags) {
		flags = -1 // no such flags: group refuses them
	}
	pg, err := group(c.pg, flags)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	w, err := f(pg, b, opts(C.int64_t(c.timeout_ms), flags))
	return submitted(w, err, flags, &c.work, errbuf, errlen)
}

// int32Arg narrows a block field that the op takes as an int32 (a rank, a
// dtype or op code), refusing values that do not fit.
func int32Arg(v C.int64_t, what string) (int, error) {
	if int64(v) != int64(int32(v)) {
		return 0, fmt.Errorf("%w: %s %d out of range", libgodist.ErrInvalid, what, int64(v))
	}
	return int(v), nil
}

// callReduce reads a block's dtype (arg0) and reduce op (arg1).
func callReduce(c *C.godist_call) (libgodist.ReduceArgs, error) {
	dt, err := int32Arg(c.arg0, "dtype")
	if err != nil {
		return libgodist.ReduceArgs{}, err
	}
	op, err := int32Arg(c.arg1, "reduce op")
	if err != nil {
		return libgodist.ReduceArgs{}, err
	}
	return reduceArgs(C.int32_t(dt), C.int32_t(op), 0), nil
}

//export godist_call_allreduce
func godist_call_allreduce(c *C.godist_call) C.int {
	return runCall(c, func(pg *libgodist.ProcessGroup, b []byte, o libgodist.Opts) (*libgodist.Work, error) {
		ra, err := callReduce(c)
		if err != nil {
			return nil, err
		}
		return pg.AllReduce(b, ra, o)
	})
}

//export godist_call_broadcast
func godist_call_broadcast(c *C.godist_call) C.int {
	return runCall(c, func(pg *libgodist.ProcessGroup, b []byte, o libgodist.Opts) (*libgodist.Work, error) {
		root, err := int32Arg(c.arg0, "root rank")
		if err != nil {
			return nil, err
		}
		return pg.Broadcast(b, root, o)
	})
}

//export godist_call_barrier
func godist_call_barrier(c *C.godist_call) C.int {
	return runCall(c, func(pg *libgodist.ProcessGroup, _ []byte, o libgodist.Opts) (*libgodist.Work, error) {
		return pg.Barrier(o)
	})
}

//export godist_call_send
func godist_call_send(c *C.godist_call) C.int {
	return runCall(c, func(pg *libgodist.ProcessGroup, b []byte, o libgodist.Opts) (*libgodist.Work, error) {
		peer, err := int32Arg(c.arg0, "destination rank")
		if err != nil {
			return nil, err
		}
		return pg.Send(b, peer, int64(c.arg1), o)
	})
}

// godist_call_recv receives from peer arg0, or from any rank if it is -1.
//
//export godist_call_recv
func godist_call_recv(c *C.godist_call) C.int {
	return runCall(c, func(pg *libgodist.ProcessGroup, b []byte, o libgodist.Opts) (*libgodist.Work, error) {
		peer, err := int32Arg(c.arg0, "source rank")
		if err != nil {
			return nil, err
		}
		return pg.Recv(b, peer, int64(c.arg1), o)
	})
}

// godist_call_work_wait waits up to timeout_ms (0 polls) for the work whose
// handle is in work. It returns statusNotReady if the work has not
// completed, leaving the handle as it was; else it frees the handle
// (godist_work_free), stores the sender's rank of a receive in arg0 (-1
// for other ops) and returns the work's outcome.
//
//export godist_call_work_wait
func godist_call_work_wait(c *C.godist_call) (rc C.int) {
	if c == nil {
		return statusInvalid
	}
	errbuf, errlen := callErr(c)
	defer recoverTo(&rc, errbuf, errlen)
	w, done, err := waitWork(uint64(c.work), int64(c.timeout_ms))
	if !done {
		return statusNotReady
	}
	if w != nil {
		c.arg0 = C.int64_t(w.Source())
		freeWork(uint64(c.work))
	}
	return finish(err, errbuf, errlen)
}
