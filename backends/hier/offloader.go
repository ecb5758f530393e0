package hier

import (
	"context"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Offloader is the backend.Offloader of groups that span hosts: it joins
// when the group has several hosts and several ranks on at least one, and
// every host's ranks can use the host offloader among themselves.
//
// It shares the host offloader with the group's backend set (which lists
// that offloader first, for groups on one host): the set describes and
// closes it, so Describe and Close here do nothing.
type Offloader struct {
	host backend.HostOffloader
}

var (
	_ backend.Offloader = (*Offloader)(nil)
	_ backend.Offload   = (*Offload)(nil)
	_ backend.Described = (*Offload)(nil)
)

// NewOffloader returns the offloader whose host stages run on host.
func NewOffloader(host backend.HostOffloader) *Offloader { return &Offloader{host: host} }

// Describe adds nothing: the host offloader describes itself.
func (o *Offloader) Describe(*wire.PeerRecord) {}

// Close does nothing: the host offloader is closed by the group's set.
func (o *Offloader) Close() {}

// Join opens this host's offload and returns the hierarchical offload, or
// nil on every rank when the group's shape or a host does not allow it.
func (o *Offloader) Join(ctx context.Context, s *backend.Setup, tr transport.Transport) (backend.Offload, transport.Transport, error) {
	t := newTopology(s)
	if !t.worthwhile() {
		return nil, tr, nil
	}
	local, routed, err := o.host.JoinHost(ctx, s, t.mine(), tr)
	if err != nil {
		return nil, tr, err
	}
	// A host of one rank gets no host offload either way: ask every rank.
	ok, err := s.Agree(ctx, local != nil || len(t.mine()) == 1)
	if err != nil || !ok {
		if local != nil {
			local.Abort(err)
			_ = local.Close()
		}
		return nil, tr, err
	}
	return newOffload(t, local, routed, s.Algorithms()), routed, nil
}
