package hier

import (
	"context"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/scratch"
	"github.com/godist/godist/libgodist/transport"
)

// The steps between hosts: messages among members (group ranks, one per
// host, in host order) over the group's transport, tagged with the
// offload's call number so that calls never mix. Every step here is
// written against transport.Transport alone.

// xfer is one offload call's messages among members.
type xfer struct {
	ctx     context.Context
	tr      transport.Transport
	seq     uint64
	members []int // group ranks, one per host
	me      int   // this rank's index in members
	table   *algo.Table
}

func (x *xfer) tag(step uint16) transport.Tag { return transport.OffloadTag(x.seq, step) }

func (x *xfer) send(to int, step uint16, b []byte) error {
	return x.tr.Send(x.ctx, x.members[to], x.tag(step), b)
}

func (x *xfer) post(from int, step uint16, b []byte) *transport.Recv {
	return x.tr.PostRecv(x.members[from], x.tag(step), b)
}

func (x *xfer) postFold(from int, step uint16, b []byte, elem int, combine backend.Combine) *transport.Recv {
	f := transport.Fold{Elem: elem, Combine: func(dst, src []byte) error { return combine(dst, dst, src) }}
	return x.tr.PostFold(x.members[from], x.tag(step), b, f)
}

// sendRecv sends sb to member to while receiving rb from member from.
func (x *xfer) sendRecv(to int, sb []byte, from int, rb *transport.Recv, step uint16) error {
	if err := x.send(to, step, sb); err != nil {
		rb.Cancel(err)
		return err
	}
	return rb.Wait(x.ctx)
}

// allReduce reduces buf across the members, in place: whole buffers
// exchanged in one round, each member reducing in host order, or round a
// ring, each member sending 2(H-1)/H of the buffer (algo.Table.HierCross
// chooses).
func (x *xfer) allReduce(buf []byte, elem int, combine backend.Combine, step uint16) error {
	switch {
	case len(x.members) == 1:
		return nil
	case x.table.HierCross(len(buf)/elem, elem, len(x.members)) == algo.CrossSmall:
		return x.allReduceSmall(buf, combine, step)
	default:
		return x.allReduceRing(buf, elem, combine, step)
	}
}

// ringSteps is the number of steps an all-reduce among h members takes
// at most: tags step to step+ringSteps(h)-1.
func ringSteps(h int) int { return 2 * (h - 1) }

// allReduceSmall sends buf to every member and reduces the members'
// buffers in host order: every member computes the same bits from the
// same inputs.
func (x *xfer) allReduceSmall(buf []byte, combine backend.Combine, step uint16) (err error) {
	n, H := len(buf), len(x.members)
	tmp := scratch.Get(n * H)
	defer func() {
		if err == nil {
			scratch.Put(tmp)
		}
	}()
	part := func(j int) []byte { return tmp[j*n : (j+1)*n] }
	copy(part(x.me), buf)
	if err := x.exchange(func(int) []byte { return buf }, part, step); err != nil {
		return err
	}
	acc := part(0)
	for j := 1; j < H; j++ {
		if err := combine(acc, acc, part(j)); err != nil {
			return err
		}
	}
	copy(buf, acc)
	return nil
}

// allReduceRing is a ring reduce-scatter then all-gather over the members,
// the buffer in H chunks: each chunk is reduced once, along the ring, by
// folding each message into the chunk as it arrives, then passed on.
func (x *xfer) allReduceRing(buf []byte, elem int, combine backend.Combine, step uint16) error {
	H, me := len(x.members), x.me
	chunk := splitElems(buf, H, elem)
	next, prev := (me+1)%H, (me+H-1)%H
	at := func(i int) []byte { return chunk[((i%H)+H)%H] }
	for k := range H - 1 {
		r := x.postFold(prev, step+uint16(k), at(me-k-1), elem, combine)
		if err := x.sendRecv(next, at(me-k), prev, r, step+uint16(k)); err != nil {
			return err
		}
	}
	for k := range H - 1 {
		s := step + uint16(H-1+k)
		r := x.post(prev, s, at(me-k))
		if err := x.sendRecv(next, at(me+1-k), prev, r, s); err != nil {
			return err
		}
	}
	return nil
}

// broadcast copies member root's buf into every member's: root sends to
// each member in turn (a tree would cost more rounds than the few hosts
// of a group save).
func (x *xfer) broadcast(buf []byte, root int, step uint16) error {
	if len(x.members) == 1 {
		return nil
	}
	if x.me != root {
		return x.post(root, step, buf).Wait(x.ctx)
	}
	for j := range x.members {
		if j == root {
			continue
		}
		if err := x.send(j, step, buf); err != nil {
			return err
		}
	}
	return nil
}

// allGather exchanges blocks: every member's in lands in outs[its index]
// on every member.
func (x *xfer) allGather(in []byte, outs [][]byte, step uint16) error {
	if err := x.exchange(func(int) []byte { return in }, func(j int) []byte { return outs[j] }, step); err != nil {
		return err
	}
	copy(outs[x.me], in)
	return nil
}

// exchange sends out(j) to every other member j while receiving member
// j's message into in(j), and waits for every receive within the op's
// deadline.
func (x *xfer) exchange(out, in func(j int) []byte, step uint16) error {
	rs := make([]*transport.Recv, 0, len(x.members)-1)
	for j := range x.members {
		if j != x.me {
			rs = append(rs, x.post(j, step, in(j)))
		}
	}
	for j := range x.members {
		if j == x.me {
			continue
		}
		if err := x.send(j, step, out(j)); err != nil {
			cancel(rs, err)
			return err
		}
	}
	return transport.WaitAll(x.ctx, rs)
}

// reduceScatter leaves in out the reduction over the members of their
// ins[me], in host order; ins[j] goes to member j.
func (x *xfer) reduceScatter(ins [][]byte, out []byte, combine backend.Combine, step uint16) (err error) {
	H, n := len(x.members), len(out)
	tmp := scratch.Get(n * H)
	defer func() {
		if err == nil {
			scratch.Put(tmp)
		}
	}()
	part := func(j int) []byte { return tmp[j*n : (j+1)*n] }
	copy(part(x.me), ins[x.me])
	if err := x.exchange(func(j int) []byte { return ins[j] }, part, step); err != nil {
		return err
	}
	copy(out, part(0))
	for j := 1; j < H; j++ {
		if err := combine(out, out, part(j)); err != nil {
			return err
		}
	}
	return nil
}

// barrier returns once every member has entered it.
func (x *xfer) barrier(step uint16) error {
	if len(x.members) == 1 {
		return nil
	}
	one := []byte{1}
	outs := make([][]byte, len(x.members))
	for j := range outs {
		outs[j] = make([]byte, 1)
	}
	return x.allGather(one, outs, step)
}

// splitElems cuts b into n parts of whole elem-byte elements whose sizes
// differ by at most one element.
func splitElems(b []byte, n, elem int) [][]byte {
	count := len(b) / elem
	out := make([][]byte, n)
	lo := 0
	for i := range n {
		hi := lo + (count/n+boolInt(i < count%n))*elem
		out[i] = b[lo:hi]
		lo = hi
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func cancel(rs []*transport.Recv, err error) {
	for _, r := range rs {
		r.Cancel(err)
	}
}
