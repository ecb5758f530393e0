package hier

import (
	"context"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/scratch"
)

// AllReduce reduces buf in place across the group. In an even group of H
// hosts x L ranks, large buffers go in L shards:
//
//	host reduce-scatter: local rank l holds its host's sum of shard l
//	across hosts: the ranks with local index l all-reduce shard l
//	host all-gather: every rank gets every shard
//
// and a host sends 2(H-1)/H of buf across its link in all, its L ranks in
// parallel. Small buffers, and uneven groups, take the leader path: host
// all-reduce, all-reduce among the hosts' lowest ranks, host broadcast
// (algo.Table.HierAllReduce chooses).
func (o *Offload) AllReduce(ctx context.Context, buf []byte, elem int, combine backend.Combine) error {
	if len(buf) == 0 {
		return nil // the same on every rank: nothing to send
	}
	L := len(o.topo.mine())
	if o.table.HierAllReduce(len(buf)/elem, elem, L, o.topo.even) == algo.HierSharded {
		return o.allReduceSharded(ctx, buf, elem, combine)
	}
	return o.allReduceLeaders(ctx, buf, elem, combine)
}

func (o *Offload) allReduceLeaders(ctx context.Context, buf []byte, elem int, combine backend.Combine) error {
	if err := o.hostAllReduce(ctx, buf, elem, combine); err != nil {
		return err
	}
	x := o.next(ctx, o.topo.leaders())
	if o.topo.local == 0 {
		if err := x.allReduce(buf, elem, combine, 0); err != nil {
			return err
		}
	}
	return o.hostBroadcast(ctx, buf, 0)
}

// allReduceSharded needs whole elements per shard: a buffer whose
// element count L does not divide is padded in scratch (the padding's
// reductions are thrown away). The shards go in segments, pipelined: while
// segment s crosses hosts, the host reduce-scatters segment s+1 and
// all-gathers segment s-1, so the host stages hide behind the link.
func (o *Offload) allReduceSharded(ctx context.Context, buf []byte, elem int, combine backend.Combine) (err error) {
	L := len(o.topo.mine())
	count := len(buf) / elem
	per := (count + L - 1) / L * elem
	work := buf
	if per*L != len(buf) {
		work = scratch.Get(per * L)
		defer func() {
			if err == nil {
				copy(buf, work)
				scratch.Put(work)
			}
		}()
		copy(work, buf)
		clear(work[len(buf):])
	}
	shards := make([][]byte, L)
	for i := range shards {
		shards[i] = work[i*per : (i+1)*per]
	}
	segs := segments(per, elem)
	part := func(b []byte, s int) []byte { return b[segs[s]:segs[s+1]] }
	parts := func(s int) [][]byte {
		out := make([][]byte, L)
		for j, sh := range shards {
			out[j] = part(sh, s)
		}
		return out
	}
	mine := shards[o.topo.local]
	x := o.next(ctx, o.topo.column(o.topo.local))
	return o.pipeline(ctx, x, len(segs)-1, func(x *xfer, s int) error {
		return x.allReduce(part(mine, s), elem, combine, uint16(s*ringSteps(len(x.members))))
	}, func(s int) error {
		return o.local.ReduceScatter(ctx, parts(s), part(mine, s), elem, combine)
	}, func(s int) error {
		ps := parts(s)
		return o.local.AllGather(ctx, ps[o.topo.local], ps)
	})
}

// segMin and segCount shape the pipeline of a sharded all-reduce: about
// segCount segments of a shard, none under segMin bytes.
const (
	segMin   = 1 << 20
	segCount = 8
)

// segments returns the byte offsets that cut a shard of per bytes into
// segments of whole elements: [0, ..., per].
func segments(per, elem int) []int {
	size := max(segMin, per/segCount) / elem * elem
	out := []int{0}
	for at := size; at < per; at += size {
		out = append(out, at)
	}
	return append(out, per)
}
