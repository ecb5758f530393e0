package main

/*
#include "godist.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/godist/godist/backends/nccl"
	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/libgodist/backend"
)

// The device path's entry points: an op block with GODIST_CUDA describes
// CUDA memory, and each op becomes NCCL calls (deviceCalls) enqueued on
// the block's stream by libgodist's device path. Every op returns a work
// handle that completes when the device has run it, or fails (naming the
// op) when the engine's watchdog finds it timed out or its communicator
// failed; godist_device_order makes a stream wait for it. A synchronous op
// is already in its stream's order: its handle is how its own failure
// reaches the caller.

// devBuf is a buffer of CUDA memory.
type devBuf struct {
	addr uintptr
	n    int64
}

func devOf(b *C.godist_buf, what string) (devBuf, error) {
	if b == nil || b.nbytes < 0 || (b.nbytes > 0 && b.data == nil) {
		return devBuf{}, fmt.Errorf("%w: %s: invalid CUDA buffer", libgodist.ErrInvalid, what)
	}
	return devBuf{addr: uintptr(b.data), n: int64(b.nbytes)}, nil
}

func devList(p *C.godist_buf, n C.int32_t, what string) ([]devBuf, error) {
	if n < 0 || n > 1<<20 || (n > 0 && p == nil) {
		return nil, fmt.Errorf("%w: %s: invalid list", libgodist.ErrInvalid, what)
	}
	out := make([]devBuf, n)
	for i, d := range unsafe.Slice(p, int(n)) {
		b, err := devOf(&d, fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// devPerRank is one buffer per rank: the list, or b split evenly.
func devPerRank(size int, p *C.godist_buf, n C.int32_t, b *C.godist_buf, op, what string) ([]devBuf, error) {
	if n > 0 {
		l, err := devList(p, n, what+" list")
		if err == nil && len(l) != size {
			err = fmt.Errorf("%w: %s: %d %ss for a group of %d", libgodist.ErrInvalid, op, len(l), what, size)
		}
		return l, err
	}
	whole, err := devOf(b, what+" buffer")
	if err != nil {
		return nil, err
	}
	if whole.n%int64(size) != 0 {
		return nil, fmt.Errorf("%w: %s: the %s's %d bytes do not split into %d equal parts", libgodist.ErrInvalid,
			op, what, whole.n, size)
	}
	k := whole.n / int64(size)
	out := make([]devBuf, size)
	for i := range out {
		out[i] = devBuf{addr: whole.addr + uintptr(int64(i)*k), n: k}
	}
	return out, nil
}

// elems is b's length in elements of the block's dtype.
func elems(c *C.godist_op, b devBuf, op string) (int64, error) {
	r := reduction(c)
	if !r.DType.Valid() {
		return 0, fmt.Errorf("%w: %s: unknown dtype code %d", libgodist.ErrInvalid, op, c.dtype)
	}
	size := int64(r.DType.Size())
	if b.n%size != 0 {
		return 0, fmt.Errorf("%w: %s: %d bytes are not whole %v elements", libgodist.ErrInvalid, op, b.n, r.DType)
	}
	return b.n / size, nil
}

func reduceCall(c *C.godist_op, kind backend.CallKind, send, recv devBuf, count int64, root int) backend.DeviceCall {
	r := reduction(c)
	return backend.DeviceCall{Kind: kind, Send: send.addr, Recv: recv.addr, Count: count, DType: r.DType, Op: r.Op,
		Factor: r.Factor, Root: root}
}

func moveCall(kind backend.CallKind, send, recv devBuf, root int) backend.DeviceCall {
	n := send.n
	if kind == backend.CallRecv {
		n = recv.n
	}
	return backend.DeviceCall{Kind: kind, Send: send.addr, Recv: recv.addr, Count: n, Bytes: true, Root: root}
}

// exchange is the calls of a personalized exchange: ins[r] to rank r,
// outs[r] from rank r (either may be nil), self included.
func exchange(ins, outs []devBuf) []backend.DeviceCall {
	var calls []backend.DeviceCall
	for r := range max(len(ins), len(outs)) {
		if r < len(ins) {
			calls = append(calls, moveCall(backend.CallSend, ins[r], devBuf{}, r))
		}
		if r < len(outs) {
			calls = append(calls, moveCall(backend.CallRecv, devBuf{}, outs[r], r))
		}
	}
	return calls
}

// deviceCalls returns the calls of op name and the peer of a
// point-to-point op (libgodist.GroupComm for collectives).
func deviceCalls(pg *libgodist.ProcessGroup, c *C.godist_op, name string) ([]backend.DeviceCall, int, error) {
	size, rank, root := pg.Size(), pg.Rank(), int(c.root)
	if (name == "broadcast" || name == "reduce" || name == "gather" || name == "scatter") && (root < 0 || root >= size) {
		return nil, 0, fmt.Errorf("%w: %s: root %d is out of range for a group of %d", libgodist.ErrInvalid, name, root, size)
	}
	switch name {
	case "allreduce", "reduce":
		b, err := devOf(&c.buf, "buffer")
		if err != nil {
			return nil, 0, err
		}
		n, err := elems(c, b, name)
		if err != nil {
			return nil, 0, err
		}
		if name == "reduce" {
			return []backend.DeviceCall{reduceCall(c, backend.CallReduce, b, b, n, root)}, libgodist.GroupComm, nil
		}
		return []backend.DeviceCall{reduceCall(c, backend.CallAllReduce, b, b, n, 0)}, libgodist.GroupComm, nil
	case "broadcast":
		b, err := devOf(&c.buf, "buffer")
		if err != nil {
			return nil, 0, err
		}
		return []backend.DeviceCall{moveCall(backend.CallBroadcast, b, b, root)}, libgodist.GroupComm, nil
	case "allgather":
		in, err := devOf(&c.buf, "input buffer")
		if err != nil {
			return nil, 0, err
		}
		if c.nouts == 0 {
			out, err := devOf(&c.out, "output buffer")
			if err != nil {
				return nil, 0, err
			}
			if out.n != in.n*int64(size) {
				return nil, 0, fmt.Errorf("%w: allgather: output has %d bytes, expected %d x %d", libgodist.ErrInvalid,
					out.n, in.n, size)
			}
			return []backend.DeviceCall{moveCall(backend.CallAllGather, in, out, 0)}, libgodist.GroupComm, nil
		}
		outs, err := devPerRank(size, c.outs, c.nouts, &c.out, name, "output")
		if err != nil {
			return nil, 0, err
		}
		ins := make([]devBuf, size)
		for r := range ins {
			ins[r] = in
		}
		return exchange(ins, outs), libgodist.GroupComm, nil
	case "gather", "scatter":
		var ins, outs []devBuf
		var err error
		if name == "gather" {
			var in devBuf
			if in, err = devOf(&c.buf, "input buffer"); err != nil {
				return nil, 0, err
			}
			ins = make([]devBuf, root+1)
			ins[root] = in
			if rank == root {
				if outs, err = devList(c.outs, c.nouts, "output list"); err == nil && len(outs) != size {
					err = fmt.Errorf("%w: gather: %d outputs for a group of %d", libgodist.ErrInvalid, len(outs), size)
				}
			}
		} else {
			var out devBuf
			if out, err = devOf(&c.out, "output buffer"); err != nil {
				return nil, 0, err
			}
			outs = make([]devBuf, root+1)
			outs[root] = out
			if rank == root {
				if ins, err = devList(c.ins, c.nins, "input list"); err == nil && len(ins) != size {
					err = fmt.Errorf("%w: scatter: %d inputs for a group of %d", libgodist.ErrInvalid, len(ins), size)
				}
			}
		}
		if err != nil {
			return nil, 0, err
		}
		return sparse(exchange(ins, outs)), libgodist.GroupComm, nil
	case "reduce_scatter":
		out, err := devOf(&c.out, "output buffer")
		if err != nil {
			return nil, 0, err
		}
		if c.nins > 0 {
			return nil, 0, fmt.Errorf("%w: reduce_scatter on CUDA takes one flat input", libgodist.ErrInvalid)
		}
		in, err := devOf(&c.buf, "input buffer")
		if err != nil {
			return nil, 0, err
		}
		if in.n != out.n*int64(size) {
			return nil, 0, fmt.Errorf("%w: reduce_scatter: input has %d bytes, expected %d x %d", libgodist.ErrInvalid,
				in.n, out.n, size)
		}
		n, err := elems(c, out, name)
		if err != nil {
			return nil, 0, err
		}
		return []backend.DeviceCall{reduceCall(c, backend.CallReduceScatter, in, out, n, 0)}, libgodist.GroupComm, nil
	case "alltoall":
		ins, err := devPerRank(size, c.ins, c.nins, &c.buf, name, "input")
		if err != nil {
			return nil, 0, err
		}
		outs, err := devPerRank(size, c.outs, c.nouts, &c.out, name, "output")
		if err != nil {
			return nil, 0, err
		}
		return exchange(ins, outs), libgodist.GroupComm, nil
	case "send", "recv":
		peer := int(c.peer)
		if peer == -1 && name == "recv" {
			return nil, 0, fmt.Errorf("%w: recv: NCCL cannot receive from any source; name the source rank",
				libgodist.ErrInvalid)
		}
		if peer < 0 || peer >= size {
			return nil, 0, fmt.Errorf("%w: %s: peer %d is out of range for a group of %d", libgodist.ErrInvalid, name,
				peer, size)
		}
		b, err := devOf(&c.buf, "buffer")
		if err != nil {
			return nil, 0, err
		}
		comm := peer
		if peer == rank {
			comm = libgodist.GroupComm // to itself: only within a batch, on the group's communicator
		}
		if name == "send" {
			return []backend.DeviceCall{moveCall(backend.CallSend, b, devBuf{}, peer)}, comm, nil
		}
		return []backend.DeviceCall{moveCall(backend.CallRecv, devBuf{}, b, peer)}, comm, nil
	}
	return nil, 0, fmt.Errorf("%w: %s has no CUDA form", libgodist.ErrInvalid, name)
}

// sparse drops the calls of exchange's padding (no buffer, no bytes).
func sparse(calls []backend.DeviceCall) []backend.DeviceCall {
	out := calls[:0]
	for _, c := range calls {
		if c.Send != 0 || c.Recv != 0 || c.Count != 0 {
			out = append(out, c)
		}
	}
	return out
}

// runDevice runs op name of block c on the device path.
func runDevice(pg *libgodist.ProcessGroup, c *C.godist_op, name string) C.int {
	calls, peer, err := deviceCalls(pg, c, name)
	if err != nil {
		return finish(err, c.errbuf, c.errlen)
	}
	async := c.flags&C.GODIST_ASYNC != 0
	w, err := pg.DeviceRun(name, libgodist.DeviceOp{Device: int(c.device), Stream: uintptr(c.stream), Async: async,
		Peer: peer, Calls: calls, Timeout: millis(c.timeout_ms)})
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

// ncclInfo is what godist_nccl_info reports.
type ncclInfo struct {
	Available      bool   `json:"available"`
	Reason         string `json:"reason,omitempty"`
	Version        string `json:"version,omitempty"`
	VersionCode    int    `json:"version_code,omitempty"`
	RuntimeVersion int    `json:"cuda_runtime_version,omitempty"`
	NCCLFrom       string `json:"nccl_from,omitempty"`
	CUDARTFrom     string `json:"cudart_from,omitempty"`
	Devices        int    `json:"devices"`
	DevicesError   string `json:"devices_error,omitempty"`
	UniqueID       bool   `json:"unique_id"`
	UniqueIDError  string `json:"unique_id_error,omitempty"`
}

// godist_nccl_info writes JSON describing the NCCL this process can load:
// its version, where it came from, the CUDA devices, whether a unique id
// can be made.
//
//export godist_nccl_info
func godist_nccl_info(buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	var info ncclInfo
	lib, err := nccl.Load()
	if err != nil {
		info.Reason = err.Error()
	} else {
		info.Available = true
		info.Version, info.VersionCode, info.RuntimeVersion = lib.VersionString(), lib.Version, lib.RuntimeVersion
		info.NCCLFrom, info.CUDARTFrom = lib.NCCLFrom, lib.CUDARTFrom
		if n, err := lib.DeviceCount(); err != nil {
			info.DevicesError = err.Error()
		} else {
			info.Devices = n
		}
		if _, err := lib.UniqueID(); err != nil {
			info.UniqueIDError = err.Error()
		} else {
			info.UniqueID = true
		}
	}
	b, err := json.Marshal(info)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	return copyOut(b, "nccl info", buf, capacity, outlen, errbuf, errlen)
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
	var calls []backend.DeviceCall
	peer := libgodist.GroupComm
	for i, c := range unsafe.Slice(blocks, int(n)) {
		if c.pg != first.pg || c.flags != first.flags || c.device != first.device || c.stream != first.stream {
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
		cs, p, err := deviceCalls(pg, &c, name)
		if err != nil {
			return finish(err, first.errbuf, first.errlen)
		}
		if i == 0 {
			peer = p
		} else if p != peer {
			peer = libgodist.GroupComm
		}
		calls = append(calls, cs...)
	}
	async := first.flags&C.GODIST_ASYNC != 0
	w, err := pg.DeviceRun("coalesced", libgodist.DeviceOp{Device: int(first.device), Stream: uintptr(first.stream),
		Async: async, Peer: peer, Calls: calls, Timeout: millis(first.timeout_ms)})
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
