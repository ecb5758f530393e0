package libgodist

import (
	"context"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
)

// comm is what an algorithm sees of its group while it runs one op: its
// rank and size, and sends and receives tagged with the op's sequence
// number and bounded by the op's deadline.
type comm struct {
	tr      transport.Transport
	offload backend.Offload // carries whole collectives when set
	tune    *algo.Table     // the group's sizes for choosing algorithms
	ctx     context.Context
	seq     uint64
	rank    int
	size    int
	spare   bool // this host's ranks fit its cores: an algorithm may keep a second thread busy
	// every host's ranks fit its cores: the same on every rank, so an
	// algorithm may choose by it what it sends (unlike spare)
	allSpare bool
}

func (c *comm) tag(step uint16) transport.Tag { return transport.CollTag(c.seq, step) }

// send sends b to peer.
func (c *comm) send(peer int, step uint16, b []byte) error {
	return c.tr.Send(c.ctx, peer, c.tag(step), b)
}

// post posts a receive into b from peer.
func (c *comm) post(peer int, step uint16, b []byte) *transport.Recv {
	return c.tr.PostRecv(peer, c.tag(step), b)
}

// postFold posts a receive from peer that folds the message into b with
// s's combine (a ring reduce-scatter step).
func (c *comm) postFold(peer int, step uint16, b []byte, s reduceSpec) *transport.Recv {
	return c.tr.PostFold(peer, c.tag(step), b, transport.Fold{Combine: s.combine, Elem: s.dt.Size()})
}

// wait waits for r within the op's deadline.
func (c *comm) wait(r *transport.Recv) error { return r.Wait(c.ctx) }

// recv receives exactly len(b) bytes from peer into b.
func (c *comm) recv(peer int, step uint16, b []byte) error {
	return c.wait(c.post(peer, step, b))
}

// sendRecv sends sb to `to` while receiving rb from `from`; the receive is
// posted first so the data can land straight in rb.
func (c *comm) sendRecv(to int, sb []byte, from int, rb []byte, step uint16) error {
	r := c.post(from, step, rb)
	if err := c.send(to, step, sb); err != nil {
		r.Cancel(err)
		return err
	}
	return c.wait(r)
}

// waitAll waits for every receive; on the first error it cancels the rest
// (so none still writes into caller memory) and returns that error.
func (c *comm) waitAll(rs []*transport.Recv) error { return transport.WaitAll(c.ctx, rs) }

// cancelAll abandons receives after a failure.
func cancelAll(rs []*transport.Recv, err error) {
	for _, r := range rs {
		if r != nil {
			r.Cancel(err)
		}
	}
}
