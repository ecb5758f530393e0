package libgodist

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// The methods in this file are the group's public operations. Each checks
// its arguments (returning an error wrapping ErrInvalid before anything is
// queued) and returns a Work. Buffers are raw bytes owned by the caller,
// who must keep them alive and untouched until the Work completes. timeout
// <= 0 means the group's default.

// Opts are per-call options of an operation.
type Opts struct {
	// Timeout bounds the operation; <= 0 means the group's default.
	Timeout time.Duration
	// Inline runs a collective on the calling goroutine when no earlier
	// collective is queued (the caller is about to wait for it anyway):
	// this saves the hand-off to the executor for small synchronous ops.
	Inline bool
	// Deferrable marks an asynchronous op whose caller holds its Work
	// without watching it (it may wait for it at once): while the group's
	// callers have been waiting for such ops right away, the executor leaves
	// it queued for up to deferStart, so that the waiter runs it itself
	// (executor.runQueued) instead of waiting for the drainer goroutine.
	// Work.Expedite (a watch) starts it at once.
	Deferrable bool
	// DType is the element type of an op whose buffers the engine sees as
	// bytes (broadcast, all_gather, gather, scatter, all_to_all), when
	// Typed: ranks that disagree on it fail with a desync error, and the
	// error describes the call by its elements. Reducing ops take theirs
	// from ReduceArgs.
	DType reduce.DType
	Typed bool
	// Detail is the caller's description of its tensors (their shapes,
	// with TORCH_DISTRIBUTED_DEBUG=DETAIL): ranks whose descriptions
	// differ fail with a desync error, which shows this rank's.
	Detail string
}

// ReduceArgs describes the data of a reducing collective.
type ReduceArgs struct {
	DType  reduce.DType
	Op     reduce.Op
	Factor float64 // PREMUL_SUM factor
}

func (a ReduceArgs) spec(op string, bufs ...[]byte) (reduceSpec, error) {
	s := reduceSpec{dt: a.DType, op: a.Op, factor: a.Factor}
	if err := s.check(); err != nil {
		return s, invalidf("%s: %s", op, strings.TrimPrefix(err.Error(), "godist: "))
	}
	for _, b := range bufs {
		if len(b)%a.DType.Size() != 0 {
			return s, invalidf("%s: buffer of %d bytes is not a whole number of %s elements", op, len(b), a.DType)
		}
	}
	return s, nil
}

// call is the fingerprint of an op whose n bytes per rank are of a.DType.
func (a ReduceArgs) call(op transport.OpCode, n int) transport.Call {
	return transport.Call{Stamp: transport.Stamp{Op: op, DType: uint8(a.DType), RedOp: uint8(a.Op), Root: -1,
		Count: uint64(n / a.DType.Size())}}
}

// call is the fingerprint of an op of n bytes per rank, of o.DType if o
// is Typed (and they divide into its elements).
func (o Opts) call(op transport.OpCode, n int) transport.Call {
	st := transport.Stamp{Op: op, DType: transport.NoDType, RedOp: transport.NoRedOp, Root: -1, Count: uint64(n)}
	if es := o.DType.Size(); o.Typed && es > 0 && n%es == 0 {
		st.DType, st.Count = uint8(o.DType), uint64(n/es)
	}
	return transport.Call{Stamp: st}
}

// noData is the fingerprint of an op without buffers.
func noData(op transport.OpCode) transport.Call {
	return transport.Call{Stamp: transport.Stamp{Op: op, DType: transport.NoDType, RedOp: transport.NoRedOp, Root: -1}}
}

func (pg *ProcessGroup) checkRoot(op string, root int) error {
	if root < 0 || root >= pg.cfg.Size {
		return invalidf("%s: root rank %d is out of range for a group of %d", op, root, pg.cfg.Size)
	}
	return nil
}

func (pg *ProcessGroup) checkList(op, what string, bufs [][]byte, size int) error {
	if len(bufs) != pg.cfg.Size {
		return invalidf("%s: %s has %d entries, expected one per rank (%d)", op, what, len(bufs), pg.cfg.Size)
	}
	if size < 0 {
		return nil
	}
	for i, b := range bufs {
		if len(b) != size {
			return invalidf("%s: %s[%d] has %d bytes, expected %d", op, what, i, len(b), size)
		}
	}
	return nil
}

