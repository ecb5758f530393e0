package libgodist

import (
	"strings"

	"github.com/godist/godist/libgodist/reduce"
)

// reduceSpec is what a reducing collective needs to know about its data.
type reduceSpec struct {
	dt     reduce.DType
	op     reduce.Op
	factor float64 // PREMUL_SUM's factor
}

func (s reduceSpec) check() error {
	if !s.dt.Valid() {
		return invalidf("unknown dtype code %d", s.dt)
	}
	if err := reduce.Check(s.op, s.dt); err != nil {
		return invalidf("%v", strings.TrimPrefix(err.Error(), "reduce: "))
	}
	return nil
}

// pre applies PREMUL_SUM's multiplication to a rank's own contribution.
func (s reduceSpec) pre(buf []byte) error {
	if s.op == reduce.PremulSum {
		return reduce.Scale(s.dt, buf, s.factor)
	}
	return nil
}

// post applies AVG's division to a final result.
func (s reduceSpec) post(buf []byte, n int) error {
	if s.op == reduce.Avg {
		return reduce.Divide(s.dt, buf, n)
	}
	return nil
}

// combine sets dst = dst (op) src.
func (s reduceSpec) combine(dst, src []byte) error { return reduce.Combine(s.op, s.dt, dst, src) }

// allReduceRDMax is the largest message (bytes) reduced with recursive
// doubling; larger ones use the ring. A variable so tests can move it.
var allReduceRDMax = 64 << 10

// allReduce reduces buf in place across the group.
//
// Algorithms: with shared memory (co-located ranks), the arena's one-shot
// or two-shot all-reduce (backends/shm); over TCP, recursive doubling (allreduce_rd.go) for small messages: log2(P)
// exchanges of the whole buffer, lowest latency; ring reduce-scatter +
// allgather for larger ones: 2(P-1)/P of the buffer on the wire per rank,
// bandwidth-optimal, run on the caller's thread while a chunk is at most
// ringDirectMax, ringDirectPairMax on two ranks (allreduce_ring_direct.go),
// and pipelined beyond
// (allreduce_ring.go). Both give bitwise identical results on
// every rank (the kernels are commutative bit for bit, and in the ring each
// chunk's final value is computed once and copied).
func allReduce(c *comm, buf []byte, s reduceSpec) error {
	if err := s.pre(buf); err != nil {
		return err
	}
	if c.size > 1 {
		count := len(buf) / s.dt.Size()
		var err error
		if c.arena != nil {
			err = c.arena.AllReduce(c.ctx, buf, s.dt.Size(), s.combine3)
		} else if len(buf) <= allReduceRDMax || count < c.size {
			err = allReduceRD(c, buf, s)
		} else if ringDirect(count, s.dt.Size(), c.size, c.spare) {
			err = allReduceRingDirect(c, buf, s)
		} else {
			err = allReduceRing(c, buf, s)
		}
		if err != nil {
			return err
		}
	}
	return s.post(buf, c.size)
}

const opPremulSum = reduce.PremulSum

// combine3 sets dst = a (op) b (the shape of shm.CombineFunc).
func (s reduceSpec) combine3(dst, a, b []byte) error { return reduce.Combine3(s.op, s.dt, dst, a, b) }
