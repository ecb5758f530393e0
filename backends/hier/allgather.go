package hier

import (
	"context"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/scratch"
)

// AllGather places every rank's in at outs[rank] on every rank. In an even
// group of H hosts x L ranks: the ranks with local index l exchange their
// blocks across hosts (each host's link carries (H-1)/H of the result),
// then each host all-gathers those bundles of H blocks. Uneven groups are
// left to the engine's ring.
func (o *Offload) AllGather(ctx context.Context, in []byte, outs [][]byte) (err error) {
	if !o.topo.even {
		return backend.ErrDeclined
	}
	if len(in) == 0 {
		return nil // the same on every rank: nothing to send
	}
	H, L, B := len(o.topo.hosts), len(o.topo.mine()), len(in)
	tmp := scratch.Get(B * H * (L + 1))
	defer func() {
		if err == nil {
			scratch.Put(tmp)
		}
	}()
	mine := tmp[:B*H]
	bundles := make([][]byte, L)
	for j := range bundles {
		bundles[j] = tmp[B*H*(j+1) : B*H*(j+2)]
	}
	parts := blocks(mine, H, B)
	x := o.next(ctx, o.topo.column(o.topo.local))
	if err := x.allGather(in, parts, 0); err != nil {
		return err
	}
	if err := o.hostAllGather(ctx, mine, bundles); err != nil {
		return err
	}
	for j, b := range bundles {
		for h, part := range blocks(b, H, B) {
			copy(outs[o.topo.hosts[h][j]], part)
		}
	}
	return nil
}

// blocks cuts b into n blocks of size bytes.
func blocks(b []byte, n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b[i*size : (i+1)*size]
	}
	return out
}
