package libgodist

import (
	"strings"

	"github.com/godist/godist/libgodist/backend"
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

// combine3 sets dst = a (op) b (the shape of backend.Combine).
func (s reduceSpec) combine3(dst, a, b []byte) error { return reduce.Combine3(s.op, s.dt, dst, a, b) }

// combiner is combine3 as a function value for an offload; unlike the
// method value s.combine3 it allocates nothing.
func (s reduceSpec) combiner() backend.Combine { return reduce.Combiner(s.op, s.dt) }

// reduction is the spec as a TypedOffload takes it: AVG and PREMUL_SUM
// combine as SUM (pre and post scale).
func (s reduceSpec) reduction() backend.Reduction {
	op := s.op
	if op == reduce.Avg || op == reduce.PremulSum {
		op = reduce.Sum
	}
	return backend.Reduction{DType: s.dt, Op: op}
}
