package libgodist

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/assemble"
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
	pgs, recs := arenaRanks(t, dir, 3, "small-shm", assemble.Options{PeerHost: "127.0.0.1", Transport: assemble.TransportAuto})
	for r, b := range recs {
		rec, err := wire.UnmarshalPeerRecord(b)
		require.NoError(t, err)
		require.NotEmpty(t, rec.ShmProbe, "rank %d's probe file fits", r)
		if r == 0 {
			require.Contains(t, rec.Transports, "shm-arena", "rank 0 promised the arena")
		}
	}
	require.Less(t, connectRanks(t, pgs, recs), 3*time.Second, "the failed arena is known at once")
	requireOnTCPAndWorking(t, pgs)
	closeRanks(pgs)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left, "nothing left in the shared-memory directory")
}
