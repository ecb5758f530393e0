package libgodist

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/godist/godist/backends/tcp"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Rendezvous happens in two calls so that the store traffic can stay with
// the caller (the Python side owns the c10d store torch hands the backend):
//
//  1. New opens the listener and LocalRecord returns this rank's
//     PeerRecord (a FlatBuffers record, libgodist/wire) to publish;
//  2. Connect takes every rank's record, chooses addresses (loopback for
//     ranks on the same host) and builds the connections.
type rendezvous struct {
	ln      *tcp.Listener
	session uint64
	record  wire.PeerRecord
}

func (r *rendezvous) close() {
	_ = r.ln.Close()
	removeProbe(r.record.ShmProbe)
}

// New creates a group and starts listening for its peers. A group of size 1
// needs no rendezvous and is ready at once.
func New(cfg Config) (*ProcessGroup, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Size == 1 {
		return NewWithTransport(cfg, transport.NewMemNetwork(1).Transport(0))
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
		Addresses: localAddrs(cfg.BindHost), Transports: []string{"tcp"}, CPUs: int32(runtime.NumCPU())}
	if cfg.Transport != TransportTCP {
		rec.ShmProbe = makeProbe()
		if rec.ShmProbe != "" {
			rec.Transports = append(rec.Transports, "shm")
		}
	}
	pg := newPG(cfg)
	ln, err := tcp.Listen(tcp.Config{Rank: cfg.Rank, Size: cfg.Size, Group: cfg.Group, BindHost: cfg.BindHost})
	if err != nil {
		return nil, err
	}
	rec.Port = uint16(ln.Port())
	pg.rdv = &rendezvous{ln: ln, session: session, record: rec}
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
	n := pg.cfg.Size
	if len(records) != n {
		return invalidf("%d rendezvous records for a group of %d", len(records), n)
	}
	recs := make([]wire.PeerRecord, n)
	for i, b := range records {
		r, err := wire.UnmarshalPeerRecord(b)
		if err != nil {
			return fmt.Errorf("godist: group %q: record of rank %d: %w", pg.cfg.Group, i, err)
		}
		if int(r.Rank) != i || int(r.WorldSize) != n || r.Group != pg.cfg.Group {
			return invalidf("record %d describes rank %d of %d in group %q (stale rendezvous data?)", i, r.Rank, r.WorldSize, r.Group)
		}
		recs[i] = r
	}
	session := recs[0].Session
	if session == 0 {
		return invalidf("rank 0's record carries no session token")
	}
	me := recs[pg.cfg.Rank]
	eps := make([]tcp.Endpoint, n)
	for i, r := range recs {
		eps[i] = tcp.Endpoint{Addrs: dialAddrs(me, r), Port: int(r.Port)}
	}
	ctx, cancel := context.WithTimeout(pg.ctx, timeout)
	defer cancel()
	rdv.ln = rebind(rdv.ln, session)
	tr, err := rdv.ln.Connect(ctx, eps)
	if err != nil {
		return fmt.Errorf("godist: group %q: connecting rank %d: %w", pg.cfg.Group, pg.cfg.Rank, err)
	}
	pg.mu.Lock()
	pg.rdv = nil
	if pg.closed {
		pg.mu.Unlock()
		tr.Abort(ErrClosed)
		removeProbe(me.ShmProbe)
		return fmt.Errorf("godist: group %q: %w", pg.cfg.Group, ErrClosed)
	}
	pg.tr = tr
	pg.mu.Unlock()
	if sameHost(me, recs) <= runtime.NumCPU() {
		// Every rank here can have a core: waiters read their sockets,
		// and the ring reduces on a goroutine of its own.
		tr.SetSpin(tcpSpin)
		pg.spare = true
	}
	pg.allSpare = everyHostSpare(recs)
	arena, err := pg.setupShm(ctx, me, recs, session)
	if err != nil {
		tr.Abort(err)
		return fmt.Errorf("godist: group %q: setting up shared memory: %w", pg.cfg.Group, err)
	}
	var use transport.Transport = tr
	if arena != nil {
		h, err := newHybrid(tr, arena)
		if err != nil {
			arena.Abort(err)
			tr.Abort(err)
			return fmt.Errorf("godist: group %q: attaching shared memory: %w", pg.cfg.Group, err)
		}
		use = h
	}
	pg.mu.Lock()
	pg.arena = arena
	pg.mu.Unlock()
	pg.start(use)
	return nil
}

// rebind tells the listener the session token, known only after rendezvous.
func rebind(ln *tcp.Listener, session uint64) *tcp.Listener {
	ln.SetSession(session)
	return ln
}

// dialAddrs lists the addresses to try for peer r, as seen from me: ranks
// on the same host (same hostname and boot id) use loopback first.
func dialAddrs(me, r wire.PeerRecord) []string {
	var out []string
	if me.Hostname == r.Hostname && me.BootID == r.BootID && r.BootID != "" {
		out = append(out, "127.0.0.1")
	}
	for _, a := range r.Addresses {
		if ip := net.ParseIP(a); ip != nil && ip.IsLoopback() {
			continue
		}
		out = append(out, a)
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

// localAddrs lists the addresses this rank can be reached at.
func localAddrs(bind string) []string {
	if bind != "" && bind != "0.0.0.0" && bind != "::" {
		return []string{bind}
	}
	out := []string{"127.0.0.1"}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range ifs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if len(out) >= 16 {
			break
		}
		out = append(out, ipn.IP.String())
	}
	return out
}
