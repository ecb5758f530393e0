package hier

import (
	"context"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/scratch"
)

// ReduceScatter leaves in out the reduction over every rank of ins[rank].
// In an even group of H hosts x L ranks: a host reduce-scatter leaves on
// local rank l its host's sum of the H blocks bound for the ranks with
// local index l, and those ranks then exchange the blocks across hosts
// and each reduces its own in host order. Each host's link carries (H-1)/H
// of the input. Blocks go in segments, pipelined: the host reduce-scatters
// segment s+1 while segment s crosses hosts. Uneven groups are left to the
// engine's ring.
func (o *Offload) ReduceScatter(ctx context.Context, ins [][]byte, out []byte, elem int, combine backend.Combine) (err error) {
	if !o.topo.even {
		return backend.ErrDeclined
	}
	if len(out) == 0 {
		return nil // the same on every rank: nothing to send
	}
	H, L, B := len(o.topo.hosts), len(o.topo.mine()), len(out)
	tmp := scratch.Get(B * H * (L + 1))
	defer func() {
		if err == nil {
			scratch.Put(tmp)
		}
	}()
	// Bundles are segment-major (see AllGather): segment s of the blocks
	// bound for local rank j from every host, then segment s+1.
	bundles := blocks(tmp[:B*H*L], L, B*H)
	mine := tmp[B*H*L:]
	segs := segments(B, elem)
	seg := func(b []byte, s int) []byte { return b[segs[s]*H : segs[s+1]*H] }
	for j, b := range bundles {
		for s := range len(segs) - 1 {
			n := segs[s+1] - segs[s]
			for h, block := range blocks(seg(b, s), H, n) {
				copy(block, ins[o.topo.hosts[h][j]][segs[s]:segs[s+1]])
			}
		}
	}
	x := o.next(ctx, o.topo.column(o.topo.local))
	return o.pipeline(ctx, x, len(segs)-1, func(x *xfer, s int) error {
		return x.reduceScatter(blocks(seg(mine, s), H, segs[s+1]-segs[s]), out[segs[s]:segs[s+1]], combine, uint16(s))
	}, func(s int) error {
		parts := make([][]byte, L)
		for j, b := range bundles {
			parts[j] = seg(b, s)
		}
		return o.hostReduceScatter(ctx, parts, seg(mine, s), elem, combine)
	}, nil)
}
