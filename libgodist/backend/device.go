package backend

import (
	"context"
	"errors"

	"github.com/godist/godist/libgodist/reduce"
)

// Accelerator carries collectives on device memory (CUDA tensors through
// NCCL): unlike a Fabric or an Offloader it never sees the bytes. It opens
// one DeviceComm per group and device (and per pair of ranks for
// point-to-point traffic before the group has one), and the engine keeps
// the ops' order, deadlines and errors (libgodist/device.go).
type Accelerator interface {
	// Name names it in diagnostics ("nccl").
	Name() string
	// Load makes it usable, or says why it is not (no library, no driver).
	// Cheap after the first call.
	Load() error
	// UniqueID is the token the leading rank of a new communicator hands
	// to the others (through the group's store) before Open.
	UniqueID() ([]byte, error)
	// Open joins the communicator of s: every rank of s calls it with the
	// same ID, within ctx.
	Open(ctx context.Context, s DeviceSetup) (DeviceComm, error)
}

// DeviceSetup describes one communicator.
type DeviceSetup struct {
	Device     int    // this rank's device ordinal
	Rank, Size int    // this rank's place in the communicator
	ID         []byte // from UniqueID on the communicator's rank 0
}

// CallKind is the device call a DeviceCall makes.
type CallKind int32

// The device calls (their values are backends/nccl's gn_call kinds).
const (
	CallAllReduce     CallKind = 0
	CallBroadcast     CallKind = 1
	CallReduce        CallKind = 2
	CallAllGather     CallKind = 3
	CallReduceScatter CallKind = 4
	CallSend          CallKind = 5
	CallRecv          CallKind = 6
)

// DeviceCall is one call on device memory. Calls that only move data
// (broadcast, all-gather, send, receive) count bytes (Bytes true, DType
// ignored); reductions count elements of DType. Root is the root of
// broadcast and reduce and the peer of send and receive, as a rank of the
// communicator.
type DeviceCall struct {
	Kind       CallKind
	Send, Recv uintptr
	Count      int64
	Bytes      bool
	DType      reduce.DType
	Op         reduce.Op
	Factor     float64 // Op PremulSum
	Root       int
}

// Event marks a point in a device stream; its zero value is no event.
type Event uintptr

// DeviceComm is one communicator. Launch is called by one goroutine at a
// time; Done, Order, Release and Err may be called concurrently with it,
// and Abort from any goroutine at any time.
type DeviceComm interface {
	// Launch enqueues calls (as one group) on stream when async is false,
	// else on the communicator's own stream after the work queued on
	// stream so far; it returns the event that marks their end. ctx
	// bounds the time spent enqueueing.
	Launch(ctx context.Context, stream uintptr, async bool, calls []DeviceCall) (Event, error)
	// Done reports whether the work before ev has completed.
	Done(ev Event) (bool, error)
	// Order makes stream wait for ev without blocking the caller.
	Order(stream uintptr, ev Event) error
	// Release returns ev, which no one will use again.
	Release(ev Event)
	// Err returns the communicator's asynchronous error (a peer failed,
	// a network error), if any.
	Err() error
	// Abort ends the communicator at once, whatever is in flight; Close
	// then only frees what is left. Idempotent.
	Abort()
	// Close releases the communicator, waiting within ctx for the work in
	// flight. Idempotent.
	Close(ctx context.Context) error
}

// ErrUnsupported is wrapped by the errors of a DeviceComm for a call it
// cannot make (a dtype or reduce op the library lacks), before anything
// is enqueued.
var ErrUnsupported = errors.New("not supported on this device path")
