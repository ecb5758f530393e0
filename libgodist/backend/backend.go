// Package backend declares what the engine (package libgodist) needs from
// the ways a group's ranks reach each other, and what it hands them when a
// group is set up. The engine holds these interfaces only; packages under
// backends/ implement them, and the composition root (package assemble)
// chooses which ones a group gets.
//
// Every group has one Fabric, which connects all its ranks point to point
// (backends/tcp), and may have Offloaders, each of which can take over
// whole collectives when every rank agrees it can serve them
// (backends/shm: ranks that share a host's memory).
package backend

import (
	"context"
	"errors"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Set is the backends a group is built from.
type Set struct {
	Fabric     Fabric
	Offloaders []Offloader // tried in order; the first that joins carries the collectives
	// Accelerator carries collectives on device memory; nil for none.
	Accelerator Accelerator
}

// Fabric connects every rank of a group to every other.
type Fabric interface {
	// Describe fills in what the peers need to reach this rank
	// (addresses, port, transport names) before the record is published.
	// It may start listening; rec's Rank, WorldSize and Group are set.
	Describe(rec *wire.PeerRecord) error
	// Connect builds the transport to every rank from the records of s,
	// within ctx.
	Connect(ctx context.Context, s *Setup) (transport.Transport, error)
	// Close releases what Describe set up and Connect did not take over.
	// Idempotent.
	Close() error
}

// Offloader is a way to carry a group's collectives other than the
// engine's own algorithms over the fabric's transport.
type Offloader interface {
	// Describe adds what the peers need to decide on this offload (a probe
	// file's name, a transport name) before the record is published.
	Describe(rec *wire.PeerRecord)
	// Join decides with every rank, through s.Agree, whether this offload
	// serves the group, and opens it. Every rank must reach the same
	// answer: decide only through Agree, or from what every rank's records
	// say alike (EarlyJoiner). When it does not serve the group
	// Join returns a nil Offload and tr. Otherwise it returns the offload
	// and the transport point-to-point traffic should take from now on
	// (tr itself, or one that routes some peers through the offload).
	Join(ctx context.Context, s *Setup, tr transport.Transport) (Offload, transport.Transport, error)
	// Close releases what Describe set up. Idempotent.
	Close()
}

// EarlyJoiner is an Offloader that can decide from the records alone, on
// every rank alike, that it serves the group, and open itself while the
// fabric connects.
type EarlyJoiner interface {
	Offloader
	// UseTable hands it the group's algorithm table before Describe.
	UseTable(t algo.Table)
	// JoinEarly starts opening the offload, before the fabric connects,
	// where the records decide for it; Join (or Close) then finishes what
	// it started. ctx bounds the open.
	JoinEarly(ctx context.Context, s *Setup)
}

// HostOffloader is an Offloader that can also serve the ranks of one host
// when a group spans several: the hierarchical path (backends/hier) runs
// the stages inside each host on it.
type HostOffloader interface {
	Offloader
	// JoinHost decides with every rank of the group, through s.Agree,
	// whether every host's ranks (s.Hosts) can use this offload among
	// themselves, and opens it for host, this rank's host (group ranks,
	// ascending). The Offload it returns numbers ranks by their index in
	// host. It returns a nil Offload for a host of one rank, and on every
	// rank when any host cannot use it; tr is returned then. Every rank of
	// the group must call it, with its own host.
	JoinHost(ctx context.Context, s *Setup, host []int, tr transport.Transport) (Offload, transport.Transport, error)
}

// Combine sets dst = a (op) b for whole elements; dst may alias a or b.
// It must be commutative bit for bit, so every rank ends with the same
// bits whatever order its offload combines in.
type Combine = func(dst, a, b []byte) error

// Offload carries whole collectives for one group. Its methods are called
// by one goroutine at a time, in the group's issue order, with the same
// arguments' shapes on every rank; ctx carries the op's deadline. A method
// may return ErrDeclined before touching any buffer, and the engine then
// runs its own algorithm.
type Offload interface {
	// Name names the offload in diagnostics ("shm").
	Name() string
	// AllReduce reduces buf in place across the group, elem bytes an element.
	AllReduce(ctx context.Context, buf []byte, elem int, combine Combine) error
	// Broadcast copies root's buf into every rank's.
	Broadcast(ctx context.Context, buf []byte, root int) error
	// AllGather places every rank's in at outs[rank] on every rank.
	AllGather(ctx context.Context, in []byte, outs [][]byte) error
	// ReduceScatter leaves in out the reduction over all ranks of ins[rank].
	ReduceScatter(ctx context.Context, ins [][]byte, out []byte, elem int, combine Combine) error
	// AllToAll sends ins[j] to rank j, which stores it in outs[rank].
	AllToAll(ctx context.Context, ins, outs [][]byte) error
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error
	// Abort fails what is in flight at once with err; Close follows.
	Abort(err error)
	// Close releases the offload. Idempotent.
	Close() error
}

// Splitter is an Offload that can open one for a group split from its
// group, without a rendezvous. The child's rank 0 prepares it before the
// child's ranks exchange their first messages, which tell every rank
// whether that worked; then every rank opens it.
type Splitter interface {
	// Serves reports whether it can serve a child of ranks (the parent's
	// ranks); the same answer on every rank.
	Serves(ranks []int) bool
	// PrepareChild, on the child's rank 0 only, makes what the others
	// open; an error leaves the child to the engine's algorithms.
	PrepareChild(c ChildSetup) (Prepared, error)
	// OpenChild opens the child's offload on every rank of the child (p:
	// rank 0's Prepared, nil on the others). A nil Offload, on every rank
	// alike, leaves the child to the engine's algorithms.
	OpenChild(ctx context.Context, c ChildSetup, p Prepared) (Offload, error)
}

// Prepared is what a Splitter prepared for a child; Discard drops it
// when the child is not formed.
type Prepared interface {
	Discard()
}

// Described is an Offload that names the algorithms its collectives take
// (algo's Describe functions), for the group's INFO line and
// godist.topology().
type Described interface {
	Algorithms() string
}

// Reduction is the element type and combining op of a reduction as a
// TypedOffload gets it: AVG and PREMUL_SUM arrive as SUM (the engine
// scales before and after).
type Reduction struct {
	DType reduce.DType
	Op    reduce.Op
}

// TypedOffload is an Offload that reduces with its own kernels (an MPI
// library's) given the element type and op rather than a Combine, and that
// also carries the rooted collectives. The engine prefers these methods
// when a group's offload has them; ErrDeclined leaves an op to the engine.
type TypedOffload interface {
	Offload
	// AllReduceTyped reduces buf in place across the group.
	AllReduceTyped(ctx context.Context, buf []byte, r Reduction) error
	// ReduceTyped leaves the reduction in root's buf; the other ranks'
	// buf is only read.
	ReduceTyped(ctx context.Context, buf []byte, root int, r Reduction) error
	// ReduceScatterTyped leaves in out the reduction over all ranks of
	// ins[rank].
	ReduceScatterTyped(ctx context.Context, ins [][]byte, out []byte, r Reduction) error
	// Gather places every rank's in at root's outs[rank].
	Gather(ctx context.Context, in []byte, outs [][]byte, root int) error
	// Scatter copies root's ins[r] into rank r's out.
	Scatter(ctx context.Context, ins [][]byte, out []byte, root int) error
}

// PathNamer is implemented by transports that can name how they reach a
// peer ("shm", "tcp"), for the group's reported topology.
type PathNamer interface {
	PathTo(peer int) string
}

// ErrDeclined is returned by an Offload method that leaves the op to the
// engine's own algorithms.
var ErrDeclined = errors.New("backend: op declined by the offload")
