package main

/*
#include "godist.h"
*/
import "C"

import (
	"fmt"

	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/libgodist/gosched"
	"github.com/godist/godist/libgodist/reduce"
)

// One entry point per op, each taking a godist_op (godist.h). Each one
// reads its fields, calls the libgodist method and stores the work's
// handle in op->work; no logic lives here. A synchronous op (no
// GODIST_ASYNC) may run inline on the caller's thread, and if it completed
// during the call it returns its outcome directly and no handle (work 0);
// an op on CUDA memory always gets a handle (device.go). An asynchronous
// op's handle is pushed to the completion queue
// (godist_wait_any) once godist_work_watch asks for it.

// opFunc is an op's body: the group, the block, and the per-call options.
type opFunc func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error)

// runOp runs f on the block's group and stores the outcome; with
// GODIST_CUDA it runs the device op name instead (device.go). A NULL block
// gets statusInvalid, with nowhere to put a message.
func runOp(c *C.godist_op, name string, f opFunc) (rc C.int) {
	if c == nil {
		return statusInvalid
	}
	errbuf, errlen := c.errbuf, c.errlen
	defer recoverTo(&rc, errbuf, errlen)
	c.work = 0
	pg, err := group(c.pg, c.flags)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	if c.flags&C.GODIST_CUDA != 0 {
		return runDevice(pg, c, name)
	}
	w, err := f(pg, c, opts(c))
	return submitted(w, err, c.flags, &c.work, errbuf, errlen)
}

// submitted registers w and returns its handle through out. A synchronous
// work that has already completed gets no handle: *out is 0 and the return
// value is the op's outcome.
func submitted(w *libgodist.Work, err error, flags C.int32_t, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) C.int {
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	if flags&C.GODIST_ASYNC == 0 {
		select {
		case <-w.Done():
			*out = 0
			return finish(w.Err(), errbuf, errlen)
		default:
		}
	}
	*out = C.uint64_t(handles.put(w))
	return statusOK
}

// group looks up a process group for an op called with flags, refusing
// flags godist.h does not define.
func group(h C.uint64_t, flags C.int32_t) (*libgodist.ProcessGroup, error) {
	gosched.Tick() // see libgodist/gosched
	if flags&^C.GODIST_FLAGS != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", libgodist.ErrInvalid, int32(flags&^C.GODIST_FLAGS))
	}
	return lookup[*libgodist.ProcessGroup](uint64(h))
}

// opts builds the per-call options: a synchronous op may run inline on the
// caller's thread; an asynchronous one may wait for its waiter
// (executor.runQueued). The dtype and the description of the tensors go
// into the op's fingerprint (desync checks).
func opts(c *C.godist_op) libgodist.Opts {
	async := c.flags&C.GODIST_ASYNC != 0
	o := libgodist.Opts{Timeout: millis(c.timeout_ms), Inline: !async, Deferrable: async}
	if dt := reduce.DType(c.dtype); c.dtype >= 0 && dt.Valid() {
		o.DType, o.Typed = dt, true
	}
	if c.detail != nil {
		o.Detail = C.GoString(c.detail)
	}
	return o
}

// reduction is the block's dtype, reduce op and factor.
func reduction(c *C.godist_op) libgodist.ReduceArgs {
	return libgodist.ReduceArgs{DType: reduce.DType(c.dtype), Op: reduce.Op(c.reduce_op), Factor: float64(c.factor)}
}

// buf is the block's buffer.
func buf(c *C.godist_op) ([]byte, error) { return bytesOf(&c.buf, "buffer") }

// out is the block's output buffer.
func out(c *C.godist_op) ([]byte, error) { return bytesOf(&c.out, "output buffer") }

// perRank is one buffer per rank of pg: the list (p, n) if n > 0, else b
// (what: "input" or "output") split into equal parts, rank r's part at r
// times the part's size.
func perRank(pg *libgodist.ProcessGroup, p *C.godist_buf, n C.int32_t, b *C.godist_buf, op, what string) ([][]byte, error) {
	if n > 0 {
		return listOf(p, n, what+" list")
	}
	whole, err := bytesOf(b, what+" buffer")
	if err != nil {
		return nil, err
	}
	return parts(whole, pg.Size(), op, what)
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

//export godist_allreduce
func godist_allreduce(c *C.godist_op) C.int {
	return runOp(c, "allreduce", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		b, err := buf(c)
		if err != nil {
			return nil, err
		}
		return pg.AllReduce(b, reduction(c), o)
	})
}

