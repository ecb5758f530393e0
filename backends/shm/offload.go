package shm

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/glog"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Offloader is the backend.Offloader of shared memory: a group whose ranks
// all share this host's memory gets an arena, which carries its
// collectives and the point-to-point messages between its ranks.
//
// Co-location is decided from the rendezvous records: every rank on this
// host (same hostname and boot id) whose probe file in DefaultDir this
// rank can see, so they share one /dev/shm, which containers on one host
// may not. Every rank's view is agreed on before use, so a rank that sees
// it differently cannot desynchronize the group; where rank 0 promised the
// arena in its record, the records decide alike and the arena opens while
// the ranks connect (early.go).
type Offloader struct {
	mu    sync.Mutex
	probe string // this rank's probe file's name under DefaultDir; "" once removed
	// oneHost: the job is expected on this host alone (ExpectOneHost), so
	// rank 0 creates the group's arena while the ranks meet.
	oneHost bool
	table   *algo.Table // the group's table (UseTable); nil: the default
	early   *earlyArena // rank 0's arena created at Describe; nil once taken or discarded
	joining *earlyJoin  // the arena being opened while the fabric connects (JoinEarly)
}

var (
	_ backend.HostOffloader = (*Offloader)(nil)
	_ backend.EarlyJoiner   = (*Offloader)(nil)
	_ backend.Offload       = (*Arena)(nil)
	_ backend.Described     = (*Arena)(nil)
)

// NewOffloader returns the shared-memory offloader.
func NewOffloader() *Offloader { return &Offloader{} }

// ExpectOneHost says that the job most likely runs on this host alone (its
// store is on a loopback address, or it has no store host): rank 0 then
// creates the arena while the ranks exchange records and connect, and
// removes it again if the group turns out not to share this host.
func (o *Offloader) ExpectOneHost() { o.oneHost = true }

// openTimeout bounds the arena's setup; on failure the group stays on its
// fabric alone.
const openTimeout = 10 * time.Second

// Describe creates this rank's probe file and names it in rec; where
// DefaultDir is unusable it adds nothing and the group will not use
// shared memory.
func (o *Offloader) Describe(rec *wire.PeerRecord) {
	if !supported {
		return
	}
	p, err := NewProbe("")
	if err != nil {
		glog.Once("shm-probe", glog.Warning, "godist: shared memory is not usable (%v): ranks on one host will talk over TCP", err)
		return
	}
	o.mu.Lock()
	o.probe = filepath.Base(p.Path)
	if o.oneHost && rec.Rank == 0 && rec.WorldSize > 1 && rec.Session != 0 {
		o.early = o.createEarly(arenaName(rec.Session, rec.Group), int(rec.WorldSize))
		rec.Transports = append(rec.Transports, arenaPromised)
	}
	o.mu.Unlock()
	rec.ShmProbe = filepath.Base(p.Path)
	rec.Transports = append(rec.Transports, "shm")
}

// takeEarly hands over the arena created at Describe if it is the one
// named name, and discards it otherwise (with the file a failed creation
// left); ok reports that it was handed over.
func (o *Offloader) takeEarly(name string) (c *Created, err error, ok bool) {
	o.mu.Lock()
	e := o.early
	o.early = nil
	o.mu.Unlock()
	if e == nil {
		return nil, nil, false
	}
	c, err = e.take()
	if e.name != name {
		if c != nil {
			c.Discard()
		}
		if err != nil {
			removeFailed(filepath.Join(DefaultDir, e.name))
		}
		return nil, nil, false
	}
	return c, err, true
}

// discardEarly removes an arena created at Describe (JoinHost opens arenas
// of its own).
func (o *Offloader) discardEarly() { _, _, _ = o.takeEarly("") }

