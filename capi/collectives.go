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

// Every collective below: looks up the group, views the caller's buffers,
// calls the libgodist method and stores the Work handle in *work. flags
// holds GODIST_* flags (godist.h). A synchronous op (no GODIST_ASYNC) may
// run inline on the caller's thread, and if it completed during the call
// it returns its outcome directly and no handle (*work = 0). An
// asynchronous op's handle is pushed to the completion queue
// (godist_wait_any) once godist_work_watch asks for it. No logic lives
// here.

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
			if out != nil {
				*out = 0
			}
			return finish(w.Err(), errbuf, errlen)
		default:
		}
	}
	h := handles.put(w)
	if out != nil {
		*out = C.uint64_t(h)
	}
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

func reduceArgs(dtype, op C.int32_t, factor C.double) libgodist.ReduceArgs {
	return libgodist.ReduceArgs{DType: reduce.DType(dtype), Op: reduce.Op(op), Factor: float64(factor)}
}

//export godist_allreduce
func godist_allreduce(h C.uint64_t, buf *C.godist_buf, dtype, op C.int32_t, factor C.double, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return run1(h, buf, flags, work, errbuf, errlen, func(pg *libgodist.ProcessGroup, b []byte) (*libgodist.Work, error) {
		return pg.AllReduce(b, reduceArgs(dtype, op, factor), opts(timeoutMs, flags))
	})
}

//export godist_broadcast
func godist_broadcast(h C.uint64_t, buf *C.godist_buf, root C.int32_t, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return run1(h, buf, flags, work, errbuf, errlen, func(pg *libgodist.ProcessGroup, b []byte) (*libgodist.Work, error) {
		return pg.Broadcast(b, int(root), opts(timeoutMs, flags))
	})
}

//export godist_reduce
func godist_reduce(h C.uint64_t, buf *C.godist_buf, root, dtype, op C.int32_t, factor C.double, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return run1(h, buf, flags, work, errbuf, errlen, func(pg *libgodist.ProcessGroup, b []byte) (*libgodist.Work, error) {
		return pg.Reduce(b, int(root), reduceArgs(dtype, op, factor), opts(timeoutMs, flags))
	})
}

//export godist_allgather
func godist_allgather(h C.uint64_t, in *C.godist_buf, outs *C.godist_buf, nouts C.int32_t, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return runIO(h, in, outs, nouts, flags, work, errbuf, errlen, func(pg *libgodist.ProcessGroup, i []byte, o [][]byte) (*libgodist.Work, error) {
		return pg.AllGather(i, o, opts(timeoutMs, flags))
	})
}

//export godist_gather
func godist_gather(h C.uint64_t, in *C.godist_buf, outs *C.godist_buf, nouts C.int32_t, root C.int32_t, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return runIO(h, in, outs, nouts, flags, work, errbuf, errlen, func(pg *libgodist.ProcessGroup, i []byte, o [][]byte) (*libgodist.Work, error) {
		return pg.Gather(i, o, int(root), opts(timeoutMs, flags))
	})
}

//export godist_reduce_scatter
func godist_reduce_scatter(h C.uint64_t, ins *C.godist_buf, nins C.int32_t, out *C.godist_buf, dtype, op C.int32_t, factor C.double, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return runIO(h, out, ins, nins, flags, work, errbuf, errlen, func(pg *libgodist.ProcessGroup, o []byte, i [][]byte) (*libgodist.Work, error) {
		return pg.ReduceScatter(i, o, reduceArgs(dtype, op, factor), opts(timeoutMs, flags))
	})
}

//export godist_scatter
func godist_scatter(h C.uint64_t, ins *C.godist_buf, nins C.int32_t, out *C.godist_buf, root C.int32_t, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return runIO(h, out, ins, nins, flags, work, errbuf, errlen, func(pg *libgodist.ProcessGroup, o []byte, i [][]byte) (*libgodist.Work, error) {
		return pg.Scatter(i, o, int(root), opts(timeoutMs, flags))
	})
}

//export godist_alltoall
func godist_alltoall(h C.uint64_t, ins *C.godist_buf, nins C.int32_t, outs *C.godist_buf, nouts C.int32_t, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := group(h, flags)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	i, err := listOf(ins, nins, "inputs")
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	o, err := listOf(outs, nouts, "outputs")
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	w, err := pg.AllToAll(i, o, opts(timeoutMs, flags))
	return submitted(w, err, flags, work, errbuf, errlen)
}

//export godist_barrier
func godist_barrier(h C.uint64_t, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := group(h, flags)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	w, err := pg.Barrier(opts(timeoutMs, flags))
	return submitted(w, err, flags, work, errbuf, errlen)
}

//export godist_send
func godist_send(h C.uint64_t, buf *C.godist_buf, peer C.int32_t, tag C.int64_t, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return run1(h, buf, flags, work, errbuf, errlen, func(pg *libgodist.ProcessGroup, b []byte) (*libgodist.Work, error) {
		return pg.Send(b, int(peer), int64(tag), opts(timeoutMs, flags))
	})
}

// godist_recv receives into buf from peer, or from any rank if peer is -1.
//
//export godist_recv
func godist_recv(h C.uint64_t, buf *C.godist_buf, peer C.int32_t, tag C.int64_t, timeoutMs C.int64_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return run1(h, buf, flags, work, errbuf, errlen, func(pg *libgodist.ProcessGroup, b []byte) (*libgodist.Work, error) {
		return pg.Recv(b, int(peer), int64(tag), opts(timeoutMs, flags))
	})
}

func run1(h C.uint64_t, buf *C.godist_buf, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t,
	f func(*libgodist.ProcessGroup, []byte) (*libgodist.Work, error)) C.int {
	pg, err := group(h, flags)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	b, err := bytesOf(buf, "buffer")
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	w, err := f(pg, b)
	return submitted(w, err, flags, work, errbuf, errlen)
}

func runIO(h C.uint64_t, one *C.godist_buf, list *C.godist_buf, n C.int32_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t,
	f func(*libgodist.ProcessGroup, []byte, [][]byte) (*libgodist.Work, error)) C.int {
	pg, err := group(h, flags)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	b, err := bytesOf(one, "buffer")
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	l, err := listOf(list, n, "buffer list")
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	w, err := f(pg, b, l)
	return submitted(w, err, flags, work, errbuf, errlen)
}

// godist_monitored_barrier is a barrier whose failure on rank 0 names the
// ranks that did not arrive within timeout_ms (all of them if wait_all).
//
//export godist_monitored_barrier
func godist_monitored_barrier(h C.uint64_t, timeoutMs C.int64_t, waitAll C.int32_t, flags C.int32_t, work *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := group(h, flags)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	w, err := pg.MonitoredBarrier(millis(timeoutMs), waitAll != 0)
	return submitted(w, err, flags, work, errbuf, errlen)
}

// opts builds the per-call options: a synchronous op may run inline on the
// caller's thread; an asynchronous one may wait for its waiter
// (executor.runQueued).
func opts(timeoutMs C.int64_t, flags C.int32_t) libgodist.Opts {
	async := flags&C.GODIST_ASYNC != 0
	return libgodist.Opts{Timeout: millis(timeoutMs), Inline: !async, Deferrable: async}
}