// AllReduce reduces buf in place across the group.
func (pg *ProcessGroup) AllReduce(buf []byte, a ReduceArgs, o Opts) (*Work, error) {
	s, err := a.spec("allreduce", buf)
	if err != nil {
		return nil, err
	}
	call := a.call(transport.OpAllReduce, len(buf))
	return pg.submit("allreduce", o, call, func(c *comm) error { return allReduce(c, buf, s) }), nil
}

// Broadcast copies root's buf into every rank's buf.
func (pg *ProcessGroup) Broadcast(buf []byte, root int, o Opts) (*Work, error) {
	if err := pg.checkRoot("broadcast", root); err != nil {
		return nil, err
	}
	call := o.call(transport.OpBroadcast, len(buf))
	call.Root = int32(root)
	return pg.submit("broadcast", o, call, func(c *comm) error { return broadcast(c, buf, root) }), nil
}

// Reduce reduces every rank's buf into root's buf.
func (pg *ProcessGroup) Reduce(buf []byte, root int, a ReduceArgs, o Opts) (*Work, error) {
	if err := pg.checkRoot("reduce", root); err != nil {
		return nil, err
	}
	s, err := a.spec("reduce", buf)
	if err != nil {
		return nil, err
	}
	call := a.call(transport.OpReduce, len(buf))
	call.Root = int32(root)
	return pg.submit("reduce", o, call, func(c *comm) error { return reduceRooted(c, buf, root, s) }), nil
}

// AllGather copies every rank's in into outs[rank] on every rank.
func (pg *ProcessGroup) AllGather(in []byte, outs [][]byte, o Opts) (*Work, error) {
	if err := pg.checkList("allgather", "output list", outs, len(in)); err != nil {
		return nil, err
	}
	return pg.submit("allgather", o, o.call(transport.OpAllGather, len(in)), func(c *comm) error { return allGather(c, in, outs) }), nil
}

// ReduceScatter leaves the reduction of every rank's ins[rank] in out.
func (pg *ProcessGroup) ReduceScatter(ins [][]byte, out []byte, a ReduceArgs, o Opts) (*Work, error) {
	if err := pg.checkList("reduce_scatter", "input list", ins, len(out)); err != nil {
		return nil, err
	}
	s, err := a.spec("reduce_scatter", out)
	if err != nil {
		return nil, err
	}
	return pg.submit("reduce_scatter", o, a.call(transport.OpReduceScatter, len(out)), func(c *comm) error { return reduceScatter(c, ins, out, s) }), nil
}

// Gather collects every rank's in into root's outs (outs is ignored
// elsewhere).
func (pg *ProcessGroup) Gather(in []byte, outs [][]byte, root int, o Opts) (*Work, error) {
	if err := pg.checkRoot("gather", root); err != nil {
		return nil, err
	}
	if pg.cfg.Rank == root {
		if err := pg.checkList("gather", "gather list", outs, len(in)); err != nil {
			return nil, err
		}
	}
	call := o.call(transport.OpGather, len(in))
	call.Root = int32(root)
	return pg.submit("gather", o, call, func(c *comm) error { return gatherRooted(c, in, outs, root) }), nil
}

// Scatter sends root's ins[i] to rank i's out (ins is ignored elsewhere).
func (pg *ProcessGroup) Scatter(ins [][]byte, out []byte, root int, o Opts) (*Work, error) {
	if err := pg.checkRoot("scatter", root); err != nil {
		return nil, err
	}
	if pg.cfg.Rank == root {
		if err := pg.checkList("scatter", "scatter list", ins, len(out)); err != nil {
			return nil, err
		}
	}
	call := o.call(transport.OpScatter, len(out))
	call.Root = int32(root)
	return pg.submit("scatter", o, call, func(c *comm) error { return scatterRooted(c, ins, out, root) }), nil
}

