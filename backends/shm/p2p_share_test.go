package shm

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/transport"
)

// shareTransports returns n transports whose receivers share large
// single-copy reads with their senders (whatever the CPU count).
func shareTransports(t *testing.T, n int) []*Transport {
	t.Helper()
	skipWithoutCMA(t)
	trs := newTransports(t, n, nil)
	for _, tr := range trs {
		tr.Arena().p2p.share.Store(true)
	}
	return trs
}

// holdReads makes the first read of a piece of another process's memory
// (longer than the probes' 8 bytes) wait until cond holds, for at most
// 10 s; later reads go straight through. A receiver that claimed the first
// piece of a job then stalls until its sender has done what cond looks
// for.
func holdReads(t *testing.T, cond func() bool) {
	var held atomic.Bool
	readMemory = func(pid int, addr uintptr, p []byte) (int, error) {
		if len(p) > 8 && !held.Load() {
			testutil.WaitUntil(10*time.Second, cond)
			held.Store(true)
		}
		return readProcess(pid, addr, p)
	}
	t.Cleanup(func() { readMemory = readProcess })
}

// holdWrites makes the first write into another process's memory wait
// until cond holds, for at most 10 s. It sets started as that write
// begins, and held if cond held.
func holdWrites(t *testing.T, cond func() bool) (started, held *atomic.Bool) {
	started, held = new(atomic.Bool), new(atomic.Bool)
	writeMemory = func(pid int, addr uintptr, p []byte) (int, error) {
		if !started.Swap(true) {
			held.Store(testutil.WaitUntil(10*time.Second, cond))
		}
		return writeProcess(pid, addr, p)
	}
	t.Cleanup(func() { writeMemory = writeProcess })
	return started, held
}

// refuseWrites makes every write into another process's memory fail and
// returns the count of attempts.
func refuseWrites(t *testing.T) *atomic.Int32 {
	var writes atomic.Int32
	writeMemory = func(int, uintptr, []byte) (int, error) {
		writes.Add(1)
		return 0, syscall.EPERM
	}
	t.Cleanup(func() { writeMemory = writeProcess })
	return &writes
}

// sendPosted sends want from rank from to rank to into a receive posted
// first, and checks that it arrived whole.
func sendPosted(t *testing.T, ctx context.Context, trs []*Transport, from, to int, tag transport.Tag, want []byte, what string) {
	t.Helper()
	got := make([]byte, len(want))
	r := trs[to].PostRecv(from, tag, got)
	require.NoError(t, trs[from].Send(ctx, to, tag, want), what)
	require.NoError(t, r.Wait(ctx), what)
	require.Equal(t, want, got, what)
}

// TestSharedCopy: large single-copy messages arrive whole, posted or not,
// in both directions and back to back (each read a new job), at sizes
// around the sharing threshold and the piece size.
func TestSharedCopy(t *testing.T) {
	trs := shareTransports(t, 2)
	ctx := testCtx(t, 20*time.Second)
	tag := transport.P2PTag(5)
	sizes := []int{shareMin - 1, shareMin, shareMin + 7, 3*sharePiece - 1, 5<<20 + 13, 16 << 20}
	for i, n := range sizes {
		for dir := 0; dir < 2; dir++ {
			src, dst := trs[dir], trs[1-dir]
			want := randBytes(n, uint64(10*i+dir))
			sendPosted(t, ctx, trs, dir, 1-dir, tag, want, fmt.Sprintf("posted, %d bytes, from %d", n, dir))
			// Not posted: the receiver goroutine reads it into the mailbox.
			require.NoError(t, src.Send(ctx, 1-dir, tag, want))
			got2 := make([]byte, n)
			require.NoError(t, dst.PostRecv(dir, tag, got2).Wait(ctx))
			require.Equal(t, want, got2, "unexpected, %d bytes, from %d", n, dir)
		}
	}
}

// TestSharedCopySenderHelps: while the receiver copies slowly, the sender
// claims pieces of the job and writes them into the receiver's buffer.
func TestSharedCopySenderHelps(t *testing.T) {
	trs := shareTransports(t, 2)
	a := trs[0].Arena()
	ch := a.lay.ch(0, 1)
	// The receiver copies its first piece only once the sender has
	// finished one.
	holdReads(t, func() bool { return a.u32(ch+chJobDone).Load() > 0 })
	ctx := testCtx(t, 20*time.Second)
	tag := transport.P2PTag(6)
	sendPosted(t, ctx, trs, 0, 1, tag, randBytes(16*sharePiece+5, 3), "")
	helped := a.u32(ch + chJobDone).Load()
	require.Positive(t, helped, "the sender copied no piece")
	_, pieces, next := jobParts(a.u64(ch + chJobClaim).Load())
	require.Equal(t, 17, pieces)
	require.Equal(t, pieces, next)
	require.Zero(t, a.u32(ch+chJobRedo).Load())
}

