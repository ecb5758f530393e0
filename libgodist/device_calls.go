package libgodist

import (
	"fmt"
	"time"

	"github.com/godist/godist/libgodist/backend"
)

// What each op on device memory is in device calls: a reduction or a
// broadcast is one call; all-gather into a list, gather, scatter and
// all-to-all are personalized exchanges of sends and receives, one pair
// per rank, inside one device group; send and receive take the
// communicator of their pair of ranks. DeviceSubmit checks an op's
// arguments (buffers, root, peer, sizes) and hands the calls to DeviceRun.

// DeviceBuf is a buffer of device memory: its address and length in
// bytes, as the caller passed them (DeviceSubmit checks them).
type DeviceBuf struct {
	Addr  uintptr
	Bytes int64
}

// DeviceArgs are the arguments of one op on device memory.
type DeviceArgs struct {
	// Op names the op: "allreduce", "broadcast", "reduce", "allgather",
	// "gather", "reduce_scatter", "scatter", "alltoall", "send", "recv".
	Op string
	// Buf is the op's buffer (the input of allgather, gather,
	// reduce_scatter and alltoall), Out its output buffer.
	Buf, Out DeviceBuf
	// Ins and Outs are one buffer per rank; when empty, the ops that
	// take one per rank split Buf (alltoall) or Out (allgather, alltoall)
	// evenly instead.
	Ins, Outs []DeviceBuf
	Reduce    ReduceArgs
	Root      int // broadcast, reduce, gather, scatter
	Peer      int // send, recv: the peer's group rank
	Device    int
	Stream    uintptr
	Async     bool
	Timeout   time.Duration // <= 0: the group's
}

// DeviceSubmit enqueues the op of a on the device path and returns its
// Work (see DeviceRun). A bad argument is an error wrapping ErrInvalid.
func (pg *ProcessGroup) DeviceSubmit(a DeviceArgs) (*Work, error) {
	calls, peer, err := deviceCalls(pg.cfg.Size, pg.cfg.Rank, a)
	if err != nil {
		return nil, err
	}
	return pg.DeviceRun(a.Op, DeviceOp{Device: a.Device, Stream: a.Stream, Async: a.Async, Peer: peer, Calls: calls,
		Timeout: a.Timeout})
}

// DeviceSubmitBatch enqueues the ops of as as one device group (coalesced
// collectives, batch_isend_irecv), named "coalesced"; the device, stream,
// Async and timeout are the first op's, and every op must share the
// device and stream. The ops take the communicator of a pair of ranks
// when every one is a send or receive with that peer, else the group's.
func (pg *ProcessGroup) DeviceSubmitBatch(as []DeviceArgs) (*Work, error) {
	if len(as) == 0 {
		return nil, fmt.Errorf("%w: an empty batch of CUDA ops", ErrInvalid)
	}
	first := as[0]
	var calls []backend.DeviceCall
	peer := GroupComm
	for i, a := range as {
		if a.Device != first.Device || a.Stream != first.Stream || a.Async != first.Async {
			return nil, fmt.Errorf("%w: coalesced CUDA ops must share group, flags, device and stream", ErrInvalid)
		}
		cs, p, err := deviceCalls(pg.cfg.Size, pg.cfg.Rank, a)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			peer = p
		} else if p != peer {
			peer = GroupComm
		}
		calls = append(calls, cs...)
	}
	return pg.DeviceRun("coalesced", DeviceOp{Device: first.Device, Stream: first.Stream, Async: first.Async,
		Peer: peer, Calls: calls, Timeout: first.Timeout})
}

// devBuf checks b, which what names in the error.
func devBuf(b DeviceBuf, what string) (DeviceBuf, error) {
	if b.Bytes < 0 || (b.Bytes > 0 && b.Addr == 0) {
		return DeviceBuf{}, fmt.Errorf("%w: %s: invalid CUDA buffer", ErrInvalid, what)
	}
	return b, nil
}

