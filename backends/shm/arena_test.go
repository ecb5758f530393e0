package shm

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/transport"
)

func TestOpenUnlinksAndCloses(t *testing.T) {
	for _, mode := range []Mode{ModeAuto, ModeCreate} {
		t.Run([]string{"auto", "leader"}[mode], func(t *testing.T) {
			base := runtime.NumGoroutine()
			arenas := openGroup(t, 3, func(c *Config) {
				if mode == ModeCreate {
					c.Mode = ModeJoin
					if c.Rank == 1 {
						c.Mode = ModeCreate
					}
				}
			})
			_, err := os.Stat(arenas[0].Path())
			require.True(t, errors.Is(err, fs.ErrNotExist), "arena file must be unlinked once all ranks mapped it: %v", err)
			for r, a := range arenas {
				require.Equal(t, r, a.Rank())
				require.Equal(t, 3, a.Size())
			}
			requireAllOK(t, onAll(arenas, func(r int, a *Arena) error { return a.Barrier(testCtx(t, 5*time.Second)) }), "barrier")
			closeAll(arenas)
			closeAll(arenas) // idempotent
			err = arenas[0].Barrier(testCtx(t, time.Second))
			require.ErrorIs(t, err, transport.ErrClosed)
			requireNoLeak(t, base)
		})
	}
}

func TestOpenTimeoutWhenRankMissing(t *testing.T) {
	name := uniqueName()
	ctx := testCtx(t, 200*time.Millisecond)
	start := time.Now()
	errs := make([]error, 2)
	done := make(chan struct{})
	for r := 0; r < 2; r++ {
		go func() {
			a, err := Open(ctx, Config{Name: name, Rank: r, Size: 3})
			if a != nil {
				a.Close()
			}
			errs[r] = err
			done <- struct{}{}
		}()
	}
	<-done
	<-done
	for _, err := range errs {
		require.ErrorIs(t, err, transport.ErrTimeout)
		var pe *transport.PeerError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, 2, pe.Peer)
		require.Equal(t, "open", pe.Op)
	}
	require.Less(t, time.Since(start), 3*time.Second)
	_, err := os.Stat(filepath.Join(DefaultDir, name))
	require.ErrorIs(t, err, fs.ErrNotExist, "a failed open must not leak the file")
}

// TestCreateThenOpen: Create makes the file without waiting for anyone;
// the others join it and Created.Open returns the creator's arena.
// Discard removes a file that will not be opened.
func TestCreateThenOpen(t *testing.T) {
	name := uniqueName()
	c, err := Create(Config{Name: name, Rank: 0, Size: 2, Mode: ModeCreate})
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(DefaultDir, name))
	require.NoError(t, err, "Create makes the file at once")
	ctx := testCtx(t, 5*time.Second)
	joined := make(chan error, 1)
	var other *Arena
	go func() {
		var err error
		other, err = Open(ctx, Config{Name: name, Rank: 1, Size: 2, Mode: ModeJoin})
		joined <- err
	}()
	a, err := c.Open(ctx)
	require.NoError(t, err)
	require.NoError(t, <-joined)
	arenas := []*Arena{a, other}
	requireAllOK(t, onAll(arenas, func(r int, a *Arena) error { return a.Barrier(testCtx(t, 5*time.Second)) }), "barrier")
	closeAll(arenas)
	_, err = c.Open(ctx)
	require.ErrorIs(t, err, ErrInvalid, "a Created opens once")

	name = uniqueName()
	c, err = Create(Config{Name: name, Rank: 0, Size: 2, Mode: ModeCreate})
	require.NoError(t, err)
	c.Discard()
	_, err = os.Stat(filepath.Join(DefaultDir, name))
	require.ErrorIs(t, err, fs.ErrNotExist, "Discard removes the file")

	_, err = Create(Config{Name: uniqueName(), Rank: 0, Size: 2, Mode: ModeJoin})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestOpenJoinWithoutCreator(t *testing.T) {
	_, err := Open(testCtx(t, 50*time.Millisecond), Config{Name: uniqueName(), Rank: 1, Size: 2, Mode: ModeJoin})
	require.ErrorIs(t, err, transport.ErrTimeout)
}

func TestOpenConfigChecks(t *testing.T) {
	ctx := testCtx(t, time.Second)
	for _, cfg := range []Config{
		{Name: "", Rank: 0, Size: 1},
		{Name: "a/b", Rank: 0, Size: 1},
		{Name: "x", Rank: 2, Size: 2},
		{Name: "x", Rank: 0, Size: 0},
		{Name: "x", Rank: 0, Size: 2, ChunkSize: 100},
		{Name: "x", Rank: 0, Size: 2, RingSize: 10},
		{Name: "x", Rank: 0, Size: 2, GlobalRanks: []int{1}},
	} {
		_, err := Open(ctx, cfg)
		require.ErrorIs(t, err, ErrInvalid, "%+v", cfg)
	}
	// A joining rank that asks for another layout is refused.
	name := uniqueName()
	done := make(chan error, 1)
	go func() {
		a, err := Open(testCtx(t, 300*time.Millisecond), Config{Name: name, Rank: 0, Size: 2, Mode: ModeCreate, ChunkSize: 4096})
		if a != nil {
			a.Close()
		}
		done <- err
	}()
	_, err := Open(testCtx(t, 5*time.Second), Config{Name: name, Rank: 1, Size: 2, Mode: ModeJoin, ChunkSize: 8192})
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorIs(t, <-done, transport.ErrTimeout)
	// The leader refuses an existing file.
	p := filepath.Join(DefaultDir, uniqueName())
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	defer os.Remove(p)
	_, err = Open(ctx, Config{Name: filepath.Base(p), Rank: 0, Size: 2, Mode: ModeCreate})
	require.ErrorIs(t, err, fs.ErrExist)
}

func TestSizeOne(t *testing.T) {
	a := openGroup(t, 1, nil)[0]
	ctx := testCtx(t, time.Second)
	buf := []byte{1, 2, 3, 4}
	require.NoError(t, a.AllReduce(ctx, buf, 4, dtypeCases[0].combine))
	require.Equal(t, []byte{1, 2, 3, 4}, buf)
	require.NoError(t, a.Broadcast(ctx, buf, 0))
	out := make([]byte, 4)
	require.NoError(t, a.AllGather(ctx, buf, [][]byte{out}))
	require.Equal(t, buf, out)
	out2 := make([]byte, 4)
	require.NoError(t, a.ReduceScatter(ctx, [][]byte{buf}, out2, 4, dtypeCases[0].combine))
	require.Equal(t, buf, out2)
	out3 := make([]byte, 4)
	require.NoError(t, a.AllToAll(ctx, [][]byte{buf}, [][]byte{out3}))
	require.Equal(t, buf, out3)
	require.NoError(t, a.Barrier(ctx))
}