// AllToAll sends ins[j] to rank j's outs[rank]; blocks may differ in size
// but each must match its counterpart on the other rank.
func (pg *ProcessGroup) AllToAll(ins, outs [][]byte, o Opts) (*Work, error) {
	if err := pg.checkList("alltoall", "input list", ins, -1); err != nil {
		return nil, err
	}
	if err := pg.checkList("alltoall", "output list", outs, -1); err != nil {
		return nil, err
	}
	if len(ins[pg.cfg.Rank]) != len(outs[pg.cfg.Rank]) {
		return nil, invalidf("alltoall: this rank sends itself %d bytes but expects %d", len(ins[pg.cfg.Rank]), len(outs[pg.cfg.Rank]))
	}
	call := o.call(transport.OpAllToAll, 0)
	call.Count, call.Blocks = 0, &transport.Blocks{Ins: ins, Outs: outs, Elem: 1}
	if call.DType != transport.NoDType {
		call.Blocks.Elem = o.DType.Size()
	}
	return pg.submit("alltoall", o, call, func(c *comm) error { return allToAll(c, ins, outs) }), nil
}

// Barrier completes once every rank has entered it.
func (pg *ProcessGroup) Barrier(o Opts) (*Work, error) {
	return pg.submit("barrier", o, noData(transport.OpBarrier), barrier), nil
}

// Send sends buf to peer under a user tag. It bypasses the collective queue;
// sends to one peer keep their order. The send is eager: it completes once
// the bytes are handed to the transport.
func (pg *ProcessGroup) Send(buf []byte, peer int, tag int64, o Opts) (*Work, error) {
	if peer < 0 || peer >= pg.cfg.Size {
		return nil, invalidf("send: destination rank %d is out of range for a group of %d", peer, pg.cfg.Size)
	}
	if err := pg.usable(); err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = pg.Timeout()
	}
	key := pg.recordP2P("send", peer, len(buf), timeout)
	ctx := newOpContext(pg.ctx, timeout)
	defer ctx.cancel()
	err := pg.tr.Send(ctx, peer, transport.P2PTag(tag), buf)
	if err != nil {
		err = pg.p2pError("send", peer, err, timeout)
	}
	key.completed(&pg.flight, err)
	return completedWork("send", 0, err), nil
}

// Recv receives len(buf) bytes from peer (or transport.AnySource) under a
// user tag. The Work's Source is the sender.
func (pg *ProcessGroup) Recv(buf []byte, peer int, tag int64, o Opts) (*Work, error) {
	if peer != transport.AnySource && (peer < 0 || peer >= pg.cfg.Size) {
		return nil, invalidf("recv: source rank %d is out of range for a group of %d", peer, pg.cfg.Size)
	}
	if err := pg.usable(); err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = pg.Timeout()
	}
	w := newWork("recv", 0)
	key := pg.recordP2P("recv", peer, len(buf), timeout)
	r := pg.tr.PostRecv(peer, transport.P2PTag(tag), buf)
	w.assist = r.Help
	timer := time.AfterFunc(timeout, func() { r.Cancel(transport.ErrTimeout) })
	stop := context.AfterFunc(pg.ctx, func() { r.Cancel(transport.ErrClosed) })
	r.OnDone(func(r *transport.Recv) {
		timer.Stop()
		stop()
		err := r.Err()
		if err != nil {
			err = pg.p2pError("recv", peer, err, timeout)
		}
		key.completed(&pg.flight, err)
		w.finish(err, r.Source())
	})
	return w, nil
}

// p2pError is the error of a send or receive with peer that failed. As
// for a collective, the rank at fault is the innermost one named, and a
// transport failure (a lost connection, a peer that left) breaks the
// group, so that this rank's farewell tells the others why it leaves.
func (pg *ProcessGroup) p2pError(op string, peer int, err error, timeout time.Duration) error {
	oe := &OpError{Op: op, Group: pg.cfg.Group, Peer: peer, Err: err, After: timeout}
	if pe := rootPeerError(err); pe != nil && pe.Peer >= 0 {
		oe.Peer = pe.Peer
	}
	if errors.Is(err, transport.ErrConnLost) || errors.Is(err, transport.ErrPeerGone) {
		pg.breakWith(oe)
	}
	return oe
}
