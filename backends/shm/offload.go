package shm

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sync"
	"time"

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
// it differently cannot desynchronize the group.
type Offloader struct {
	mu    sync.Mutex
	probe string // this rank's probe file's name under DefaultDir; "" once removed
}

var (
	_ backend.HostOffloader = (*Offloader)(nil)
	_ backend.Offload       = (*Arena)(nil)
)

// NewOffloader returns the shared-memory offloader.
func NewOffloader() *Offloader { return &Offloader{} }

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
	o.mu.Unlock()
	rec.ShmProbe = filepath.Base(p.Path)
	rec.Transports = append(rec.Transports, "shm")
}

// Close removes the probe file. Idempotent.
func (o *Offloader) Close() {
	o.mu.Lock()
	name := o.probe
	o.probe = ""
	o.mu.Unlock()
	if name != "" {
		_ = os.Remove(filepath.Join(DefaultDir, name))
	}
}

// Join agrees with every rank on shared memory and opens the arena: rank 0
// creates it, the others join. It needs every rank on this host and a
// fabric whose transport it can route through (one with a Mailbox, such
// as backends/tcp's).
func (o *Offloader) Join(ctx context.Context, s *backend.Setup, tr transport.Transport) (backend.Offload, transport.Transport, error) {
	all := make([]int, s.Size)
	for r := range all {
		all[r] = r
	}
	_, routable := tr.(Underlay)
	ok, err := s.Agree(ctx, routable && colocated(s, all))
	if err != nil || !ok {
		// The probe stays for JoinHost; the engine's Close removes it.
		return nil, tr, err
	}
	return o.open(ctx, s, all, arenaName(s.Session, s.Group), tr)
}

// JoinHost agrees with every rank of a group that spans hosts on shared
// memory among each host's ranks, and opens this host's arena: its lowest
// rank creates it, the others join. A host of one rank opens none.
func (o *Offloader) JoinHost(ctx context.Context, s *backend.Setup, host []int, tr transport.Transport) (backend.Offload, transport.Transport, error) {
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

// open creates or joins the arena of ranks (group ranks, ascending, this
// one among them), agrees with every rank of the group that every arena
// opened, and routes the messages to ranks through it. The ranks first
// agree that every arena's file was created, so that where one cannot be
// (/dev/shm full or too small) every rank falls back at once instead of
// waiting openTimeout for a file that will never appear.
func (o *Offloader) open(ctx context.Context, s *backend.Setup, ranks []int, name string, tr transport.Transport) (backend.Offload, transport.Transport, error) {
	o.Close()
	under := tr.(Underlay)
	me := 0
	for i, r := range ranks {
		if r == s.Rank {
			me = i
		}
	}
	// Leave time for the agreement after a failed open: the group falls
	// back to TCP rather than failing.
	wait := openTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	octx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	mode := ModeJoin
	if me == 0 {
		mode = ModeCreate
	}
	cfg := Config{Name: name, Rank: me, Size: len(ranks), Mode: mode}
	if len(ranks) != s.Size {
		cfg.GlobalRanks = ranks
	}
	warn := func(err error) {
		glog.Warnf("godist: group %q rank %d: opening its shared-memory arena failed, the group uses TCP: %v", s.Group, s.Rank, err)
	}
	var created *Created
	var cerr error
	if me == 0 {
		if created, cerr = Create(cfg); cerr != nil {
			warn(cerr)
		}
	}
	ok, err := s.Agree(ctx, cerr == nil)
	if err != nil || !ok {
		if created != nil {
			created.Discard()
		}
		return nil, tr, err
	}
	var a *Arena
	var oerr error
	if created != nil {
		a, oerr = created.Open(octx)
	} else {
		a, oerr = Open(octx, cfg)
	}
	if oerr != nil {
		warn(oerr)
	}
	ok, err = s.Agree(ctx, oerr == nil)
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

// arenaName derives the shared file's name from the group's session.
func arenaName(session uint64, group string) string {
	h := fnv.New64a()
	h.Write([]byte(group))
	return fmt.Sprintf("godist-%016x-%016x", session, h.Sum64())
}

// Name is "shm".
func (a *Arena) Name() string { return "shm" }