// Close removes the probe file and an arena created at Describe that was
// not used, and closes one JoinEarly opened that Join did not take.
// Idempotent.
func (o *Offloader) Close() {
	o.mu.Lock()
	name, j := o.probe, o.joining
	o.probe, o.joining = "", nil
	o.mu.Unlock()
	if j != nil {
		j.discard()
	}
	if name != "" {
		_ = os.Remove(filepath.Join(DefaultDir, name))
	}
	o.discardEarly()
}

// Join agrees with every rank on shared memory and opens the arena: rank 0
// creates it, the others join. It needs every rank on this host and a
// fabric whose transport it can route through (one with a Mailbox, such
// as backends/tcp's). Where JoinEarly already decided and opened the
// arena, Join only routes through it (early.go).
func (o *Offloader) Join(ctx context.Context, s *backend.Setup, tr transport.Transport) (backend.Offload, transport.Transport, error) {
	if j := o.takeJoining(); j != nil {
		return o.finishEarly(ctx, s, j, tr)
	}
	all := allRanks(s.Size)
	_, routable := tr.(Underlay)
	use := routable && colocated(s, all)
	// Rank 0 creates the arena first, so that one agreement says both
	// that every rank shares this host and that the arena exists.
	name := arenaName(s.Session, s.Group)
	var created *Created
	if s.Rank == 0 {
		cfg := o.config(s, all, name)
		c, cerr, early := o.takeEarly(name)
		if cerr != nil {
			removeFailed(filepath.Join(DefaultDir, name)) // no rank waits for it on this path
		}
		if early && c != nil {
			if c.fits(cfg) {
				c.cfg.Table = cfg.Table // the group's choices beyond the layout
			} else {
				c.Discard()
				c, early = nil, false
			}
		}
		if use && !early {
			c, cerr = Create(cfg)
		}
		if cerr != nil && use {
			o.warnOpen(s, cerr)
		}
		if created = c; !use && c != nil {
			c.Discard()
			created = nil
		}
		use = use && cerr == nil
	}
	ok, err := s.Agree(ctx, use)
	if err != nil || !ok {
		if created != nil {
			created.Discard()
		}
		// The probe stays for JoinHost; the engine's Close removes it.
		return nil, tr, err
	}
	o.Close()
	// The arena's own setup ends alike on every rank (Arena.awaitCountAlike):
	// no agreement on whether it opened.
	return o.finish(ctx, s, all, name, created, tr, false)
}

// JoinHost agrees with every rank of a group that spans hosts on shared
// memory among each host's ranks, and opens this host's arena: its lowest
// rank creates it, the others join. A host of one rank opens none.
func (o *Offloader) JoinHost(ctx context.Context, s *backend.Setup, host []int, tr transport.Transport) (backend.Offload, transport.Transport, error) {
	o.discardEarly()
	_, routable := tr.(Underlay)
	ok, err := s.Agree(ctx, routable && (len(host) == 1 || colocated(s, host)))
	if err != nil || !ok {
		o.Close()
		return nil, tr, err
	}
	if len(host) == 1 {
		o.Close()
		// Take part in the open's agreements.
		for range openRounds {
			if _, err := s.Agree(ctx, true); err != nil {
				return nil, tr, err
			}
		}
		return nil, tr, nil
	}
	return o.open(ctx, s, host, arenaName(s.Session, fmt.Sprintf("%s/host%d", s.Group, host[0])), tr)
}

// openRounds is the number of agreements open takes part in.
const openRounds = 2

// config is the arena configuration of ranks (group ranks, ascending, this
// one among them).
func (o *Offloader) config(s *backend.Setup, ranks []int, name string) Config {
	me := 0
	for i, r := range ranks {
		if r == s.Rank {
			me = i
		}
	}
	mode := ModeJoin
	if me == 0 {
		mode = ModeCreate
	}
	cfg := arenaConfig(s.Algorithms(), name, me, len(ranks), mode)
	if len(ranks) != s.Size {
		cfg.GlobalRanks = ranks
	}
	return cfg
}

