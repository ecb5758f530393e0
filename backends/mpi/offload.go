package mpi

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Offloader hands a group's collectives to MPI's own (non-blocking)
// collectives when the group's fabric is MPI's (GODIST_TRANSPORT=mpi).
type Offloader struct{}

var _ backend.Offloader = Offloader{}

// NewOffloader returns the MPI offloader.
func NewOffloader() Offloader { return Offloader{} }

// Describe implements backend.Offloader.
func (Offloader) Describe(*wire.PeerRecord) {}

// Join implements backend.Offloader: every rank must have the MPI fabric.
func (Offloader) Join(ctx context.Context, s *backend.Setup, tr transport.Transport) (backend.Offload, transport.Transport, error) {
	t, ok := tr.(*Transport)
	agreed, err := s.Agree(ctx, ok)
	if err != nil || !agreed {
		return nil, tr, err
	}
	return &Offload{t: t}, tr, nil
}

// Close implements backend.Offloader.
func (Offloader) Close() {}

// Offload runs collectives as MPI collectives on the group's collective
// communicator, one at a time in the group's issue order. Each waits for
// its requests until the op's deadline; MPI cannot cancel a collective, so
// one that times out is abandoned and the engine marks the group broken.
type Offload struct{ t *Transport }

var _ backend.TypedOffload = (*Offload)(nil)

// maxCount bounds the elements (or bytes) of one MPI call: counts are C ints.
const maxCount = 1 << 30

// Name implements backend.Offload.
func (o *Offload) Name() string { return "mpi" }

func (o *Offload) wait(ctx context.Context, what string, reqs []Request, keep ...[]byte) error {
	wctx, done := merge(ctx, o.t.ctx)
	defer done()
	return o.t.lib.waitAll(wctx, what, reqs, keep...)
}

// chunks calls issue for each piece of at most maxCount elements of n,
// elem bytes each, and waits for all of them.
func (o *Offload) chunks(ctx context.Context, what string, buf []byte, elem int,
	issue func(part []byte, count int64) (Request, error)) error {
	n := len(buf) / elem
	var reqs []Request
	for off := 0; off < n || (n == 0 && off == 0); off += maxCount {
		k := min(maxCount, n-off)
		r, err := issue(buf[off*elem:(off+k)*elem], int64(k))
		if err != nil {
			if len(reqs) > 0 {
				o.t.lib.abandon(reqs, 0)
				keepForever(buf)
			}
			return fmt.Errorf("%s: %w", what, err)
		}
		reqs = append(reqs, r)
		if n == 0 {
			break
		}
	}
	return o.wait(ctx, what, reqs, buf)
}

// AllReduce implements backend.Offload: declined, AllReduceTyped runs it.
func (o *Offload) AllReduce(context.Context, []byte, int, backend.Combine) error {
	return backend.ErrDeclined
}

// AllReduceTyped implements backend.TypedOffload.
func (o *Offload) AllReduceTyped(ctx context.Context, buf []byte, r backend.Reduction) error {
	return o.chunks(ctx, "MPI_Iallreduce", buf, r.DType.Size(), func(p []byte, n int64) (Request, error) {
		return o.t.lib.Iallreduce(o.t.coll, p, n, r.DType, r.Op)
	})
}

// ReduceTyped implements backend.TypedOffload.
func (o *Offload) ReduceTyped(ctx context.Context, buf []byte, root int, r backend.Reduction) error {
	return o.chunks(ctx, "MPI_Ireduce", buf, r.DType.Size(), func(p []byte, n int64) (Request, error) {
		return o.t.lib.Ireduce(o.t.coll, p, n, r.DType, r.Op, root)
	})
}

// Broadcast implements backend.Offload.
func (o *Offload) Broadcast(ctx context.Context, buf []byte, root int) error {
	return o.chunks(ctx, "MPI_Ibcast", buf, 1, func(p []byte, _ int64) (Request, error) {
		return o.t.lib.Ibcast(o.t.coll, p, root)
	})
}

// ReduceScatter implements backend.Offload: declined, ReduceScatterTyped runs it.
func (o *Offload) ReduceScatter(context.Context, [][]byte, []byte, int, backend.Combine) error {
	return backend.ErrDeclined
}

// ReduceScatterTyped implements backend.TypedOffload.
func (o *Offload) ReduceScatterTyped(ctx context.Context, ins [][]byte, out []byte, r backend.Reduction) (err error) {
	count := len(out) / r.DType.Size()
	if count > maxCount {
		return backend.ErrDeclined
	}
	in, free := gatherIn(ins, out)
	defer func() { release(free, err) }()
	req, err := o.t.lib.IreduceScatterBlock(o.t.coll, in, out, int64(count), r.DType, r.Op)
	if err != nil {
		return fmt.Errorf("MPI_Ireduce_scatter_block: %w", err)
	}
	return o.wait(ctx, "MPI_Ireduce_scatter_block", []Request{req}, in, out)
}

// AllGather implements backend.Offload.
func (o *Offload) AllGather(ctx context.Context, in []byte, outs [][]byte) (err error) {
	if len(in) > maxCount {
		return backend.ErrDeclined
	}
	out, scatterBack := spanOut(outs)
	in, free := gatherIn([][]byte{in}, out) // a copy when in is a part of out (all_gather_into_tensor in place)
	defer func() { release(free, err) }()
	req, err := o.t.lib.Iallgather(o.t.coll, in, out)
	if err != nil {
		scatterBack(false)
		return fmt.Errorf("MPI_Iallgather: %w", err)
	}
	err = o.wait(ctx, "MPI_Iallgather", []Request{req}, in, out)
	scatterBack(err == nil)
	return err
}

