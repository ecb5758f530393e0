package shm

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/glog"
)

// childRingSize is the ring size of a child's arena: its point-to-point
// messages go through the parent's rings, so its own stay unused.
const childRingSize = 256

// Serves reports whether every rank of a child is one of this arena's
// (backend.Splitter).
func (a *Arena) Serves(ranks []int) bool {
	for _, r := range ranks {
		if _, ok := a.LocalRank(r); !ok {
			return false
		}
	}
	return true
}

// childConfig is the configuration of the arena of a group split from
// this arena's group, for the child's rank c.Rank: a file beside this
// one, named by the child's rank 0 and its key.
func (a *Arena) childConfig(c backend.ChildSetup) Config {
	t := *c.Table
	mode := ModeJoin
	if c.Rank == 0 {
		mode = ModeCreate
	}
	return Config{Name: fmt.Sprintf("%s-c%d-r%d", filepath.Base(a.path), c.Key, c.Ranks[0]), Dir: filepath.Dir(a.path),
		Rank: c.Rank, Size: len(c.Ranks), Mode: mode, OneShotMax: t.ShmOneShot(len(c.Ranks)), DirectMin: t.ShmDirect(),
		RingSize: childRingSize, Table: &t}
}

// PrepareChild creates the child's arena file (on the child's rank 0).
func (a *Arena) PrepareChild(c backend.ChildSetup) (backend.Prepared, error) {
	created, err := Create(a.childConfig(c))
	if err != nil {
		glog.Warnf("godist: group %q: creating the shared-memory arena of a split group failed, it uses the parent's "+
			"connections: %v", c.Name, err)
		return nil, err
	}
	return created, nil
}

// OpenChild opens the child's arena, which the child's rank 0 created
// (p is its *Created there). The child's messages keep going through this
// arena's rings; the new arena carries its collectives.
func (a *Arena) OpenChild(ctx context.Context, c backend.ChildSetup, p backend.Prepared) (backend.Offload, error) {
	wait := openTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	octx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var child *Arena
	var err error
	if created, ok := p.(*Created); ok && created != nil {
		child, err = created.Open(octx)
	} else {
		child, err = Open(octx, a.childConfig(c))
	}
	if err != nil {
		// The arena's setup ends alike on every rank (awaitCountAlike):
		// the child runs the engine's algorithms everywhere.
		glog.Warnf("godist: group %q rank %d: opening the shared-memory arena of a split group failed, it uses the "+
			"parent's connections: %v", c.Name, c.Rank, err)
		return nil, nil
	}
	return child, nil
}
