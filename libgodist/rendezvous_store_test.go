package libgodist

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/godist/godist/store"
)

// TestRendezvousStore connects 3 ranks through a shared HashStore (twice, as
// after a destroy and re-init on the same store) and runs a barrier.
func TestRendezvousStore(t *testing.T) {
	const n = 3
	hs := store.NewHashStore(0)
	defer hs.Close()
	for round := range 2 {
		pgs := make([]*ProcessGroup, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			pg, err := New(Config{Rank: r, Size: n, Group: "rdv", Timeout: 10 * time.Second}, backends(t, ""))
			require.NoError(t, err)
			pgs[r] = pg
			wg.Go(func() { errs[r] = pg.RendezvousStore(context.Background(), hs, 10*time.Second) })
		}
		wg.Wait()
		for r, err := range errs {
			require.NoError(t, err, "round %d rank %d", round, r)
		}
		works := make([]*Work, n)
		for r, pg := range pgs {
			w, err := pg.Barrier(Opts{})
			require.NoError(t, err)
			works[r] = w
		}
		for _, w := range works {
			require.NoError(t, w.Wait(10*time.Second))
		}
		for _, pg := range pgs {
			require.NoError(t, pg.Close())
		}
	}
	v, err := hs.Get(context.Background(), rdvGenerationKey)
	require.NoError(t, err)
	assert.Equal(t, "6", string(v))
	ok, err := hs.Check(context.Background(), []string{"godist/1/2"})
	require.NoError(t, err)
	assert.True(t, ok, "second round uses generation 1")
}

// TestRendezvousStoreTimeout: rank 1 never comes, so rank 0 fails with a
// RendezvousError that names it and reports a timeout.
func TestRendezvousStoreTimeout(t *testing.T) {
	hs := store.NewHashStore(0)
	defer hs.Close()
	pg, err := New(Config{Rank: 0, Size: 2, Group: "lonely", Timeout: time.Second}, backends(t, ""))
	require.NoError(t, err)
	defer pg.Close()
	err = pg.RendezvousStore(context.Background(), hs, 200*time.Millisecond)
	var re *RendezvousError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, []int{1}, re.Missing)
	assert.True(t, re.Timeout())
	assert.True(t, errors.Is(err, store.ErrTimeout))
	assert.Contains(t, err.Error(), "rank(s) [1] did not join")
}

// waitSignal is a store that closes waiting when Wait is first called.
type waitSignal struct {
	store.Store
	once    sync.Once
	waiting chan struct{}
}

func (s *waitSignal) Wait(ctx context.Context, keys []string) error {
	s.once.Do(func() { close(s.waiting) })
	return s.Store.Wait(ctx, keys)
}

// TestRendezvousStoreClose: closing the group ends a rendezvous in progress
// (waiting in the store for the other rank).
func TestRendezvousStoreClose(t *testing.T) {
	hs := store.NewHashStore(0)
	defer hs.Close()
	s := &waitSignal{Store: hs, waiting: make(chan struct{})}
	pg, err := New(Config{Rank: 0, Size: 2, Group: "closing", Timeout: time.Second}, backends(t, ""))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- pg.RendezvousStore(context.Background(), s, time.Minute) }()
	select {
	case <-s.waiting:
	case err := <-done:
		t.Fatalf("rendezvous ended before waiting: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("rendezvous never waited in the store")
	}
	require.NoError(t, pg.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("rendezvous did not end on Close")
	}
}

// TestRendezvousKeys checks the keys RendezvousKeys reports (which
// python/godist/_rendezvous.py must write too) against the ones
// RendezvousStore writes.
func TestRendezvousKeys(t *testing.T) {
	gen, rec := RendezvousKeys()
	assert.Equal(t, rdvGenerationKey, gen)
	for _, c := range []struct {
		gen  int64
		rank int
	}{{0, 0}, {3, 17}, {12345, 2}} {
		r := strings.NewReplacer("{gen}", strconv.FormatInt(c.gen, 10), "{rank}", strconv.Itoa(c.rank))
		assert.Equal(t, rdvRecordKey(c.gen, c.rank), r.Replace(rec))
	}
}
