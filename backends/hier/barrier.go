package hier

import "context"

// Barrier returns once every rank has entered it: each host's ranks meet,
// then the hosts' lowest ranks, then each host again.
func (o *Offload) Barrier(ctx context.Context) error {
	if err := o.hostBarrier(ctx); err != nil {
		return err
	}
	x := o.next(ctx, o.topo.leaders())
	if o.topo.local == 0 {
		if err := x.barrier(0); err != nil {
			return err
		}
	}
	return o.hostBarrier(ctx)
}
