package hier

import (
	"context"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/scratch"
)

// Broadcast copies root's buf into every rank's. In an even group, large
// buffers go in L shards: the root's host broadcasts the whole buffer
// inside the host, local rank l of the root's host sends shard l to the
// ranks with local index l on the other hosts, and each other host
// all-gathers its shards. Otherwise the root's host broadcasts, its lowest
// rank sends to the other hosts' lowest ranks, and each host broadcasts.
func (o *Offload) Broadcast(ctx context.Context, buf []byte, root int) error {
	if len(buf) == 0 {
		return nil // the same on every rank: nothing to send
	}
	rootHost, rootLocal := o.topo.find(root)
	L := len(o.topo.mine())
	if o.table.HierBroadcast(len(buf), L, o.topo.even) == algo.HierSharded {
		return o.broadcastSharded(ctx, buf, rootHost, rootLocal)
	}
	if o.topo.host == rootHost {
		if err := o.hostBroadcast(ctx, buf, rootLocal); err != nil {
			return err
		}
	}
	x := o.next(ctx, o.topo.leaders())
	if o.topo.local == 0 {
		if err := x.broadcast(buf, rootHost, 0); err != nil {
			return err
		}
	}
	if o.topo.host == rootHost {
		return nil
	}
	return o.hostBroadcast(ctx, buf, 0)
}

// broadcastSharded pads buf in scratch when L does not divide its length.
func (o *Offload) broadcastSharded(ctx context.Context, buf []byte, rootHost, rootLocal int) (err error) {
	L := len(o.topo.mine())
	atRoot := o.topo.host == rootHost
	if atRoot {
		if err := o.local.Broadcast(ctx, buf, rootLocal); err != nil {
			return err
		}
	}
	per := (len(buf) + L - 1) / L
	work := buf
	if per*L != len(buf) {
		work = scratch.Get(per * L)
		defer func() {
			if err == nil {
				if !atRoot {
					copy(buf, work)
				}
				scratch.Put(work)
			}
		}()
		copy(work, buf)
	}
	shards := make([][]byte, L)
	for i := range shards {
		shards[i] = work[i*per : (i+1)*per]
	}
	x := o.next(ctx, o.topo.column(o.topo.local))
	if err := x.broadcast(shards[o.topo.local], rootHost, 0); err != nil {
		return err
	}
	if atRoot {
		return nil
	}
	return o.local.AllGather(ctx, shards[o.topo.local], shards)
}
