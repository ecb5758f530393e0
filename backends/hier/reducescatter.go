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
// of the input. Uneven groups are left to the engine's ring.
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
	bundles := make([][]byte, L)
	for j := range bundles {
		bundles[j] = tmp[B*H*j : B*H*(j+1)]
		for h, part := range blocks(bundles[j], H, B) {
			copy(part, ins[o.topo.hosts[h][j]])
		}
	}
	mine := tmp[B*H*L:]
	if err := o.hostReduceScatter(ctx, bundles, mine, elem, combine); err != nil {
		return err
	}
	x := o.next(ctx, o.topo.column(o.topo.local))
	return x.reduceScatter(blocks(mine, H, B), out, combine, 0)
}
