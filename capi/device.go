package main

/*
#include "godist.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/godist/godist/libgodist"
)

// The device path's entry points: an op block with GODIST_CUDA describes
// CUDA memory; its fields become a libgodist.DeviceArgs, and the engine's
// device path (libgodist/device_calls.go) turns the op into NCCL calls
// enqueued on the block's stream. Every op returns a work
// handle that completes when the device has run it, or fails (naming the
// op) when the engine's watchdog finds it timed out or its communicator
// failed; godist_device_order makes a stream wait for it. A synchronous op
// is already in its stream's order: its handle is how its own failure
// reaches the caller.

// deviceArgs converts block c of op name; the engine checks the values
// (libgodist.DeviceSubmit).
func deviceArgs(c *C.godist_op, name string) (libgodist.DeviceArgs, error) {
	ins, err := devList(c.ins, c.nins, "input list")
	if err != nil {
		return libgodist.DeviceArgs{}, err
	}
	outs, err := devList(c.outs, c.nouts, "output list")
	if err != nil {
		return libgodist.DeviceArgs{}, err
	}
	return libgodist.DeviceArgs{Op: name, Buf: devOf(&c.buf), Out: devOf(&c.out), Ins: ins, Outs: outs,
		Reduce: reduction(c), Root: int(c.root), Peer: int(c.peer), Device: int(c.device),
		Stream: uintptr(c.stream), Async: c.flags&C.GODIST_ASYNC != 0, Timeout: millis(c.timeout_ms)}, nil
}

func devOf(b *C.godist_buf) libgodist.DeviceBuf {
	return libgodist.DeviceBuf{Addr: uintptr(b.data), Bytes: int64(b.nbytes)}
}

// devList views an array of n descriptors (nil when n is 0).
func devList(p *C.godist_buf, n C.int32_t, what string) ([]libgodist.DeviceBuf, error) {
	if n < 0 || n > 1<<20 || (n > 0 && p == nil) {
		return nil, fmt.Errorf("%w: %s: invalid list", libgodist.ErrInvalid, what)
	}
	if n == 0 {
		return nil, nil
	}
	descs := unsafe.Slice(p, int(n))
	out := make([]libgodist.DeviceBuf, n)
	for i := range descs {
		out[i] = devOf(&descs[i])
	}
	return out, nil
}

// runDevice runs op name of block c on the device path.
func runDevice(pg *libgodist.ProcessGroup, c *C.godist_op, name string) C.int {
	a, err := deviceArgs(c, name)
	if err != nil {
		return finish(err, c.errbuf, c.errlen)
	}
	w, err := pg.DeviceSubmit(a)
	if err != nil {
		return finish(err, c.errbuf, c.errlen)
	}
	c.work = C.uint64_t(handles.put(w))
	return statusOK
}

// godist_device_order makes the block's stream wait for the device work
// of the handle in work (nothing if it has completed) and returns the
// work's error if it failed. It does not collect the work.
//
//export godist_device_order
func godist_device_order(c *C.godist_op) (rc C.int) {
	if c == nil {
		return statusInvalid
	}
	defer recoverTo(&rc, c.errbuf, c.errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(c.pg))
	if err != nil {
		return finish(err, c.errbuf, c.errlen)
	}
	w, err := lookup[*libgodist.Work](uint64(c.work))
	if err != nil {
		return finish(err, c.errbuf, c.errlen)
	}
	return finish(pg.DeviceOrder(w, uintptr(c.stream)), c.errbuf, c.errlen)
}

// godist_device_id writes a new communicator id (128 bytes) into out.
//
//export godist_device_id
func godist_device_id(h C.uint64_t, out unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	id, err := pg.DeviceID()
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	return copyOut(id, "communicator id", out, capacity, outlen, errbuf, errlen)
}

// godist_device_open joins the group's communicator on device (peer -1)
// or the one shared with peer, made from id (n bytes).
//
//export godist_device_open
func godist_device_open(h C.uint64_t, device, peer C.int32_t, id unsafe.Pointer, n C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	b, err := viewBytes(id, int64(n), "communicator id")
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	return finish(pg.DeviceOpen(int(device), int(peer), append([]byte(nil), b...)), errbuf, errlen)
}

// godist_device_has reports (1 or 0) whether the group has the
// communicator godist_device_open(peer) makes.
//
//export godist_device_has
func godist_device_has(h C.uint64_t, peer C.int32_t) C.int32_t {
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil || !pg.HasDeviceComm(int(peer)) {
		return 0
	}
	return 1
}

// godist_device_batch enqueues the device ops of n blocks (each with
// GODIST_CUDA, one device and stream) as one NCCL group: coalesced
// collectives and batch_isend_irecv. The first block receives the work's
// handle or the error.
//
//export godist_device_batch
func godist_device_batch(blocks *C.godist_op, n C.int32_t) (rc C.int) {
	if blocks == nil || n <= 0 || n > 1<<16 {
		return statusInvalid
	}
	first := blocks
	defer recoverTo(&rc, first.errbuf, first.errlen)
	first.work = 0
	pg, err := group(first.pg, first.flags)
	if err != nil {
		return finish(err, first.errbuf, first.errlen)
	}
	as := make([]libgodist.DeviceArgs, n)
	for i, c := range unsafe.Slice(blocks, int(n)) {
		if c.pg != first.pg || c.flags != first.flags {
			return finish(fmt.Errorf("%w: coalesced CUDA ops must share group, flags, device and stream",
				libgodist.ErrInvalid), first.errbuf, first.errlen)
		}
		name := ""
		if k := int(c.op_code); k >= 0 && k < len(batchNames) {
			name = batchNames[k]
		}
		if name == "" {
			return finish(fmt.Errorf("%w: block %d: unknown op", libgodist.ErrInvalid, i), first.errbuf, first.errlen)
		}
		if as[i], err = deviceArgs(&c, name); err != nil {
			return finish(err, first.errbuf, first.errlen)
		}
	}
	w, err := pg.DeviceSubmitBatch(as)
	if err != nil {
		return finish(err, first.errbuf, first.errlen)
	}
	first.work = C.uint64_t(handles.put(w))
	return statusOK
}

// batchNames are the ops of godist_op.op_code, by value.
var batchNames = [...]string{C.GODIST_OP_ALLREDUCE: "allreduce", C.GODIST_OP_BROADCAST: "broadcast",
	C.GODIST_OP_REDUCE: "reduce", C.GODIST_OP_ALLGATHER: "allgather", C.GODIST_OP_GATHER: "gather",
	C.GODIST_OP_REDUCE_SCATTER: "reduce_scatter", C.GODIST_OP_SCATTER: "scatter", C.GODIST_OP_ALLTOALL: "alltoall",
	C.GODIST_OP_SEND: "send", C.GODIST_OP_RECV: "recv"}
