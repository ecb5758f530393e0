package shm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
)

// A group expected on one host opens its arena while its ranks connect:
//
//   - at Describe, rank 0 starts creating the arena and promises it in its
//     record (arenaPromised);
//   - at JoinEarly, before the fabric connects, every rank decides from the
//     records alone whether the group uses it (every rank sees every
//     rank's probe file, rank 0 promised the arena) and starts opening it;
//   - Join then only routes through it, or, where the open failed (alike
//     on every rank, Arena.awaitCountAlike), agrees once so that rank 0
//     may remove what it left (removeFailed).
//
// The decision needs no agreement: sharing a /dev/shm is an equivalence
// between ranks, so "I see every rank's probe" is true on every rank or
// on none. A rank that still decides otherwise (a probe it could not
// stat) leaves the others waiting for it at the arena's open, which then
// fails alike after at most openTimeout, and the group runs on TCP.

// arenaPromised is the record entry of a rank 0 that is creating its
// group's arena (Transports).
const arenaPromised = "shm-arena"

// failedSize is the size rank 0 leaves an arena file at when its creation
// failed, so that the ranks waiting to join it fail at once.
const failedSize = 1

// errCreatorFailed is a joining rank's error when rank 0 could not create
// the arena it promised.
var errCreatorFailed = errors.New("local rank 0 could not create the arena")

// earlyArena is an arena file being created before the group connects.
type earlyArena struct {
	name    string
	done    chan struct{}
	created *Created
	err     error
}

// take waits for the creation and hands over its result.
func (e *earlyArena) take() (*Created, error) {
	<-e.done
	return e.created, e.err
}

// UseTable sets the table the group's arena is laid out by (its
// thresholds); before Describe.
func (o *Offloader) UseTable(t algo.Table) {
	o.mu.Lock()
	o.table = &t
	o.mu.Unlock()
}

// createEarly starts creating the arena name of size ranks. A creation
// that fails leaves the file at failedSize.
func (o *Offloader) createEarly(name string, size int) *earlyArena {
	t := algo.Default()
	if o.table != nil {
		t = *o.table
	}
	e := &earlyArena{name: name, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		cfg := arenaConfig(t, name, 0, size, ModeCreate)
		cfg.markFailure = true
		e.created, e.err = Create(cfg)
	}()
	return e
}

// earlyJoin is the arena JoinEarly is opening.
type earlyJoin struct {
	name   string
	done   chan struct{}
	cancel context.CancelFunc
	arena  *Arena
	err    error
}

// discard ends the open and closes what it opened.
func (j *earlyJoin) discard() {
	j.cancel()
	<-j.done
	if j.arena != nil {
		j.arena.Close()
		j.arena = nil
	}
}

// JoinEarly starts opening the group's arena when the records decide for
// it (backend.EarlyJoiner); Join finishes.
func (o *Offloader) JoinEarly(ctx context.Context, s *backend.Setup) {
	if !supported || !slices.Contains(s.Records[0].Transports, arenaPromised) || !colocated(s, allRanks(s.Size)) {
		return
	}
	name := arenaName(s.Session, s.Group)
	// As finish: leave time to fall back after a failed open.
	wait := openTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	octx, cancel := context.WithTimeout(ctx, wait)
	j := &earlyJoin{name: name, done: make(chan struct{}), cancel: cancel}
	o.mu.Lock()
	o.joining = j
	o.mu.Unlock()
	go func() {
		defer close(j.done)
		j.arena, j.err = o.openEarly(octx, s, name)
	}()
}

// openEarly opens the arena name of every rank: rank 0 the one it created
// at Describe, the others by joining it.
func (o *Offloader) openEarly(ctx context.Context, s *backend.Setup, name string) (*Arena, error) {
	cfg := o.config(s, allRanks(s.Size), name)
	if s.Rank != 0 {
		return Open(ctx, cfg)
	}
	c, err, ok := o.takeEarly(name)
	switch {
	case !ok:
		return nil, fmt.Errorf("shm: arena %s was promised but not created", name)
	case err != nil:
		return nil, err
	}
	// Laid out by UseTable's table, which is the group's: the rest of the
	// group's choices too.
	c.cfg.Table = cfg.Table
	return c.Open(ctx)
}

// takeJoining hands over the open JoinEarly started, if any.
func (o *Offloader) takeJoining() *earlyJoin {
	o.mu.Lock()
	defer o.mu.Unlock()
	j := o.joining
	o.joining = nil
	return j
}

// finishEarly routes through the arena j opened, or, where the open
// failed on every rank, agrees so that rank 0 can remove the failed file
// (no rank looks for it after that) and leaves the group to the fabric.
func (o *Offloader) finishEarly(ctx context.Context, s *backend.Setup, j *earlyJoin, tr transport.Transport) (backend.Offload, transport.Transport, error) {
	select {
	case <-j.done:
	case <-ctx.Done():
		j.discard()
		return nil, tr, fmt.Errorf("shm: opening the arena: %w", ctxErr(ctx))
	}
	j.cancel()
	under, routable := tr.(Underlay)
	if j.err == nil && routable {
		rt, err := newRouter(under, j.arena)
		if err != nil {
			j.arena.Abort(err)
			return nil, tr, fmt.Errorf("shm: attaching the arena: %w", err)
		}
		o.Close() // every rank has decided: the probe has served
		return j.arena, rt, nil
	}
	if j.err != nil {
		o.warnOpen(s, j.err)
	}
	if j.arena != nil {
		j.arena.Close()
	}
	_, err := s.Agree(ctx, false)
	if s.Rank == 0 {
		removeFailed(filepath.Join(DefaultDir, j.name))
	}
	// The probe stays for JoinHost; the engine's Close removes it.
	return nil, tr, err
}
