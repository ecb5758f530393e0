package hier

import (
	"context"
	"sync"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
)

// Offload carries a group's collectives across hosts: host stages on the
// host's offload, the rest over the group's transport. Its methods are
// called one at a time, in the group's issue order, on every rank (the
// engine's contract), so every rank numbers its calls alike.
type Offload struct {
	topo  topology
	local backend.Offload // this host's offload; nil when the host has one rank
	tr    transport.Transport
	seq   uint64 // calls that sent across hosts so far
	table algo.Table

	closeOnce sync.Once
}

func newOffload(t topology, local backend.Offload, tr transport.Transport, table algo.Table) *Offload {
	return &Offload{topo: t, local: local, tr: tr, table: table}
}

// Algorithms names the algorithms its collectives take, and those of
// this host's offload (backend.Described).
func (o *Offload) Algorithms() string {
	out := o.table.DescribeHier(len(o.topo.mine()), o.topo.even)
	if d, ok := o.local.(backend.Described); ok {
		out += "; inside a host, " + d.Algorithms()
	}
	return out
}

// Name is "shm+tcp": the host offload's name and the transport's.
func (o *Offload) Name() string {
	name := "shm"
	if o.local != nil {
		name = o.local.Name()
	}
	return name + "+tcp"
}

// Topology is the group's ranks by host, in host order.
func (o *Offload) Topology() [][]int { return o.topo.hosts }

// next returns the transfers of the next call among members, this rank
// being members[me].
func (o *Offload) next(ctx context.Context, members []int) *xfer {
	o.seq++
	me := 0
	for i, r := range members {
		if r == o.tr.Rank() {
			me = i
		}
	}
	return &xfer{ctx: ctx, tr: o.tr, seq: o.seq, members: members, me: me, table: &o.table}
}

// host-stage helpers: a host of one rank has nothing to do.

func (o *Offload) hostAllReduce(ctx context.Context, buf []byte, elem int, combine backend.Combine) error {
	if o.local == nil {
		return nil
	}
	return o.local.AllReduce(ctx, buf, elem, combine)
}

func (o *Offload) hostBroadcast(ctx context.Context, buf []byte, root int) error {
	if o.local == nil {
		return nil
	}
	return o.local.Broadcast(ctx, buf, root)
}

func (o *Offload) hostAllGather(ctx context.Context, in []byte, outs [][]byte) error {
	if o.local == nil {
		copy(outs[0], in)
		return nil
	}
	return o.local.AllGather(ctx, in, outs)
}

func (o *Offload) hostReduceScatter(ctx context.Context, ins [][]byte, out []byte, elem int, combine backend.Combine) error {
	if o.local == nil {
		copy(out, ins[0])
		return nil
	}
	return o.local.ReduceScatter(ctx, ins, out, elem, combine)
}

func (o *Offload) hostBarrier(ctx context.Context) error {
	if o.local == nil {
		return nil
	}
	return o.local.Barrier(ctx)
}

// AllToAll is left to the engine, whose pairwise exchange the router
// sends through shared memory or TCP peer by peer.
func (o *Offload) AllToAll(context.Context, [][]byte, [][]byte) error { return backend.ErrDeclined }

// Abort fails the host offload's pending ops; the transport is the
// engine's to abort.
func (o *Offload) Abort(err error) {
	if o.local != nil {
		o.local.Abort(err)
	}
}

// Close releases the host offload. Idempotent.
func (o *Offload) Close() error {
	var err error
	o.closeOnce.Do(func() {
		if o.local != nil {
			err = o.local.Close()
		}
	})
	return err
}