func (o *Offloader) warnOpen(s *backend.Setup, err error) {
	glog.Warnf("godist: group %q rank %d: opening its shared-memory arena failed, the group uses TCP: %v", s.Group, s.Rank, err)
}

// open creates or joins the arena of ranks (group ranks, ascending, this
// one among them), agrees with every rank of the group that every arena
// opened, and routes the messages to ranks through it. The ranks first
// agree that every arena's file was created, so that where one cannot be
// (/dev/shm full or too small) every rank falls back at once instead of
// waiting openTimeout for a file that will never appear.
func (o *Offloader) open(ctx context.Context, s *backend.Setup, ranks []int, name string, tr transport.Transport) (backend.Offload, transport.Transport, error) {
	o.Close()
	cfg := o.config(s, ranks, name)
	var created *Created
	var cerr error
	if cfg.Mode == ModeCreate {
		if created, cerr = Create(cfg); cerr != nil {
			o.warnOpen(s, cerr)
		}
	}
	ok, err := s.Agree(ctx, cerr == nil)
	if err != nil || !ok {
		if created != nil {
			created.Discard()
		}
		return nil, tr, err
	}
	return o.finish(ctx, s, ranks, name, created, tr, true)
}

// finish opens the arena of ranks once every rank of the group agreed that
// every arena's file exists (created: this rank made it), agrees with every
// rank of the group that every arena opened (agree: the group has several
// arenas), and routes the messages to ranks through it.
func (o *Offloader) finish(ctx context.Context, s *backend.Setup, ranks []int, name string, created *Created, tr transport.Transport, agree bool) (backend.Offload, transport.Transport, error) {
	under := tr.(Underlay)
	// Leave time for the agreement after a failed open: the group falls
	// back to TCP rather than failing.
	wait := openTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	octx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var a *Arena
	var oerr error
	if created != nil {
		a, oerr = created.Open(octx)
	} else {
		a, oerr = Open(octx, o.config(s, ranks, name))
	}
	if oerr != nil {
		o.warnOpen(s, oerr)
	}
	ok, err := oerr == nil, error(nil)
	if agree {
		ok, err = s.Agree(ctx, ok)
	}
	if err != nil || !ok {
		if a != nil {
			a.Close()
		}
		return nil, tr, err
	}
	rt, err := newRouter(under, a)
	if err != nil {
		a.Abort(err)
		return nil, tr, fmt.Errorf("shm: attaching the arena: %w", err)
	}
	return a, rt, nil
}

// colocated reports whether, as seen from this rank, every rank of ranks
// shares this host's memory.
func colocated(s *backend.Setup, ranks []int) bool {
	for _, r := range ranks {
		rec := s.Records[r]
		if (r != s.Rank && !s.SameHost(r)) || rec.ShmProbe == "" {
			return false
		}
		if _, err := os.Stat(filepath.Join(DefaultDir, rec.ShmProbe)); err != nil {
			return false
		}
	}
	return s.Me().BootID != ""
}

// arenaConfig is the configuration of an arena of size ranks under
// table t.
func arenaConfig(t algo.Table, name string, rank, size int, mode Mode) Config {
	return Config{Name: name, Rank: rank, Size: size, Mode: mode, OneShotMax: t.ShmOneShot(size), DirectMin: t.ShmDirect(),
		Table: &t}
}

func allRanks(n int) []int {
	all := make([]int, n)
	for r := range all {
		all[r] = r
	}
	return all
}

// arenaName derives the shared file's name from the group's session.
func arenaName(session uint64, group string) string {
	h := fnv.New64a()
	h.Write([]byte(group))
	return fmt.Sprintf("godist-%016x-%016x", session, h.Sum64())
}

// Name is "shm".
func (a *Arena) Name() string { return "shm" }

// Algorithms names the algorithms the arena's collectives take
// (backend.Described).
func (a *Arena) Algorithms() string {
	return a.table.DescribeShm(a.size, a.lay.oneShot, a.lay.direct, a.direct)
}
