package tcp

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/godist/godist/auth"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/glog"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Fabric is the backend.Fabric of sockets: it listens when it describes
// its rank, and connects every pair of ranks (lower ranks accept, higher
// ones dial) once every rank's record is known.
type Fabric struct {
	choice Choice
	key    *auth.Key  // the job secret's when the fabric was made; nil: none
	cfg    *NetConfig // the setting choice was made for, if it came from the cache (choices)

	mu sync.Mutex
	ln *Listener // nil before Describe and after Connect or Close
}

var _ backend.Fabric = (*Fabric)(nil)

// NewFabric returns a fabric that listens where Choose(cfg) says; a
// setting that cannot be used is a *SettingError.
func NewFabric(cfg NetConfig) (*Fabric, error) {
	if c, ok := choices.Load(cfg); ok {
		f := NewFabricChoice(c.(Choice))
		f.cfg = &cfg
		return f, nil
	}
	c, err := chooseAnew(cfg)
	if err != nil {
		return nil, err
	}
	return NewFabricChoice(c), nil
}

// chooseAnew makes cfg's choice and keeps it for the next fabric.
func chooseAnew(cfg NetConfig) (Choice, error) {
	c, err := Choose(cfg)
	if err == nil {
		choices.Store(cfg, c)
	}
	return c, err
}

// choices holds Choose's answer for each setting this process made a
// fabric for: a host's interfaces and routes stay as they are while a job
// runs (NCCL picks its interfaces once per process too), and a group
// re-created on every membership change would otherwise ask the kernel
// again each time (a netlink dump per interface, and a name lookup for a
// store host given by name). A cached choice whose addresses no longer
// bind is dropped and made anew (Describe).
var choices sync.Map // NetConfig -> Choice

// NewFabricChoice returns a fabric that listens and publishes as c says,
// authenticating its connections with the job secret if there is one
// (auth.Current).
func NewFabricChoice(c Choice) *Fabric { return &Fabric{choice: c, key: auth.Current(auth.Transport)} }

// Choice is where the fabric listens and what it publishes.
func (f *Fabric) Choice() Choice { return f.choice }

// spin is how long a goroutine waiting for a message reads the sockets
// itself before it sleeps (Transport.SetSpin), when this host's ranks of
// the group do not outnumber its cores.
const spin = 200 * time.Microsecond

// Name names the fabric in the group's log line.
func (f *Fabric) Name() string { return "tcp" }

// Describe opens the listener and records its port and the addresses it
// publishes, with their interfaces, in rec.
func (f *Fabric) Describe(rec *wire.PeerRecord) error {
	cfg := Config{Rank: int(rec.Rank), Size: int(rec.WorldSize), Group: rec.Group, Hosts: f.choice.hosts(), Key: f.key}
	ln, err := Listen(cfg)
	if err != nil && f.cfg != nil {
		// The cached choice went stale (an address left this host).
		c, cerr := chooseAnew(*f.cfg)
		if cerr != nil {
			choices.Delete(*f.cfg)
			return cerr
		}
		f.choice, f.cfg = c, nil
		cfg.Hosts = c.hosts()
		ln, err = Listen(cfg)
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	rec.Addresses, rec.Interfaces = nil, nil
	for _, l := range f.choice.Publish {
		rec.Addresses = append(rec.Addresses, l.Addr.String())
		rec.Interfaces = append(rec.Interfaces, l.Iface)
	}
	rec.Port = uint16(ln.Port())
	rec.Transports = append(rec.Transports, "tcp")
	// A chosen interface (loopback for a job on one host) is news; all
	// interfaces (a job without a store host) is what it always was.
	level := glog.Info
	if len(f.choice.Listen) == 0 {
		level = glog.Debug
	}
	glog.Once("tcp-choice "+f.choice.Why, level, "godist: TCP listens on %s: %s", f.choice.Describe(), f.choice.Why)
	return nil
}

// Connect connects every rank, loopback first to ranks on this host that
// listen on it. When this host's ranks fit its cores, a waiting goroutine
// reads its sockets itself for a while before it sleeps.
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
		eps[i] = Endpoint{Host: r.Hostname, Port: int(r.Port)}
		if i == s.Rank {
			eps[i].Addrs, eps[i].Ifaces = r.Addresses, r.Interfaces
		} else {
			eps[i].Addrs, eps[i].Ifaces = dialAddrs(me, r)
		}
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

// dialAddrs lists the addresses to try for peer r, as seen from me, with
// their interfaces. A rank on the same host (same hostname and boot id)
// tries r's first loopback address first when its record lists one (r
// listens on loopback); other hosts never try loopback addresses.
func dialAddrs(me, r wire.PeerRecord) (addrs, ifaces []string) {
	same := me.Hostname == r.Hostname && me.BootID == r.BootID && r.BootID != ""
	iface := func(i int) string {
		if i < len(r.Interfaces) {
			return r.Interfaces[i]
		}
		return ""
	}
	lo := -1
	for i, a := range r.Addresses {
		if isLoopback(a) && lo < 0 {
			lo = i
		}
	}
	if same && lo >= 0 {
		addrs, ifaces = append(addrs, r.Addresses[lo]), append(ifaces, iface(lo))
	}
	for i, a := range r.Addresses {
		if !isLoopback(a) {
			addrs, ifaces = append(addrs, a), append(ifaces, iface(i))
		}
	}
	return addrs, ifaces
}

func isLoopback(a string) bool {
	ip, err := netip.ParseAddr(a)
	return err == nil && ip.Unmap().IsLoopback()
}