// devList checks each buffer of l, named what[i].
func devList(l []DeviceBuf, what string) ([]DeviceBuf, error) {
	for i, b := range l {
		if _, err := devBuf(b, fmt.Sprintf("%s[%d]", what, i)); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// devPerRank is one buffer per rank: the list, or whole split evenly.
func devPerRank(size int, list []DeviceBuf, whole DeviceBuf, op, what string) ([]DeviceBuf, error) {
	if len(list) > 0 {
		l, err := devList(list, what+" list")
		if err == nil && len(l) != size {
			err = fmt.Errorf("%w: %s: %d %ss for a group of %d", ErrInvalid, op, len(l), what, size)
		}
		return l, err
	}
	whole, err := devBuf(whole, what+" buffer")
	if err != nil {
		return nil, err
	}
	if whole.Bytes%int64(size) != 0 {
		return nil, fmt.Errorf("%w: %s: the %s's %d bytes do not split into %d equal parts", ErrInvalid,
			op, what, whole.Bytes, size)
	}
	k := whole.Bytes / int64(size)
	out := make([]DeviceBuf, size)
	for i := range out {
		out[i] = DeviceBuf{Addr: whole.Addr + uintptr(int64(i)*k), Bytes: k}
	}
	return out, nil
}

// elems is b's length in elements of r's dtype.
func elems(r ReduceArgs, b DeviceBuf, op string) (int64, error) {
	if !r.DType.Valid() {
		return 0, fmt.Errorf("%w: %s: unknown dtype code %d", ErrInvalid, op, r.DType)
	}
	size := int64(r.DType.Size())
	if b.Bytes%size != 0 {
		return 0, fmt.Errorf("%w: %s: %d bytes are not whole %v elements", ErrInvalid, op, b.Bytes, r.DType)
	}
	return b.Bytes / size, nil
}

func reduceCall(r ReduceArgs, kind backend.CallKind, send, recv DeviceBuf, count int64, root int) backend.DeviceCall {
	return backend.DeviceCall{Kind: kind, Send: send.Addr, Recv: recv.Addr, Count: count, DType: r.DType, Op: r.Op,
		Factor: r.Factor, Root: root}
}

func moveCall(kind backend.CallKind, send, recv DeviceBuf, root int) backend.DeviceCall {
	n := send.Bytes
	if kind == backend.CallRecv {
		n = recv.Bytes
	}
	return backend.DeviceCall{Kind: kind, Send: send.Addr, Recv: recv.Addr, Count: n, Bytes: true, Root: root}
}

// exchange is the calls of a personalized exchange: ins[r] to rank r,
// outs[r] from rank r (either may be nil), self included.
func exchange(ins, outs []DeviceBuf) []backend.DeviceCall {
	var calls []backend.DeviceCall
	for r := range max(len(ins), len(outs)) {
		if r < len(ins) {
			calls = append(calls, moveCall(backend.CallSend, ins[r], DeviceBuf{}, r))
		}
		if r < len(outs) {
			calls = append(calls, moveCall(backend.CallRecv, DeviceBuf{}, outs[r], r))
		}
	}
	return calls
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

// deviceCalls returns the calls of op a on this rank (rank of size) and
// the peer whose communicator they take (GroupComm for collectives).
func deviceCalls(size, rank int, a DeviceArgs) ([]backend.DeviceCall, int, error) {
	name, root := a.Op, a.Root
	if (name == "broadcast" || name == "reduce" || name == "gather" || name == "scatter") && (root < 0 || root >= size) {
		return nil, 0, fmt.Errorf("%w: %s: root %d is out of range for a group of %d", ErrInvalid, name, root, size)
	}
	switch name {
	case "allreduce", "reduce":
		b, err := devBuf(a.Buf, "buffer")
		if err != nil {
			return nil, 0, err
		}
		n, err := elems(a.Reduce, b, name)
		if err != nil {
			return nil, 0, err
		}
		if name == "reduce" {
			return []backend.DeviceCall{reduceCall(a.Reduce, backend.CallReduce, b, b, n, root)}, GroupComm, nil
		}
		return []backend.DeviceCall{reduceCall(a.Reduce, backend.CallAllReduce, b, b, n, 0)}, GroupComm, nil
	case "broadcast":
		b, err := devBuf(a.Buf, "buffer")
		if err != nil {
			return nil, 0, err
		}
		return []backend.DeviceCall{moveCall(backend.CallBroadcast, b, b, root)}, GroupComm, nil
	case "allgather":
		in, err := devBuf(a.Buf, "input buffer")
		if err != nil {
			return nil, 0, err
		}
		if len(a.Outs) == 0 {
			out, err := devBuf(a.Out, "output buffer")
			if err != nil {
				return nil, 0, err
			}
			if out.Bytes != in.Bytes*int64(size) {
				return nil, 0, fmt.Errorf("%w: allgather: output has %d bytes, expected %d x %d", ErrInvalid,
					out.Bytes, in.Bytes, size)
			}
			return []backend.DeviceCall{moveCall(backend.CallAllGather, in, out, 0)}, GroupComm, nil
		}
		outs, err := devPerRank(size, a.Outs, a.Out, name, "output")
		if err != nil {
			return nil, 0, err
		}
		ins := make([]DeviceBuf, size)
		for r := range ins {
			ins[r] = in
		}
		return exchange(ins, outs), GroupComm, nil
	case "gather", "scatter":
		var ins, outs []DeviceBuf
		var err error
		if name == "gather" {
			var in DeviceBuf
			if in, err = devBuf(a.Buf, "input buffer"); err != nil {
				return nil, 0, err
			}
			ins = make([]DeviceBuf, root+1)
			ins[root] = in
			if rank == root {
				if outs, err = devList(a.Outs, "output list"); err == nil && len(outs) != size {
					err = fmt.Errorf("%w: gather: %d outputs for a group of %d", ErrInvalid, len(outs), size)
				}
			}
		} else {
			var out DeviceBuf
			if out, err = devBuf(a.Out, "output buffer"); err != nil {
				return nil, 0, err
			}
			outs = make([]DeviceBuf, root+1)
			outs[root] = out
			if rank == root {
				if ins, err = devList(a.Ins, "input list"); err == nil && len(ins) != size {
					err = fmt.Errorf("%w: scatter: %d inputs for a group of %d", ErrInvalid, len(ins), size)
				}
			}
		}
		if err != nil {
			return nil, 0, err
		}
		return sparse(exchange(ins, outs)), GroupComm, nil
	case "reduce_scatter":
		out, err := devBuf(a.Out, "output buffer")
		if err != nil {
			return nil, 0, err
		}
		if len(a.Ins) > 0 {
			return nil, 0, fmt.Errorf("%w: reduce_scatter on CUDA takes one flat input", ErrInvalid)
		}
		in, err := devBuf(a.Buf, "input buffer")
		if err != nil {
			return nil, 0, err
		}
		if in.Bytes != out.Bytes*int64(size) {
			return nil, 0, fmt.Errorf("%w: reduce_scatter: input has %d bytes, expected %d x %d", ErrInvalid,
				in.Bytes, out.Bytes, size)
		}
		n, err := elems(a.Reduce, out, name)
		if err != nil {
			return nil, 0, err
		}
		return []backend.DeviceCall{reduceCall(a.Reduce, backend.CallReduceScatter, in, out, n, 0)}, GroupComm, nil
	case "alltoall":
		ins, err := devPerRank(size, a.Ins, a.Buf, name, "input")
		if err != nil {
			return nil, 0, err
		}
		outs, err := devPerRank(size, a.Outs, a.Out, name, "output")
		if err != nil {
			return nil, 0, err
		}
		return exchange(ins, outs), GroupComm, nil
	case "send", "recv":
		peer := a.Peer
		if peer == -1 && name == "recv" {
			return nil, 0, fmt.Errorf("%w: recv: NCCL cannot receive from any source; name the source rank", ErrInvalid)
		}
		if peer < 0 || peer >= size {
			return nil, 0, fmt.Errorf("%w: %s: peer %d is out of range for a group of %d", ErrInvalid, name, peer, size)
		}
		b, err := devBuf(a.Buf, "buffer")
		if err != nil {
			return nil, 0, err
		}
		comm := peer
		if peer == rank {
			comm = GroupComm // to itself: only within a batch, on the group's communicator
		}
		if name == "send" {
			return []backend.DeviceCall{moveCall(backend.CallSend, b, DeviceBuf{}, peer)}, comm, nil
		}
		return []backend.DeviceCall{moveCall(backend.CallRecv, DeviceBuf{}, b, peer)}, comm, nil
	}
	return nil, 0, fmt.Errorf("%w: %s has no CUDA form", ErrInvalid, name)
}
