package libgodist

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Rendezvous happens in two calls so that the store traffic can stay with
// the caller (the Python side owns the c10d store torch hands the backend):
//
//  1. New asks the group's backends to describe this rank (the fabric
//     starts listening) and LocalRecord returns the record (a FlatBuffers
//     record, libgodist/wire) to publish;
//  2. Connect takes every rank's record, has the fabric connect the ranks,
//     and lets each offloader decide with the other ranks whether it
//     serves the group.
type rendezvous struct {
	set    backend.Set
	record wire.PeerRecord
}

func (r *rendezvous) close() {
	_ = r.set.Fabric.Close()
	for _, o := range r.set.Offloaders {
		o.Close()
	}
}

// New creates a group that will connect through the backends of set, and
// has them describe this rank. A group of size 1 needs no backend and is
// ready at once.
func New(cfg Config, set backend.Set) (*ProcessGroup, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Size == 1 {
		pg, err := NewWithTransport(cfg, transport.NewMemNetwork(1).Transport(0))
		if err == nil {
			pg.attachDevice(set.Accelerator)
		}
		return pg, err
	}
	if set.Fabric == nil {
		return nil, invalidf("group %q has no fabric to connect its ranks", cfg.Group)
	}
	var session uint64
	if cfg.Rank == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		session = binary.LittleEndian.Uint64(b[:]) | 1
	}
	host, _ := os.Hostname()
	rec := wire.PeerRecord{Version: wire.Version, Session: session, Group: cfg.Group, Rank: int32(cfg.Rank),
		WorldSize: int32(cfg.Size), Hostname: host, BootID: bootID(), PID: int32(os.Getpid()),
		CPUs: int32(runtime.NumCPU())}
	rdv := &rendezvous{set: set}
	if err := set.Fabric.Describe(&rec); err != nil {
		rdv.close()
		return nil, err
	}
	tune := algo.Default()
	if cfg.Tuning != nil {
		tune = *cfg.Tuning
	}
	for _, o := range set.Offloaders {
		if e, ok := o.(backend.EarlyJoiner); ok {
			e.UseTable(tune)
		}
		o.Describe(&rec)
	}
	rdv.record = rec
	pg := newPG(cfg)
	pg.rdv = rdv
	pg.attachDevice(set.Accelerator)
	return pg, nil
}

// LocalRecord is this rank's record to publish to the other ranks.
func (pg *ProcessGroup) LocalRecord() ([]byte, error) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.rdv == nil {
		return nil, invalidf("group %q needs no rendezvous or is already connected", pg.cfg.Group)
	}
	return pg.rdv.record.Marshal(), nil
}