// TestSharedCopyWriteRefused: a sender that cannot write into its
// receiver's memory hands its piece back and stops helping; the receiver
// copies that piece itself and every message still arrives whole.
func TestSharedCopyWriteRefused(t *testing.T) {
	writes := refuseWrites(t)
	trs := shareTransports(t, 2)
	// The receiver copies its first piece only once the sender has tried
	// to write one.
	holdReads(t, func() bool { return writes.Load() > 0 })
	ctx := testCtx(t, 20*time.Second)
	tag := transport.P2PTag(7)
	for i := 0; i < 3; i++ {
		sendPosted(t, ctx, trs, 0, 1, tag, randBytes(8*sharePiece+i, uint64(i)), fmt.Sprintf("message %d", i))
	}
	require.Equal(t, int32(1), writes.Load(), "the sender kept trying after a refusal")
	require.True(t, trs[0].Arena().p2p.noHelp[1])
}

// TestSharedCopyJobs: a read longer than a job's most pieces is shared as
// several jobs, each a new generation.
func TestSharedCopyJobs(t *testing.T) {
	old := shareMaxPieces
	shareMaxPieces = 3
	t.Cleanup(func() { shareMaxPieces = old })
	trs := shareTransports(t, 2)
	ctx := testCtx(t, 20*time.Second)
	tag := transport.P2PTag(8)
	a := trs[1].Arena()
	gen0, _, _ := jobParts(a.u64(a.lay.ch(0, 1) + chJobClaim).Load())
	// 3+3+3 pieces, then 2 pieces and a byte
	sendPosted(t, ctx, trs, 0, 1, tag, randBytes(11*sharePiece+1, 9), "")
	gen, pieces, next := jobParts(a.u64(a.lay.ch(0, 1) + chJobClaim).Load())
	require.Equal(t, gen0+4, gen, "four jobs")
	require.Equal(t, 3, pieces)
	require.Equal(t, 3, next)
}

// TestSharedCopyReadFails: a receiver whose read fails in the middle of a
// job fails the receive with ErrConnLost after the pieces its sender
// claimed are done; the sender gives up at its deadline.
//
// The receiver's first read waits until the sender is writing a piece
// (or has given up), and that write until the receiver's read has failed
// and the receiver sleeps waiting for the piece.
func TestSharedCopyReadFails(t *testing.T) {
	var reads atomic.Int32
	var rx *Arena // the receiver's
	writing, waited := holdWrites(t, func() bool {
		return reads.Load() > 3 && rx.u32(rx.ctl(1)+ctlBell+4).Load() > 0
	})
	readMemory = func(pid int, addr uintptr, p []byte) (int, error) {
		if len(p) > 8 { // a piece, not a probe
			ch := rx.lay.ch(0, 1)
			testutil.WaitUntil(10*time.Second, func() bool { return writing.Load() || rx.u32(ch+chBroken).Load() != 0 })
		}
		// The probes (both ways at Open, then the receiver's before the
		// first message) succeed; the first piece fails.
		if reads.Add(1) > 3 {
			return 0, syscall.EFAULT
		}
		return readProcess(pid, addr, p)
	}
	t.Cleanup(func() { readMemory = readProcess })
	trs := shareTransports(t, 2)
	rx = trs[1].Arena()
	tag := transport.P2PTag(9)
	n := 32 * sharePiece
	got := make([]byte, n)
	r := trs[1].PostRecv(0, tag, got)
	data := randBytes(n, 1) // before the deadline starts: ~300 ms under -race
	// The receiver never consumes the message: the sender waits for its
	// deadline, which leaves it ample time to claim its piece first.
	sctx := testCtx(t, 2*time.Second)
	serr := trs[0].Send(sctx, 1, tag, data)
	require.ErrorIs(t, serr, transport.ErrTimeout)
	rctx := testCtx(t, 10*time.Second)
	require.ErrorIs(t, r.Wait(rctx), transport.ErrConnLost)
	require.True(t, waited.Load(), "the receiver did not wait for the sender's piece after its read failed")
	a := trs[1].Arena()
	ch := a.lay.ch(0, 1)
	_, pieces, next := jobParts(a.u64(ch + chJobClaim).Load())
	require.Equal(t, pieces, next, "the job was closed")
}

func TestJobWord(t *testing.T) {
	w := jobWord(7, 65535, 12)
	g, n, k := jobParts(w)
	require.Equal(t, uint64(7), g)
	require.Equal(t, 65535, n)
	require.Equal(t, 12, k)
	g, n, k = jobParts(w + 1)
	require.Equal(t, []any{uint64(7), 65535, 13}, []any{g, n, k})
}

// TestSharedCopyBothWays: two ranks send each other large messages at the
// same time, each sender helping its receiver while its own receive is
// being copied.
func TestSharedCopyBothWays(t *testing.T) {
	trs := shareTransports(t, 2)
	ctx := testCtx(t, 20*time.Second)
	tag := transport.P2PTag(10)
	n := 24*sharePiece + 3
	for round := 0; round < 4; round++ {
		wants := [][]byte{randBytes(n, uint64(round)), randBytes(n, uint64(round+100))}
		gots := [][]byte{make([]byte, n), make([]byte, n)}
		errs := make(chan error, 2)
		for r := 0; r < 2; r++ {
			rcv := trs[r].PostRecv(1-r, tag, gots[r])
			go func() {
				if err := trs[r].Send(ctx, 1-r, tag, wants[r]); err != nil {
					errs <- err
					return
				}
				errs <- rcv.Wait(ctx)
			}()
		}
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		require.Equal(t, wants[1], gots[0], "round %d", round)
		require.Equal(t, wants[0], gots[1], "round %d", round)
	}
}
