package libgodist

import (
	"errors"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
)

// Each collective's run, in one place: the group's offload takes the op
// when it has one (shared memory between co-located ranks), else the
// group's algo.Table picks one of the engine's algorithms (one per file,
// each written against comm's sends and receives only; libgodist/algo
// holds every choice and its sizes).

// offloaded reports whether the offload ran the op, and its error. An
// offload that declines leaves the op to the engine.
func offloaded(err error) (bool, error) {
	if errors.Is(err, backend.ErrDeclined) {
		return false, nil
	}
	return true, err
}

// allReduce reduces buf in place across the group. Over the transport:
// recursive doubling (allreduce_rd.go) for small buffers, log2(P)
// exchanges of the whole buffer at the lowest latency; a ring
// reduce-scatter + allgather for larger ones, 2(P-1)/P of the buffer on
// the wire per rank, run on the caller's thread while a chunk fits
// (allreduce_ring_direct.go) and pipelined beyond (allreduce_ring.go).
// Every path gives bitwise identical results on every rank: the kernels
// are commutative bit for bit, and in the ring each chunk's final value is
// computed once and copied.
func allReduce(c *comm, buf []byte, s reduceSpec) error {
	if err := s.pre(buf); err != nil {
		return err
	}
	if c.size > 1 {
		if err := allReduceRun(c, buf, s); err != nil {
			return err
		}
	}
	return s.post(buf, c.size)
}

func allReduceRun(c *comm, buf []byte, s reduceSpec) error {
	if t, ok := c.offload.(backend.TypedOffload); ok {
		if done, err := offloaded(t.AllReduceTyped(c.ctx, buf, s.reduction())); done {
			return err
		}
	}
	if c.offload != nil {
		if done, err := offloaded(c.offload.AllReduce(c.ctx, buf, s.dt.Size(), s.combiner())); done {
			return err
		}
	}
	switch c.tune.AllReduce(len(buf)/s.dt.Size(), s.dt.Size(), c.size, c.spare) {
	case algo.RecursiveDoubling:
		return allReduceRD(c, buf, s)
	case algo.RingDirect:
		return allReduceRingDirect(c, buf, s)
	default:
		return allReduceRing(c, buf, s)
	}
}

// broadcast sends root's buf to every rank: a binomial tree
// (broadcast_tree.go), or for large buffers on more than two ranks one
// that forwards in segments to all children at once
// (broadcast_pipelined.go).
func broadcast(c *comm, buf []byte, root int) error {
	if c.offload != nil {
		if done, err := offloaded(c.offload.Broadcast(c.ctx, buf, root)); done {
			return err
		}
	}
	if c.tune.Broadcast(len(buf), c.size) == algo.TreePipelined {
		return broadcastPipelined(c, buf, root, c.tune.TreeSegment(len(buf), c.allSpare))
	}
	return broadcastTree(c, buf, root)
}

// allGather places every rank's in into outs[rank] on every rank
// (allgather_ring.go).
func allGather(c *comm, in []byte, outs [][]byte) error {
	if c.offload != nil {
		if done, err := offloaded(c.offload.AllGather(c.ctx, in, outs)); done {
			return err
		}
	}
	return allGatherRing(c, in, outs)
}

// reduceScatter leaves on rank r the reduction over all ranks of ins[r]
// (reduce_scatter_ring.go). Inputs are never modified: PREMUL_SUM scales
// copies of them.
func reduceScatter(c *comm, ins [][]byte, out []byte, s reduceSpec) error {
	if s.op == reduce.PremulSum {
		scaled := make([][]byte, len(ins))
		for i, b := range ins {
			scaled[i] = append([]byte(nil), b...)
			if err := s.pre(scaled[i]); err != nil {
				return err
			}
		}
		ins = scaled
	}
	if c.size == 1 {
		copy(out, ins[0])
		return s.post(out, 1)
	}
	done := false
	if t, ok := c.offload.(backend.TypedOffload); ok {
		var err error
		if done, err = offloaded(t.ReduceScatterTyped(c.ctx, ins, out, s.reduction())); err != nil {
			return err
		}
	}
	if c.offload != nil && !done {
		var err error
		if done, err = offloaded(c.offload.ReduceScatter(c.ctx, ins, out, s.dt.Size(), s.combiner())); err != nil {
			return err
		}
	}
	if !done {
		if err := reduceScatterRing(c, ins, out, s); err != nil {
			return err
		}
	}
	return s.post(out, c.size)
}

// allToAll sends ins[j] to rank j, which stores it in outs[rank]
// (alltoall_pairwise.go).
func allToAll(c *comm, ins, outs [][]byte) error {
	if c.offload != nil {
		if done, err := offloaded(c.offload.AllToAll(c.ctx, ins, outs)); done {
			return err
		}
	}
	return allToAllPairwise(c, ins, outs)
}

// barrier returns once every rank has entered it (barrier_dissemination.go).
func barrier(c *comm) error {
	if c.offload != nil {
		if done, err := offloaded(c.offload.Barrier(c.ctx)); done {
			return err
		}
	}
	return barrierDissemination(c)
}

// reduceRooted reduces every rank's buf into root's (reduce_tree.go); the
// other ranks' buffers are left unchanged.
func reduceRooted(c *comm, buf []byte, root int, s reduceSpec) error {
	if t, ok := c.offload.(backend.TypedOffload); ok && c.size > 1 {
		acc := buf
		if c.rank != root && s.op == reduce.PremulSum {
			acc = append([]byte(nil), buf...)
		}
		if err := s.pre(acc); err != nil {
			return err
		}
		done, err := offloaded(t.ReduceTyped(c.ctx, acc, root, s.reduction()))
		if done {
			if err != nil || c.rank != root {
				return err
			}
			return s.post(buf, c.size)
		}
		if c.rank == root && s.op == reduce.PremulSum {
			s.op = reduce.Sum // the root's buffer is scaled already
		}
	}
	return reduceTo(c, buf, root, s)
}

// gatherRooted collects every rank's in into root's outs (gather.go).
func gatherRooted(c *comm, in []byte, outs [][]byte, root int) error {
	if t, ok := c.offload.(backend.TypedOffload); ok {
		if done, err := offloaded(t.Gather(c.ctx, in, outs, root)); done {
			return err
		}
	}
	return gather(c, in, outs, root)
}

// scatterRooted sends root's ins[r] to rank r's out (gather.go).
func scatterRooted(c *comm, ins [][]byte, out []byte, root int) error {
	if t, ok := c.offload.(backend.TypedOffload); ok {
		if done, err := offloaded(t.Scatter(c.ctx, ins, out, root)); done {
			return err
		}
	}
	return scatter(c, ins, out, root)
}
