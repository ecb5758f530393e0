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

// Options are the user's choices that decide a group's backends.
type Options struct {
	BindHost  string // the address the TCP fabric listens on; "" for all interfaces
	Transport string // TransportAuto, TransportTCP or TransportMPI
}

// Backends returns the backends of a group created with o.
func Backends(o Options) (backend.Set, error) {
	set := backend.Set{Fabric: tcp.NewFabric(o.BindHost), Accelerator: nccl.Accelerator{}}
	switch o.Transport {
	case TransportAuto, "auto":
		// One host: shared memory carries the group. Several: shared
		// memory inside each host, TCP between (backends/hier).
		host := shm.NewOffloader()
		set.Offloaders = append(set.Offloaders, host, hier.NewOffloader(host))
	case TransportTCP:
	case TransportMPI:
		set.Fabric = mpi.NewFabric()
		set.Offloaders = []backend.Offloader{mpi.NewOffloader()}
	default:
		return backend.Set{}, fmt.Errorf("godist: unknown transport %q (want \"auto\", \"tcp\" or \"mpi\")", o.Transport)
	}
	return set, nil
}
