package shm

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/transport"
)

// sharedPair opens two ranks that can read each other's memory.
func sharedPair(t *testing.T) []*Arena {
	t.Helper()
	skipWithoutCMA(t)
	arenas := openGroup(t, 2, nil)
	t.Cleanup(func() { closeAll(arenas) })
	require.True(t, arenas[0].Direct())
	return arenas
}

// broadcastAll broadcasts from root on both ranks, each with its own buffer
// of sizes[r] bytes (the root's holding data), and returns the buffers and
// errors.
func broadcastAll(t *testing.T, arenas []*Arena, root int, sizes []int, data []byte) ([][]byte, []error) {
	ctx := testCtx(t, 20*time.Second)
	bufs := make([][]byte, len(arenas))
	for r := range bufs {
		bufs[r] = randBytes(sizes[r], uint64(r+5))
	}
	copy(bufs[root], data)
	errs := onAll(arenas, func(r int, a *Arena) error { return a.Broadcast(ctx, bufs[r], root) })
	return bufs, errs
}

// sharedMin is the default table's smallest broadcast by shared single copy.
var sharedMin = algo.Default().ShmSharedBroadcastMin

// TestSharedBroadcast: two ranks broadcast large buffers by shared single
// copy, from either root, around the threshold and the piece size.
func TestSharedBroadcast(t *testing.T) {
	arenas := sharedPair(t)
	for _, n := range []int{sharedMin - 1, sharedMin, sharedMin + 7, 9*sharePiece - 3, 5<<20 + 3} {
		for root := 0; root < 2; root++ {
			require.Equal(t, n >= sharedMin, arenas[root].useSharedBroadcast(n))
			data := randBytes(n, uint64(n+root))
			bufs, errs := broadcastAll(t, arenas, root, []int{n, n}, data)
			requireAllOK(t, errs, fmt.Sprintf("n=%d root=%d", n, root))
			for r := range bufs {
				require.True(t, bytes.Equal(data, bufs[r]), "n=%d root=%d rank %d", n, root, r)
			}
		}
	}
	requireAllOK(t, onAll(arenas, func(r int, a *Arena) error { return a.Barrier(testCtx(t, 10*time.Second)) }), "barrier")
}

// TestSharedBroadcastRootHelps: while the receiver reads slowly, the root
// writes pieces into the receiver's buffer.
func TestSharedBroadcastRootHelps(t *testing.T) {
	arenas := sharedPair(t)
	n := 12*sharePiece + 1
	s0 := arenas[1].step
	a := arenas[1]
	recv := a.lay.buf(1, s0)
	// The receiver reads its first piece only once the root has written one.
	holdReads(t, func() bool { return a.u32(recv+bsDone).Load() > 0 })
	data := randBytes(n, 11)
	bufs, errs := broadcastAll(t, arenas, 0, []int{n, n}, data)
	requireAllOK(t, errs, "broadcast")
	require.True(t, bytes.Equal(data, bufs[1]))
	require.Positive(t, a.u32(recv+bsDone).Load(), "the root wrote no piece")
	require.Zero(t, a.u32(recv+bsRedo).Load())
}

// TestSharedBroadcastWriteRefused: a root that cannot write into the
// receiver hands its piece back; the receiver copies it.
func TestSharedBroadcastWriteRefused(t *testing.T) {
	writes := refuseWrites(t)
	arenas := sharedPair(t)
	// The receiver reads its first piece only once the root has tried to
	// write one.
	holdReads(t, func() bool { return writes.Load() > 0 })
	n := 8*sharePiece + 3
	data := randBytes(n, 12)
	bufs, errs := broadcastAll(t, arenas, 1, []int{n, n}, data)
	requireAllOK(t, errs, "broadcast")
	require.True(t, bytes.Equal(data, bufs[0]))
	require.Equal(t, int32(1), writes.Load(), "the root went on writing after a refusal")
}

// TestSharedBroadcastSizeMismatch: whichever protocol each rank picks for
// its size, the receiver gets ErrSizeMismatch, the root no error, and the
// next collectives run.
func TestSharedBroadcastSizeMismatch(t *testing.T) {
	big := sharedMin + 3*sharePiece
	for _, sz := range [][2]int{{big, big + 8}, {big, 4096}, {4096, big}, {big, sharedMin - 1}} {
		t.Run(fmt.Sprintf("root%d_other%d", sz[0], sz[1]), func(t *testing.T) {
			arenas := sharedPair(t)
			_, errs := broadcastAll(t, arenas, 0, sz[:], randBytes(sz[0], 1))
			require.NoError(t, errs[0])
			require.ErrorIs(t, errs[1], transport.ErrSizeMismatch)
			data := randBytes(big, 2)
			bufs, errs := broadcastAll(t, arenas, 1, []int{big, big}, data)
			requireAllOK(t, errs, "after mismatch")
			require.True(t, bytes.Equal(data, bufs[0]))
			requireAllOK(t, onAll(arenas, func(r int, a *Arena) error { return a.Barrier(testCtx(t, 10*time.Second)) }), "barrier")
		})
	}
}

// TestSharedBroadcastReadFails: a receiver that cannot read the root's
// memory in the middle of the copy fails with ErrConnLost, and so does the
// root, within the deadline.
func TestSharedBroadcastReadFails(t *testing.T) {
	arenas := sharedPair(t)
	var reads atomic.Int32
	// The root's first write waits until the receiver's third read has
	// failed: the receiver claims and reads pieces meanwhile.
	writing, _ := holdWrites(t, func() bool { return reads.Load() > 2 })
	readMemory = func(pid int, addr uintptr, p []byte) (int, error) {
		if reads.Add(1) > 2 {
			return 0, syscall.EFAULT
		}
		testutil.WaitUntil(10*time.Second, writing.Load) // the root is copying too
		return readProcess(pid, addr, p)
	}
	t.Cleanup(func() { readMemory = readProcess })
	n := 16 * sharePiece
	start := time.Now()
	_, errs := broadcastAll(t, arenas, 0, []int{n, n}, randBytes(n, 3))
	require.ErrorIs(t, errs[1], transport.ErrConnLost)
	require.Error(t, errs[0])
	require.Less(t, time.Since(start), 15*time.Second)
}
