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

// Split opens an arena for a group split from this arena's group when
// every rank of the child is one of this arena's (backend.Splitter): the
// child's rank 0 creates it beside this one, the others join once every
// rank agreed that it exists. The child's messages keep going through this
// arena's rings; the new arena carries its collectives.
func (a *Arena) Split(ctx context.Context, c backend.ChildSetup) (backend.Offload, error) {
	here := true
	for _, r := range c.Ranks {
		if _, ok := a.LocalRank(r); !ok {
			here = false
		}
	}
	t := *c.Table
	name := fmt.Sprintf("%s-c%d-r%d", filepath.Base(a.path), c.ID, c.Ranks[0])
	cfg := Config{Name: name, Dir: filepath.Dir(a.path), Rank: c.Rank, Size: len(c.Ranks), Mode: ModeJoin,
		OneShotMax: t.ShmOneShot(len(c.Ranks)), DirectMin: t.ShmDirect(), RingSize: childRingSize, Table: &t,
	}
	var created *Created
	ok := here
	if here && c.Rank == 0 {
		cfg.Mode = ModeCreate
		var err error
		if created, err = Create(cfg); err != nil {
			ok = false
		}
	}
	agreed, err := c.Agree(ctx, ok)
	if err != nil || !agreed {
		if created != nil {
			created.Discard()
		}
		return nil, err
	}
	wait := openTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	octx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var child *Arena
	if created != nil {
		child, err = created.Open(octx)
	} else {
		child, err = Open(octx, cfg)
	}
	if err != nil {
		// The arena's setup ends alike on every rank (awaitCountAlike):
		// the child runs the engine's algorithms everywhere.
		glog.Warnf("godist: group %q rank %d: opening the shared-memory arena of a split group failed, it uses the parent's connections: %v",
			c.Name, c.Rank, err)
		return nil, nil
	}
	return child, nil
}
