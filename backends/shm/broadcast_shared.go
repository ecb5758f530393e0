package shm

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/algo"
)

// Two-rank broadcast by shared single copy. When the two local ranks can
// read each other's memory (direct.go), a broadcast of at least the
// table's ShmSharedBroadcastMin (libgodist/algo) moves no byte through the slots: the bytes go straight
// from the root's buffer into the other rank's, and both ranks copy,
// claiming pieces of sharePiece bytes from one counter: the receiver reads
// each piece it claims out of the root's memory (process_vm_readv), the
// root writes each piece it claims into the receiver's (process_vm_writev),
// as a point-to-point message's sender helps its receiver (p2p_share.go).
// One copy of each byte, made by two CPUs at once, where the slots take
// two (the root's into its slot, the receiver's out of it).
//
// Step s0: each rank writes its buffer's address into its slot half, the
// receiver also zeroes the counters that follow it (next piece, pieces the
// root finished, the root's failed piece), and both publish A and wait for
// the other's. Then both claim pieces until none is left; the root adds 1
// to the receiver's done counter for every piece it wrote and rings the
// receiver's doorbell. The receiver waits for the root's pieces and
// publishes D; the root waits for that D (the receiver reads its buffer
// until then). A root that cannot write into the receiver (a policy that
// allows reads only) stores 1 + that piece as the failed one, counts it
// done and claims no more; the receiver copies the piece itself.
//
// The op uses broadcastSteps(n) step numbers, as the slot protocol does,
// so that a rank that meets a different size (one rank here, the other in
// the slot protocol, or both here) skips the root's steps the same way.

// Fields of the receiver's slot half of step s0 (the root's holds only
// its buffer's address, at bsAddr).
const (
	bsAddr = 0  // u64 address of this rank's buffer
	bsNext = 8  // u64 next piece to claim
	bsDone = 16 // u32 pieces the root finished
	bsRedo = 20 // u32 1 + a piece the root failed to write
)

// useSharedBroadcast reports whether a broadcast of n bytes goes by shared
// single copy (algo.Table.ShmBroadcast).
func (a *Arena) useSharedBroadcast(n int) bool {
	return a.table.ShmBroadcast(n, a.size, a.lay.direct, a.direct) == algo.ShmSharedCopy
}

func (a *Arena) broadcastShared(c *opCtx, buf []byte, root int) error {
	n, me, peer := len(buf), a.rank, 1-a.rank
	d := desc{kind: kindBroadcast, arg: uint32(root), n: uint64(n)}
	steps := a.broadcastSteps(n)
	s0 := a.step
	last := s0 + uint64(steps) - 1
	if err := a.waitFree(c, s0); err != nil {
		return err
	}
	mine := a.lay.buf(me, s0)
	a.u64(mine + bsAddr).Store(addrOf(buf))
	if me != root {
		a.u64(mine + bsNext).Store(0)
		a.u32(mine + bsDone).Store(0)
		a.u32(mine + bsRedo).Store(0)
	}
	a.pubA(s0, d)
	got, err := a.waitA(c, peer, s0)
	if err == nil {
		err = a.match(c, peer, got, d, true)
	}
	if err != nil {
		if fatal(err) {
			return err
		}
		// A different size: skip the root's steps, as broadcast does.
		if me != root {
			last = s0 + uint64(a.broadcastSteps(int(got.n))) - 1
		} else {
			err = nil
		}
		a.pubD(last)
		a.step = last + 1
		return err
	}
	recv := a.lay.buf(me, s0)
	if me == root {
		recv = a.lay.buf(peer, s0)
	}
	next := a.u64(recv + bsNext)
	pieces := uint64(chunks(n, sharePiece))
	if me == root {
		a.writeShared(peer, recv, buf, pieces)
		a.pubD(last)
		a.step = last + 1
		return a.awaitAll(c, ctlD, sleepD, last)
	}
	src := a.u64(a.lay.buf(root, s0) + bsAddr).Load()
	var own uint64
	for {
		k := next.Add(1) - 1
		if k >= pieces {
			break
		}
		own++
		lo, hi := int(k)*sharePiece, min(int(k+1)*sharePiece, n)
		if err = a.readPeer(c, root, src+uint64(lo), buf[lo:hi]); err != nil {
			break
		}
	}
	claimed := min(next.Add(pieces)-pieces, pieces) // stops the root's claims
	if werr := a.awaitRootPieces(c, root, a.u32(recv+bsDone), claimed-own); err == nil {
		err = werr
	}
	if k := a.u32(recv + bsRedo).Load(); err == nil && k != 0 {
		lo, hi := int(k-1)*sharePiece, min(int(k)*sharePiece, n)
		err = a.readPeer(c, root, src+uint64(lo), buf[lo:hi])
	}
	runtime.KeepAlive(buf)
	if err != nil {
		return err
	}
	return a.finishDirect(c, last)
}

// writeShared is the root's part: it writes the pieces it claims from the
// counter in the receiver's slot half at recv into the receiver's buffer.
func (a *Arena) writeShared(peer, recv int, buf []byte, pieces uint64) {
	next, done := a.u64(recv+bsNext), a.u32(recv+bsDone)
	dst := uintptr(a.u64(recv + bsAddr).Load())
	pid := a.procs[peer].pid
	for {
		k := next.Add(1) - 1
		if k >= pieces {
			return
		}
		lo, hi := int(k)*sharePiece, min(int(k+1)*sharePiece, len(buf))
		ok := writeAll(pid, dst+uintptr(lo), buf[lo:hi])
		if !ok {
			a.u32(recv + bsRedo).Store(uint32(k + 1))
		}
		done.Add(1)
		a.ring(peer)
		if !ok {
			return
		}
	}
}

// awaitRootPieces waits until the root has finished want pieces (done),
// for as long as the operation may wait for the root.
func (a *Arena) awaitRootPieces(c *opCtx, root int, done *atomic.Uint32, want uint64) error {
	ready := func() bool { return uint64(done.Load()) >= want }
	if ready() {
		return nil
	}
	bell := a.ctl(a.rank) + ctlBell
	return a.waitLoopWith(&a.pol, ready, (*uint32)(a.ptr(bell)), a.u32(bell+4), c.dl,
		func(now time.Time, live bool) error { return a.checkWait(c, root, now, live) })
}
