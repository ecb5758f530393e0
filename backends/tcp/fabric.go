package tcp

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Fabric is the backend.Fabric of sockets: it listens when it describes
// its rank, and connects every pair of ranks (lower ranks accept, higher
// ones dial) once every rank's record is known.
type Fabric struct {
	bindHost string

	mu sync.Mutex
	ln *Listener // nil before Describe and after Connect or Close
}

var _ backend.Fabric = (*Fabric)(nil)

// NewFabric returns a fabric that listens on bindHost ("" for all
// interfaces).
func NewFabric(bindHost string) *Fabric { return &Fabric{bindHost: bindHost} }

// spin is how long a goroutine waiting for a message reads the sockets
// itself before it sleeps (Transport.SetSpin), when this host's ranks of
// the group do not outnumber its cores.
const spin = 200 * time.Microsecond

// Name names the fabric in the group's log line.
func (f *Fabric) Name() string { return "tcp" }

// Describe opens the listener and records its port and this host's
// addresses in rec.
func (f *Fabric) Describe(rec *wire.PeerRecord) error {
	ln, err := Listen(Config{Rank: int(rec.Rank), Size: int(rec.WorldSize), Group: rec.Group, BindHost: f.bindHost})
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	rec.Addresses = localAddrs(f.bindHost)
	rec.Port = uint16(ln.Port())
	rec.Transports = append(rec.Transports, "tcp")
	return nil
}

// Connect connects every rank, loopback first to ranks on this host. When
// this host's ranks fit its cores, a waiting goroutine reads its sockets
// itself for a while before it sleeps.
func (f *Fabric) Connect(ctx context.Context, s *backend.Setup) (transport.Transport, error) {
	f.mu.Lock()
	ln := f.ln
	f.ln = nil
	f.mu.Unlock()
	if ln == nil {
		return nil, net.ErrClosed
	}
	me := s.Me()
	eps := make([]Endpoint, s.Size)
	for i, r := range s.Records {
		eps[i] = Endpoint{Addrs: dialAddrs(me, r), Port: int(r.Port)}
	}
	ln.SetSession(s.Session)
	t, err := ln.Connect(ctx, eps)
	if err != nil {
		return nil, err
	}
	if s.HostFits() {
		t.SetSpin(spin)
	}
	return t, nil
}

// Close closes the listener if Connect has not taken it. Idempotent.
func (f *Fabric) Close() error {
	f.mu.Lock()
	ln := f.ln
	f.ln = nil
	f.mu.Unlock()
	if ln == nil {
		return nil
	}
	return ln.Close()
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
