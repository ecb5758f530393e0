package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
)

// NCCL's ncclDataType_t and ncclRedOp_t values (nccl.h, the same from 2.18
// to 2.30; header_test.go checks them against the wheel's nccl.h).
const (
	ncclInt8     = 0
	ncclUint8    = 1
	ncclInt32    = 2
	ncclUint32   = 3
	ncclInt64    = 4
	ncclUint64   = 5
	ncclFloat16  = 6
	ncclFloat32  = 7
	ncclFloat64  = 8
	ncclBfloat16 = 9

	ncclSum  = 0
	ncclProd = 1
	ncclMax  = 2
	ncclMin  = 3
	ncclAvg  = 4
)

// dtypes maps godist's dtype codes to NCCL's. Complex tensors reach here
// as their real views (python/godist/_nccl.py); NCCL has no int16.
var dtypes = map[reduce.DType]int32{
	reduce.Float16:  ncclFloat16,
	reduce.BFloat16: ncclBfloat16,
	reduce.Float32:  ncclFloat32,
	reduce.Float64:  ncclFloat64,
	reduce.Int8:     ncclInt8,
	reduce.Uint8:    ncclUint8,
	reduce.Int32:    ncclInt32,
	reduce.Int64:    ncclInt64,
	reduce.Bool:     ncclUint8,
}

// ops maps c10d's reduce ops to NCCL's. BAND, BOR and BXOR have no NCCL
// op; PREMUL_SUM is made per call (premul).
var ops = map[reduce.Op]int32{
	reduce.Sum:     ncclSum,
	reduce.Avg:     ncclAvg,
	reduce.Product: ncclProd,
	reduce.Min:     ncclMin,
	reduce.Max:     ncclMax,
}

// DType returns NCCL's code for d, or an error wrapping
// backend.ErrUnsupported.
func DType(d reduce.DType) (int32, error) {
	v, ok := dtypes[d]
	if !ok {
		return 0, fmt.Errorf("%w: NCCL cannot reduce %v tensors", backend.ErrUnsupported, d)
	}
	return v, nil
}

// RedOp returns NCCL's op for o on dtype d, as torch's nccl backend maps
// it: on bool tensors SUM is MAX (logical or) and PRODUCT is MIN (logical
// and).
func RedOp(o reduce.Op, d reduce.DType) (int32, error) {
	if d == reduce.Bool {
		switch o {
		case reduce.Sum, reduce.Max:
			return ncclMax, nil
		case reduce.Product, reduce.Min:
			return ncclMin, nil
		}
		return 0, fmt.Errorf("%w: reduce op %v on bool tensors", backend.ErrUnsupported, o)
	}
	v, ok := ops[o]
	if !ok {
		return 0, fmt.Errorf("%w: reduce op %v (NCCL has no bitwise reductions, as in torch's nccl backend)",
			backend.ErrUnsupported, o)
	}
	return v, nil
}

// Reduces reports whether NCCL reduces d with o (PREMUL_SUM included): nil,
// or the error toC returns for that pair, wrapping backend.ErrUnsupported.
func Reduces(o reduce.Op, d reduce.DType) error {
	if _, err := DType(d); err != nil {
		return err
	}
	if o == reduce.PremulSum {
		_, err := scalar(0, d)
		return err
	}
	_, err := RedOp(o, d)
	return err
}

// ComplexOps are the reduce ops that act on the real and imaginary parts
// of a complex tensor alike, so that reducing its real view (two floats per
// element) gives the complex result: how python/godist/_nccl.py reduces
// complex tensors, which NCCL has no type for.
var ComplexOps = []reduce.Op{reduce.Sum, reduce.Avg, reduce.PremulSum}

// Rules is the table of what NCCL reduces, for python/godist/_nccl.py's
// checks (capi's godist_facts): the reduce ops per dtype, by godist's
// codes, for each dtype NCCL reduces at all; and ComplexOps.
func Rules() (ops map[reduce.DType][]reduce.Op, complexOps []reduce.Op) {
	ops = map[reduce.DType][]reduce.Op{}
	for d := reduce.DType(0); d.Valid(); d++ {
		for o := reduce.Op(0); o.Valid(); o++ {
			if Reduces(o, d) == nil {
				ops[d] = append(ops[d], o)
			}
		}
	}
	return ops, ComplexOps
}

// scalar is PREMUL_SUM's factor as a value of d, in the low bytes of a
// uint64 (the shim passes its address as the host-immediate scalar).
func scalar(f float64, d reduce.DType) (uint64, error) {
	switch d {
	case reduce.Float16:
		return uint64(reduce.Float32ToFloat16(float32(f))), nil
	case reduce.BFloat16:
		return uint64(reduce.Float32ToBFloat16(float32(f))), nil
	case reduce.Float32:
		return uint64(math.Float32bits(float32(f))), nil
	case reduce.Float64:
		return math.Float64bits(f), nil
	}
	return 0, fmt.Errorf("%w: PREMUL_SUM on %v tensors (floating point only)", backend.ErrUnsupported, d)
}

// toC fills g from c.
func toC(c *backend.DeviceCall, g *C.gn_call) error {
	*g = C.gn_call{kind: C.int32_t(c.Kind), root: C.int32_t(c.Root), count: C.uint64_t(c.Count)}
	setAddr(unsafe.Pointer(&g.send), c.Send)
	setAddr(unsafe.Pointer(&g.recv), c.Recv)
	if c.Count < 0 {
		return fmt.Errorf("%w: negative count %d", backend.ErrUnsupported, c.Count)
	}
	if c.Bytes {
		g.dtype = ncclUint8
		return nil
	}
	dt, err := DType(c.DType)
	if err != nil {
		return err
	}
	g.dtype = C.int32_t(dt)
	switch c.Kind {
	case backend.CallAllReduce, backend.CallReduce, backend.CallReduceScatter:
	default:
		return nil
	}
	if c.Op == reduce.PremulSum {
		s, err := scalar(c.Factor, c.DType)
		if err != nil {
			return err
		}
		g.premul, g.scalar = 1, C.uint64_t(s)
		return nil
	}
	op, err := RedOp(c.Op, c.DType)
	if err != nil {
		return err
	}
	g.op = C.int32_t(op)
	return nil
}

// setAddr stores device address a in the C pointer field at p: device
// memory is not Go memory, so it never goes through an unsafe.Pointer
// conversion of its own.
func setAddr(p unsafe.Pointer, a uintptr) { *(*uintptr)(p) = a }
