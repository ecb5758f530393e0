package libgodist

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/backends/shm"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/wire"
)

// TestArenaRank0CouldNotCreateFailsOverAtOnce: in a /dev/shm too small for
// the arena rank 0 promised in its record, the ranks that went to open it
// learn at once that it failed, every rank runs on TCP, and no file is
// left behind. (Without the failed file's mark they would wait for the
// arena for 10 s.)
func TestArenaRank0CouldNotCreateFailsOverAtOnce(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a small tmpfs here (%v)", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	old := shm.DefaultDir
	shm.DefaultDir = dir
	t.Cleanup(func() { shm.DefaultDir = old })

	const n = 3
	pgs := make([]*ProcessGroup, n)
	recs := make([][]byte, n)
	for r := range pgs {
		set, err := assemble.Backends(assemble.Options{PeerHost: "127.0.0.1", Transport: assemble.TransportAuto})
		require.NoError(t, err)
		pg, err := New(Config{Rank: r, Size: n, Group: "small-shm", Timeout: 30 * time.Second}, set)
		require.NoError(t, err)
		pgs[r] = pg
		recs[r], err = pg.LocalRecord()
		require.NoError(t, err)
	}
	rec0, err := wire.UnmarshalPeerRecord(recs[0])
	require.NoError(t, err)
	require.Contains(t, rec0.Transports, "shm-arena", "rank 0 promised the arena")
	for r, b := range recs {
		rec, err := wire.UnmarshalPeerRecord(b)
		require.NoError(t, err)
		require.NotEmpty(t, rec.ShmProbe, "rank %d's probe file fits", r)
	}
	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, pg := range pgs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = pg.Connect(recs, 30*time.Second) }()
	}
	wg.Wait()
	took := time.Since(start)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		require.Equal(t, "", pgs[r].Offload(), "rank %d runs on TCP", r)
	}
	require.Less(t, took, 3*time.Second, "the failed arena is known at once")
	requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(i64s(int64(r)), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	}))
	for _, pg := range pgs {
		wg.Add(1)
		go func() { defer wg.Done(); pg.Close() }()
	}
	wg.Wait()
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, filepath.Join(dir, e.Name()))
	}
	require.Empty(t, names, "nothing left in the shared-memory directory")
}