//export godist_broadcast
func godist_broadcast(c *C.godist_op) C.int {
	return runOp(c, "broadcast", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		b, err := buf(c)
		if err != nil {
			return nil, err
		}
		return pg.Broadcast(b, int(c.root), o)
	})
}

//export godist_reduce
func godist_reduce(c *C.godist_op) C.int {
	return runOp(c, "reduce", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		b, err := buf(c)
		if err != nil {
			return nil, err
		}
		return pg.Reduce(b, int(c.root), reduction(c), o)
	})
}

// godist_allgather gathers every rank's buf into outs (or out split
// evenly), rank r's into part r.
//
//export godist_allgather
func godist_allgather(c *C.godist_op) C.int {
	return runOp(c, "allgather", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		in, err := buf(c)
		if err != nil {
			return nil, err
		}
		outs, err := perRank(pg, c.outs, c.nouts, &c.out, "allgather", "output")
		if err != nil {
			return nil, err
		}
		return pg.AllGather(in, outs, o)
	})
}

// godist_gather gathers every rank's buf into the root's outs.
//
//export godist_gather
func godist_gather(c *C.godist_op) C.int {
	return runOp(c, "gather", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		in, err := buf(c)
		if err != nil {
			return nil, err
		}
		outs, err := listOf(c.outs, c.nouts, "output list")
		if err != nil {
			return nil, err
		}
		return pg.Gather(in, outs, int(c.root), o)
	})
}

// godist_reduce_scatter reduces the ranks' ins (or buf split evenly) and
// leaves part r of the result in rank r's out.
//
//export godist_reduce_scatter
func godist_reduce_scatter(c *C.godist_op) C.int {
	return runOp(c, "reduce_scatter", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		res, err := out(c)
		if err != nil {
			return nil, err
		}
		ins, err := perRank(pg, c.ins, c.nins, &c.buf, "reduce_scatter", "input")
		if err != nil {
			return nil, err
		}
		return pg.ReduceScatter(ins, res, reduction(c), o)
	})
}

// godist_scatter sends the root's ins[r] to rank r's out.
//
//export godist_scatter
func godist_scatter(c *C.godist_op) C.int {
	return runOp(c, "scatter", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		res, err := out(c)
		if err != nil {
			return nil, err
		}
		ins, err := listOf(c.ins, c.nins, "input list")
		if err != nil {
			return nil, err
		}
		return pg.Scatter(ins, res, int(c.root), o)
	})
}

// godist_alltoall sends input part r to rank r and receives rank r's part
// for this rank into output part r; each side is a list or its buffer
// split evenly.
//
//export godist_alltoall
func godist_alltoall(c *C.godist_op) C.int {
	return runOp(c, "alltoall", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		ins, err := perRank(pg, c.ins, c.nins, &c.buf, "alltoall", "input")
		if err != nil {
			return nil, err
		}
		outs, err := perRank(pg, c.outs, c.nouts, &c.out, "alltoall", "output")
		if err != nil {
			return nil, err
		}
		return pg.AllToAll(ins, outs, o)
	})
}

//export godist_barrier
func godist_barrier(c *C.godist_op) C.int {
	return runOp(c, "barrier", func(pg *libgodist.ProcessGroup, _ *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		return pg.Barrier(o)
	})
}

// godist_monitored_barrier is a barrier whose failure on rank 0 names the
// ranks that did not arrive within timeout_ms (all of them if wait_all).
//
//export godist_monitored_barrier
func godist_monitored_barrier(c *C.godist_op) C.int {
	return runOp(c, "monitored_barrier", func(pg *libgodist.ProcessGroup, c *C.godist_op, _ libgodist.Opts) (*libgodist.Work, error) {
		return pg.MonitoredBarrier(millis(c.timeout_ms), c.wait_all != 0)
	})
}

//export godist_send
func godist_send(c *C.godist_op) C.int {
	return runOp(c, "send", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		b, err := buf(c)
		if err != nil {
			return nil, err
		}
		return pg.Send(b, int(c.peer), int64(c.tag), o)
	})
}

// godist_recv receives into buf from peer, or from any rank if peer is -1.
//
//export godist_recv
func godist_recv(c *C.godist_op) C.int {
	return runOp(c, "recv", func(pg *libgodist.ProcessGroup, c *C.godist_op, o libgodist.Opts) (*libgodist.Work, error) {
		b, err := buf(c)
		if err != nil {
			return nil, err
		}
		return pg.Recv(b, int(c.peer), int64(c.tag), o)
	})
}