// Connect completes the rendezvous with every rank's record (index = rank)
// and starts the group. It fails if the connections are not all up within
// timeout.
func (pg *ProcessGroup) Connect(records [][]byte, timeout time.Duration) error {
	pg.mu.Lock()
	rdv, closed := pg.rdv, pg.closed
	pg.mu.Unlock()
	if closed {
		return fmt.Errorf("godist: group %q: %w", pg.cfg.Group, ErrClosed)
	}
	if rdv == nil {
		return invalidf("group %q is already connected", pg.cfg.Group)
	}
	recs, err := pg.parseRecords(records)
	if err != nil {
		return err
	}
	s := &backend.Setup{Rank: pg.cfg.Rank, Size: pg.cfg.Size, Group: pg.cfg.Group, Session: recs[0].Session, Records: recs,
		Table: &pg.tune}
	ctx, cancel := context.WithTimeout(pg.ctx, timeout)
	defer cancel()
	for _, o := range rdv.set.Offloaders {
		if e, ok := o.(backend.EarlyJoiner); ok {
			e.JoinEarly(ctx, s) // beside the fabric's connect
		}
	}
	tr, err := rdv.set.Fabric.Connect(ctx, s)
	if err != nil {
		return fmt.Errorf("godist: group %q: connecting rank %d: %w", pg.cfg.Group, pg.cfg.Rank, err)
	}
	pg.mu.Lock()
	pg.rdv = nil
	if pg.closed {
		pg.mu.Unlock()
		tr.Abort(ErrClosed)
		rdv.close()
		return fmt.Errorf("godist: group %q: %w", pg.cfg.Group, ErrClosed)
	}
	pg.tr = tr
	pg.mu.Unlock()
	defer rdv.close()
	pg.spare = s.HostFits()
	pg.allSpare = s.EveryHostFits()
	round := uint64(0)
	s.Agree = func(ctx context.Context, ok bool) (bool, error) {
		round++
		return pg.agree(ctx, tr, round-1, ok)
	}
	use := tr
	var off backend.Offload
	for _, o := range rdv.set.Offloaders {
		joined, routed, err := o.Join(ctx, s, tr)
		if err != nil {
			tr.Abort(err)
			pg.mu.Lock()
			pg.tr = nil // never started: Close has nothing to wait for
			pg.mu.Unlock()
			return fmt.Errorf("godist: group %q: setting up its offload: %w", pg.cfg.Group, err)
		}
		if joined != nil {
			off, use = joined, routed
			break
		}
	}
	pg.mu.Lock()
	pg.offload = off
	pg.hosts, pg.via = s.Hosts(), paths(s, use, rdv.set.Fabric)
	pg.mu.Unlock()
	pg.start(use)
	fabric := "the fabric"
	if n, ok := rdv.set.Fabric.(interface{ Name() string }); ok {
		fabric = n.Name()
	}
	pg.announce(s, fabric, off, len(rdv.set.Offloaders))
	return nil
}

// parseRecords decodes and checks every rank's record.
func (pg *ProcessGroup) parseRecords(records [][]byte) ([]wire.PeerRecord, error) {
	n := pg.cfg.Size
	if len(records) != n {
		return nil, invalidf("%d rendezvous records for a group of %d", len(records), n)
	}
	recs := make([]wire.PeerRecord, n)
	for i, b := range records {
		r, err := wire.UnmarshalPeerRecord(b)
		if err != nil {
			return nil, fmt.Errorf("godist: group %q: record of rank %d: %w", pg.cfg.Group, i, err)
		}
		if int(r.Rank) != i || int(r.WorldSize) != n || r.Group != pg.cfg.Group {
			return nil, invalidf("record %d describes rank %d of %d in group %q (stale rendezvous data?)", i, r.Rank, r.WorldSize, r.Group)
		}
		recs[i] = r
	}
	if recs[0].Session == 0 {
		return nil, invalidf("rank 0's record carries no session token")
	}
	return recs, nil
}

// reservedSeq is the first of the sequence numbers godist uses for its own
// setup rounds (counting down); user collectives count up from 1.
const reservedSeq = 1<<44 - 1

// agree returns true only if every rank passes ok == true: a one-byte BAND
// all-reduce on tr under reserved sequence number reservedSeq-round.
func (pg *ProcessGroup) agree(ctx context.Context, tr transport.Transport, round uint64, ok bool) (bool, error) {
	b := []byte{0}
	if ok {
		b[0] = 1
	}
	c := &comm{tr: tr, tune: &pg.tune, ctx: ctx, seq: reservedSeq - round, rank: pg.cfg.Rank, size: pg.cfg.Size}
	if err := allReduceRD(c, b, reduceSpec{dt: reduce.Bool, op: reduce.BAnd}); err != nil {
		return false, err
	}
	return b[0] == 1, nil
}

// paths names how this rank reaches each rank of s through tr.
func paths(s *backend.Setup, tr transport.Transport, f backend.Fabric) []string {
	name := "tcp"
	if n, ok := f.(interface{ Name() string }); ok {
		name = n.Name()
	}
	p, _ := tr.(backend.PathNamer)
	out := make([]string, s.Size)
	for r := range out {
		switch {
		case r == s.Rank:
			out[r] = "self"
		case p != nil:
			out[r] = p.PathTo(r)
		default:
			out[r] = name
		}
	}
	return out
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
