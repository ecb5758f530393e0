// Package assemble is godist's composition root: it chooses the backends a
// process group is built from. The engine (libgodist) sees them only
// through the interfaces of libgodist/backend, and no backend imports
// another, so adding a backend is a package under backends/ and a line
// here.
package assemble

import (
	"fmt"

	"github.com/godist/godist/backends/hier"
	"github.com/godist/godist/backends/mpi"
	"github.com/godist/godist/backends/nccl"
	"github.com/godist/godist/backends/shm"
	"github.com/godist/godist/backends/tcp"
	"github.com/godist/godist/libgodist/backend"
)

// Transport names accepted in Options.Transport.
const (
	TransportAuto = ""    // shared memory between co-located ranks, TCP between hosts
	TransportTCP  = "tcp" // TCP only
	TransportMPI  = "mpi" // MPI's point-to-point messages and collectives (MPI initialised first: mpi://)
)

// TransportNames are the names GODIST_TRANSPORT may give Options.Transport
// ("auto" is TransportAuto), in the order error messages list them.
// python/godist/_group.py accepts the same (godist_facts; test_facts.py).
var TransportNames = []string{"auto", TransportTCP, TransportMPI}

// Options are the user's choices that decide a group's backends.
type Options struct {
	BindHost  string // GODIST_BIND_ADDR: the one address the TCP fabric listens on and publishes
	Ifname    string // GODIST_SOCKET_IFNAME: the interfaces whose addresses it listens on and publishes
	PeerHost  string // the host of the group's store; "" when there is none (tcp.Choose)
	Transport string // TransportAuto, TransportTCP or TransportMPI
}

// Backends returns the backends of a group created with o. A setting that
// cannot be used is an error naming it.
func Backends(o Options) (backend.Set, error) {
	set := backend.Set{Accelerator: nccl.Accelerator{}}
	switch o.Transport {
	case TransportAuto, "auto", TransportTCP:
		f, err := tcp.NewFabric(tcp.NetConfig{BindAddr: o.BindHost, Ifname: o.Ifname, PeerHost: o.PeerHost})
		if err != nil {
			return backend.Set{}, err
		}
		set.Fabric = f
		if o.Transport != TransportTCP {
			// One host: shared memory carries the group. Several: shared
			// memory inside each host, TCP between (backends/hier).
			host := shm.NewOffloader()
			if how := f.Choice().How; how == tcp.ChoiceLoopback || how == tcp.ChoiceAll {
				host.ExpectOneHost() // a loopback store, or none: most likely one host
			}
			set.Offloaders = append(set.Offloaders, host, hier.NewOffloader(host))
		}
	case TransportMPI:
		set.Fabric = mpi.NewFabric()
		set.Offloaders = []backend.Offloader{mpi.NewOffloader()}
	default:
		return backend.Set{}, fmt.Errorf("godist: unknown transport %q (want one of %q)", o.Transport, TransportNames)
	}
	return set, nil
}
