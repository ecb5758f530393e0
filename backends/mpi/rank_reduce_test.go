package mpi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"regexp"

	"github.com/godist/godist/libgodist/reduce"
)

const nElems = 37

var dtypes = []reduce.DType{reduce.Float16, reduce.BFloat16, reduce.Float32, reduce.Float64, reduce.Complex64,
	reduce.Complex128, reduce.Int8, reduce.Uint8, reduce.Int16, reduce.Int32, reduce.Int64, reduce.Bool}

var ops = []reduce.Op{reduce.Sum, reduce.Product, reduce.Min, reduce.Max, reduce.BAnd, reduce.BOr, reduce.BXor}

// halfIdentity is the element that leaves every float16/bfloat16 value
// unchanged under op (bit for bit, after the first rounding), so ranks >= 2
// contribute it and the result does not depend on MPI's reduction order.
func halfIdentity(dt reduce.DType, op reduce.Op) uint16 {
	bf := dt == reduce.BFloat16
	switch op {
	case reduce.Sum:
		return 0x8000
	case reduce.Product:
		if bf {
			return 0x3f80
		}
		return 0x3c00
	case reduce.Min:
		if bf {
			return 0x7f80
		}
		return 0x7c00
	default: // Max
		if bf {
			return 0xff80
		}
		return 0xfc00
	}
}

// input is rank's deterministic input for dt and op: values whose
// reduction is exact (so independent of MPI's order) for float32/64 and
// complex; any bits for integers; 0/1 for bool; random bits (NaNs,
// infinities, subnormals included) on ranks 0 and 1 and the identity on the
// others for float16/bfloat16.
func input(rank int, dt reduce.DType, op reduce.Op, n int) []byte {
	b := make([]byte, n*dt.Size())
	seed := uint64(rank+1)*0x9e3779b97f4a7c15 + uint64(dt)*1000003 + uint64(op)*7919
	next := func() uint64 {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return seed
	}
	small := func(i, k int) float64 { return float64((i*7+rank*3+k*5)%9 - 4) }
	for i := 0; i < n; i++ {
		switch dt {
		case reduce.Float16, reduce.BFloat16:
			v := uint16(next())
			if rank >= 2 {
				v = halfIdentity(dt, op)
			}
			binary.LittleEndian.PutUint16(b[2*i:], v)
		case reduce.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(small(i, 0))))
		case reduce.Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(small(i, 0)))
		case reduce.Complex64:
			binary.LittleEndian.PutUint32(b[8*i:], math.Float32bits(float32(small(i, 0))))
			binary.LittleEndian.PutUint32(b[8*i+4:], math.Float32bits(float32(small(i, 1))))
		case reduce.Complex128:
			binary.LittleEndian.PutUint64(b[16*i:], math.Float64bits(small(i, 0)))
			binary.LittleEndian.PutUint64(b[16*i+8:], math.Float64bits(small(i, 1)))
		case reduce.Bool:
			if (i+rank)%3 == 0 || next()%2 == 0 {
				b[i] = 1
			}
		default:
			for k := 0; k < dt.Size(); k++ {
				b[i*dt.Size()+k] = byte(next())
			}
		}
	}
	return b
}

// reference is the reduction of every rank's input by libgodist/reduce.
func reference(n int, dt reduce.DType, op reduce.Op, count int) ([]byte, error) {
	ref := input(0, dt, op, count)
	for r := 1; r < n; r++ {
		if err := reduce.Combine(op, dt, ref, input(r, dt, op, count)); err != nil {
			return nil, err
		}
	}
	return ref, nil
}

// mpiSupports says whether the shim reduces dt with op.
func mpiSupports(dt reduce.DType, op reduce.Op) bool {
	return reduce.Check(op, dt) == nil
}

func (r *rankT) allreduce() error {
	for _, dt := range dtypes {
		for _, op := range ops {
			buf, free := cbuf(input(r.rank, dt, op, nElems))
			req, err := r.l.Iallreduce(World, buf, nElems, dt, op)
			if !mpiSupports(dt, op) {
				if !isArgError(err) {
					r.fail("Iallreduce %s %s: got %v, want GM_ERR_ARG", dt, op, err)
				}
				free()
				continue
			}
			if err != nil {
				free()
				return fmt.Errorf("Iallreduce %s %s: %w", dt, op, err)
			}
			if _, _, err := r.wait(req); err != nil {
				free()
				return fmt.Errorf("Iallreduce %s %s: %w", dt, op, err)
			}
			ref, err := reference(r.n, dt, op, nElems)
			if err != nil {
				return err
			}
			if !bytes.Equal(buf, ref) {
				r.fail("Iallreduce %s %s: got %x, want %x", dt, op, buf, ref)
			}
			free()
		}
	}
	return nil
}

func (r *rankT) reduceRoot() error {
	root := r.n - 1
	for _, dt := range []reduce.DType{reduce.Float32, reduce.BFloat16, reduce.Int64} {
		in := input(r.rank, dt, reduce.Sum, nElems)
		buf, free := cbuf(in)
		defer free()
		req, err := r.l.Ireduce(World, buf, nElems, dt, reduce.Sum, root)
		if err != nil {
			return fmt.Errorf("Ireduce %s: %w", dt, err)
		}
		if _, _, err := r.wait(req); err != nil {
			return fmt.Errorf("Ireduce %s: %w", dt, err)
		}
		want := in
		if r.rank == root {
			if want, err = reference(r.n, dt, reduce.Sum, nElems); err != nil {
				return err
			}
		}
		if !bytes.Equal(buf, want) {
			r.fail("Ireduce %s root %d: got %x, want %x", dt, root, buf, want)
		}
	}
	return nil
}

func (r *rankT) reduceScatter() error {
	const count = 5
	dt := reduce.Int32
	in, freeIn := cbuf(input(r.rank, dt, reduce.Sum, count*r.n))
	defer freeIn()
	out, freeOut := Alloc(count * 4)
	defer freeOut()
	req, err := r.l.IreduceScatterBlock(World, in, out, count, dt, reduce.Sum)
	if err != nil {
		return fmt.Errorf("IreduceScatterBlock: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("IreduceScatterBlock: %w", err)
	}
	ref, err := reference(r.n, dt, reduce.Sum, count*r.n)
	if err != nil {
		return err
	}
	if want := ref[r.rank*count*4 : (r.rank+1)*count*4]; !bytes.Equal(out, want) {
		r.fail("IreduceScatterBlock: got %x, want %x", out, want)
	}
	return nil
}

var errText = regexp.MustCompile(`^MPI_Iallreduce: MPI error 100001 \(GM_ERR_ARG`)

func (r *rankT) unsupported() error {
	buf, free := Alloc(16)
	defer free()
	_, err := r.l.Iallreduce(World, buf, 4, reduce.Float32, reduce.BAnd)
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrArg || !errText.MatchString(e.Error()) {
		r.fail("BAND on float32: %v, want an *Error with GM_ERR_ARG", err)
	}
	if _, err := r.l.Iallreduce(World, buf, 1<<40, reduce.Float32, reduce.Sum); !isArgError(err) {
		r.fail("count 2^40: %v, want GM_ERR_ARG", err)
	}
	return nil
}
