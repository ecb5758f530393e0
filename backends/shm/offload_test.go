package shm

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/wire"
)

// TestEarlyArena: with ExpectOneHost, rank 0 creates the group's arena
// when it describes itself; the arena is handed over under its name, and
// removed by Close when nothing took it. Other ranks and offloaders that
// do not expect one host create nothing.
func TestEarlyArena(t *testing.T) {
	if !supported {
		t.Skip("no shared memory here")
	}
	rec := func(rank int32, session uint64, group string) *wire.PeerRecord {
		return &wire.PeerRecord{Rank: rank, WorldSize: 2, Session: session, Group: group}
	}
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(DefaultDir, name))
		return err == nil
	}

	o := NewOffloader()
	o.ExpectOneHost()
	o.Describe(rec(0, 0x1234567, t.Name()))
	name := arenaName(0x1234567, t.Name())
	c, err, ok := o.takeEarly(name)
	require.True(t, ok)
	require.NoError(t, err)
	require.True(t, exists(name))
	c.Discard()
	o.Close()
	require.False(t, exists(name))

	o = NewOffloader()
	o.ExpectOneHost()
	o.Describe(rec(0, 0x7654321, t.Name()))
	name = arenaName(0x7654321, t.Name())
	o.Close() // not taken: removed
	require.False(t, exists(name))
	_, _, ok = o.takeEarly(name)
	require.False(t, ok)

	o = NewOffloader()
	o.ExpectOneHost()
	o.Describe(rec(0, 0x1111, t.Name()))
	_, _, ok = o.takeEarly(arenaName(0x2222, t.Name())) // another name: discarded
	require.False(t, ok)
	require.False(t, exists(arenaName(0x1111, t.Name())))
	o.Close()

	for _, o := range []*Offloader{NewOffloader(), func() *Offloader { o := NewOffloader(); o.ExpectOneHost(); return o }()} {
		r := rec(1, 0, t.Name())
		if !o.oneHost {
			r = rec(0, 0x3333, t.Name())
		}
		o.Describe(r)
		require.Nil(t, o.early)
		require.False(t, exists(arenaName(0x3333, t.Name())))
		o.Close()
	}
}

// TestSetupCountEndsAlike: the last count of an arena's setup completes
// on every rank or on none. A rank that gives up marks it failed; a rank
// that counts itself in later, or waits on it, fails too.
func TestSetupCountEndsAlike(t *testing.T) {
	arenas := openGroup(t, 3, nil)
	defer closeAll(arenas)
	n := arenas[0].u32(hdrProbed)

	n.Store(1) // one rank of three counted itself in
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	require.False(t, arenas[0].awaitCountAlike(short, hdrProbed))
	require.Less(t, time.Since(start), 2*time.Second)
	require.NotZero(t, n.Load()&countFailed)
	n.Add(2) // the others count themselves in after it gave up
	require.False(t, arenas[1].awaitCountAlike(testCtx(t, 5*time.Second), hdrProbed), "a failed count stays failed")

	n.Store(2)
	done := make(chan bool, 2)
	for _, a := range arenas[:2] {
		go func() { done <- a.awaitCountAlike(testCtx(t, 5*time.Second), hdrProbed) }()
	}
	n.Add(1)
	require.True(t, <-done)
	require.True(t, <-done)
	expired, cancel2 := context.WithCancel(context.Background())
	cancel2()
	require.True(t, arenas[2].awaitCountAlike(expired, hdrProbed), "a complete count is complete even after ctx ended")
	require.Zero(t, n.Load()&countFailed)
}