// AllToAll implements backend.Offload.
func (o *Offload) AllToAll(ctx context.Context, ins, outs [][]byte) (err error) {
	out, scatterBack := spanOut(outs)
	in, free := gatherIn(ins, out)
	defer func() { release(free, err) }()
	sc, sd := countsOf(ins)
	rc, rd := countsOf(outs)
	req, err := o.t.lib.Ialltoallv(o.t.coll, in, sc, sd, out, rc, rd)
	if err != nil {
		scatterBack(false)
		return fmt.Errorf("MPI_Ialltoallv: %w", err)
	}
	err = o.wait(ctx, "MPI_Ialltoallv", []Request{req}, in, out)
	scatterBack(err == nil)
	return err
}

// Gather implements backend.TypedOffload.
func (o *Offload) Gather(ctx context.Context, in []byte, outs [][]byte, root int) (err error) {
	var out []byte
	var rc, rd []int64
	scatterBack := func(bool) {}
	if o.t.rank == root {
		out, scatterBack = spanOut(outs)
		rc, rd = countsOf(outs)
		var free func()
		in, free = gatherIn([][]byte{in}, out)
		defer func() { release(free, err) }()
	}
	req, err := o.t.lib.Igatherv(o.t.coll, in, out, rc, rd, root)
	if err != nil {
		scatterBack(false)
		return fmt.Errorf("MPI_Igatherv: %w", err)
	}
	err = o.wait(ctx, "MPI_Igatherv", []Request{req}, in, out)
	scatterBack(err == nil)
	return err
}

// Scatter implements backend.TypedOffload.
func (o *Offload) Scatter(ctx context.Context, ins [][]byte, out []byte, root int) (err error) {
	var in []byte
	var sc, sd []int64
	free := func() {}
	if o.t.rank == root {
		in, free = gatherIn(ins, out)
		sc, sd = countsOf(ins)
	}
	defer func() { release(free, err) }()
	req, err := o.t.lib.Iscatterv(o.t.coll, in, sc, sd, out, root)
	if err != nil {
		return fmt.Errorf("MPI_Iscatterv: %w", err)
	}
	return o.wait(ctx, "MPI_Iscatterv", []Request{req}, in, out)
}

// Barrier implements backend.Offload.
func (o *Offload) Barrier(ctx context.Context) error {
	req, err := o.t.lib.Ibarrier(o.t.coll)
	if err != nil {
		return fmt.Errorf("MPI_Ibarrier: %w", err)
	}
	return o.wait(ctx, "MPI_Ibarrier", []Request{req})
}

// Abort implements backend.Offload: the transport's abort ends every wait.
func (o *Offload) Abort(err error) { o.t.Abort(err) }

// Close implements backend.Offload.
func (o *Offload) Close() error { return nil }

// contiguous returns the parts of bufs as one slice when they follow each
// other in memory, in order.
func contiguous(bufs [][]byte) ([]byte, bool) {
	var first unsafe.Pointer
	var next uintptr
	total := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		p := unsafe.Pointer(unsafe.SliceData(b))
		if first == nil {
			first = p
		} else if uintptr(p) != next {
			return nil, false
		}
		next = uintptr(p) + uintptr(len(b))
		total += len(b)
	}
	if first == nil {
		return nil, true
	}
	return unsafe.Slice((*byte)(first), total), true
}

// release frees a temporary unless the op failed: MPI may still read it.
func release(free func(), err error) {
	if err == nil {
		free()
	}
}

// overlaps reports whether a and b share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// gatherIn is ins as one buffer: the parts themselves when they are
// contiguous and do not overlap out (MPI forbids a send buffer that
// overlaps the receive buffer), else a copy in C memory (free releases it).
func gatherIn(ins [][]byte, out []byte) ([]byte, func()) {
	if b, ok := contiguous(ins); ok && !overlaps(b, out) {
		return b, func() {}
	}
	n := 0
	for _, b := range ins {
		n += len(b)
	}
	buf, free := Alloc(n)
	off := 0
	for _, b := range ins {
		off += copy(buf[off:], b)
	}
	return buf, free
}

// spanOut is outs as one buffer to receive into, and the function that
// copies it out to the parts (when it had to be a copy) once done.
func spanOut(outs [][]byte) ([]byte, func(ok bool)) {
	if b, ok := contiguous(outs); ok {
		return b, func(bool) {}
	}
	n := 0
	for _, b := range outs {
		n += len(b)
	}
	buf, free := Alloc(n)
	return buf, func(ok bool) {
		if ok {
			off := 0
			for _, b := range outs {
				off += copy(b, buf[off:])
			}
			free()
		}
		// Not ok: MPI may still write into buf; it is never freed.
	}
}

// countsOf is the byte counts and displacements of parts laid end to end.
func countsOf(parts [][]byte) (counts, displs []int64) {
	counts = make([]int64, len(parts))
	displs = make([]int64, len(parts))
	var off int64
	for i, b := range parts {
		counts[i], displs[i] = int64(len(b)), off
		off += int64(len(b))
	}
	return counts, displs
}
