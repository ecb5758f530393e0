package hier

import (
	"context"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/scratch"
)

// AllGather places every rank's in at outs[rank] on every rank. In an even
// group of H hosts x L ranks: the ranks with local index l exchange their
// blocks across hosts (each host's link carries (H-1)/H of the result),
// then each host all-gathers those bundles of H blocks. Blocks go in
// segments, pipelined: the host all-gathers segment s while segment s+1
// crosses hosts. Uneven groups are left to the engine's ring.
func (o *Offload) AllGather(ctx context.Context, in []byte, outs [][]byte) (err error) {
	if !o.topo.even {
		return backend.ErrDeclined
	}
	if len(in) == 0 {
		return nil // the same on every rank: nothing to send
	}
	H, L, B := len(o.topo.hosts), len(o.topo.mine()), len(in)
	tmp := scratch.Get(B * H * L)
	defer func() {
		if err == nil {
			scratch.Put(tmp)
		}
	}()
	// Bundle j (local rank j's blocks from every host) is segment-major:
	// segment s of every host's block, host by host, then segment s+1, so
	// that one segment of a bundle is contiguous.
	bundles := blocks(tmp, L, B*H)
	segs := segments(B, 1)
	seg := func(b []byte, s int) []byte { return b[segs[s]*H : segs[s+1]*H] }
	x := o.next(ctx, o.topo.column(o.topo.local))
	return o.pipeline(ctx, x, len(segs)-1, func(x *xfer, s int) error {
		return x.allGather(in[segs[s]:segs[s+1]], blocks(seg(bundles[o.topo.local], s), H, segs[s+1]-segs[s]), uint16(s))
	}, nil, func(s int) error {
		mine := seg(bundles[o.topo.local], s)
		parts := make([][]byte, L)
		for j, b := range bundles {
			parts[j] = seg(b, s)
		}
		if err := o.hostAllGather(ctx, mine, parts); err != nil {
			return err
		}
		n := segs[s+1] - segs[s]
		for j, part := range parts {
			for h, block := range blocks(part, H, n) {
				copy(outs[o.topo.hosts[h][j]][segs[s]:], block)
			}
		}
		return nil
	})
}

// blocks cuts b into n blocks of size bytes.
func blocks(b []byte, n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b[i*size : (i+1)*size]
	}
	return out
}
