package mpi

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Fabric connects a group's ranks through MPI: the ranks' records carry
// their MPI_COMM_WORLD ranks, and Connect makes the group's communicators
// (MPI_Comm_create_group, collective over the group's ranks only) and the
// Transport over them. MPI must have been opened in this process first
// (the mpi:// rendezvous does it; Open).
type Fabric struct{}

var _ backend.Fabric = Fabric{}

// NewFabric returns the MPI fabric.
func NewFabric() Fabric { return Fabric{} }

// ErrNotOpen is wrapped by the errors of a fabric used before MPI was
// opened in the process.
var ErrNotOpen = errors.New("MPI is not initialised in this process")

// Record entries (wire.PeerRecord.Transports) of the MPI fabric.
const (
	recordName = "mpi"
	rankKey    = "mpi.rank="
	implKey    = "mpi.impl="
)

func openedLib() (*Lib, error) {
	l := Current()
	if l == nil {
		return nil, fmt.Errorf("%w: GODIST_TRANSPORT=mpi needs MPI, initialised by init_process_group(\"godist\", "+
			"init_method=\"mpi://\") under mpirun (or godist.mpi_info())", ErrNotOpen)
	}
	return l, nil
}

// Describe implements backend.Fabric.
func (Fabric) Describe(rec *wire.PeerRecord) error {
	l, err := openedLib()
	if err != nil {
		return err
	}
	rec.Transports = append(rec.Transports, recordName, rankKey+strconv.Itoa(l.WorldRank), implKey+l.Impl)
	return nil
}

// worldRanks returns every rank's MPI_COMM_WORLD rank from the records.
func worldRanks(l *Lib, recs []wire.PeerRecord) ([]int, error) {
	out := make([]int, len(recs))
	seen := map[int]int{}
	for r, rec := range recs {
		wr, impl := -1, ""
		for _, t := range rec.Transports {
			if v, ok := strings.CutPrefix(t, rankKey); ok {
				wr, _ = strconv.Atoi(v)
			}
			if v, ok := strings.CutPrefix(t, implKey); ok {
				impl = v
			}
		}
		if wr < 0 {
			return nil, fmt.Errorf("mpi: rank %d of the group does not use GODIST_TRANSPORT=mpi", r)
		}
		if impl != l.Impl {
			return nil, fmt.Errorf("mpi: rank %d runs %s, this rank %s", r, impl, l.Impl)
		}
		if wr >= l.WorldSize {
			return nil, fmt.Errorf("mpi: rank %d says it is MPI rank %d of %d", r, wr, l.WorldSize)
		}
		if o, dup := seen[wr]; dup {
			return nil, fmt.Errorf("mpi: ranks %d and %d of the group are both MPI rank %d", o, r, wr)
		}
		seen[wr] = r
		out[r] = wr
	}
	return out, nil
}

// Connect implements backend.Fabric. Making the communicators cannot be
// cancelled: it returns when every rank of the group has called it.
func (Fabric) Connect(ctx context.Context, s *backend.Setup) (transport.Transport, error) {
	l, err := openedLib()
	if err != nil {
		return nil, err
	}
	ranks, err := worldRanks(l, s.Records)
	if err != nil {
		return nil, err
	}
	h := fnv.New32a()
	h.Write([]byte(s.Group))
	base := int(h.Sum32()%(1<<20)) * 4
	var comms [3]Comm
	for i := range comms {
		if comms[i], err = l.CommCreate(ranks, (base+i)%(l.TagUB+1)); err != nil {
			return nil, fmt.Errorf("mpi: making the group's communicator: %w", err)
		}
	}
	return newTransport(l, s.Rank, s.Size, comms[0], comms[1], comms[2]), nil
}

// Close implements backend.Fabric.
func (Fabric) Close() error { return nil }
