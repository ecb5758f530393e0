package shm

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/godist/godist/libgodist/transport"
)

// Shared single copy. The receiver of a single-copy message
// (p2p_direct.go) copies it out of the sender's memory while the sender
// waits. For a large message the sender lends a hand: the receiver opens a
// job on the channel (where the bytes go, which part of the message) and
// both sides claim its pieces of sharePiece bytes, the receiver reading
// each piece it claims out of the sender's memory (process_vm_readv), the
// sender writing each piece it claims into the receiver's
// (process_vm_writev). Each byte is still copied once, and when the two
// ranks have a CPU each, both copy at once.
//
// The job word (chJobClaim) holds gen<<32 | pieces<<16 | next. The
// receiver writes the job's fields (chJobDst, chJobOff, chJobLen), zeroes
// chJobDone and chJobRedo, then publishes the word with the next
// generation and next = 0. A claim is a compare-and-swap of next to next+1
// while next < pieces, by either side. A sender's successful claim proves
// that the word did not change since it read it, so the fields it read in
// between belong to the job it claimed from: the receiver writes a new
// job's fields only after every piece of the last one was claimed.
//
// The sender adds 1 to chJobDone for each piece it finished and rings the
// receiver's doorbell; the receiver returns once every piece it did not
// copy itself is done. A sender that fails to write into the receiver (a
// policy that lets one process read another but not write to it) stores 1
// + that piece in chJobRedo, counts it done and helps no more on that
// channel; the receiver copies the piece itself.
//
// A receiver that fails (a read error, the sender gone) first closes the
// job (next = pieces, so nothing more is claimed) and then waits for the
// pieces already claimed: the sender must not write into a buffer whose
// receive has ended.

const (
	// sharePiece is the unit of a shared copy.
	sharePiece = 256 << 10
	// shareMin is the smallest read shared with the sender.
	shareMin = 2 * sharePiece
	// shareWaitMax bounds how long a receiver waits for the pieces its
	// sender claimed (each is one copy of sharePiece bytes).
	shareWaitMax = 30 * time.Second
)

// shareMaxPieces bounds one job (a 16-bit field of the job word); a longer
// read is shared as several jobs. A variable for tests.
var shareMaxPieces = 1<<16 - 1

// writeMemory is writeProcess; tests replace it to simulate a refusal.
var writeMemory = writeProcess

func jobWord(gen uint64, pieces, next int) uint64 {
	return gen<<32 | uint64(pieces)<<16 | uint64(next)
}

func jobParts(w uint64) (gen uint64, pieces, next int) {
	return w >> 32, int(w >> 16 & 0xffff), int(w & 0xffff)
}

// readShared copies the start of p, all of it up to one job's most, from
// the sender's memory at r.addr, sharing the pieces with the sender. It
// returns how many bytes it copied.
func (a *Arena) readShared(r *directReader, p []byte) (int, error) {
	p = p[:min(len(p), shareMaxPieces*sharePiece)]
	ch := r.ch
	pieces := (len(p) + sharePiece - 1) / sharePiece
	claim, done, redo := a.u64(ch+chJobClaim), a.u32(ch+chJobDone), a.u32(ch+chJobRedo)
	a.u64(ch + chJobDst).Store(uint64(uintptr(unsafe.Pointer(&p[0]))))
	a.u64(ch + chJobOff).Store(uint64(r.off))
	a.u64(ch + chJobLen).Store(uint64(len(p)))
	done.Store(0)
	redo.Store(0)
	gen, _, _ := jobParts(claim.Load())
	claim.Store(jobWord(gen+1, pieces, 0))
	if a.u32(ch+chSendSleep).Load() != 0 {
		futexWake(a.low(ch + chTail))
	}
	mine := 0
	var err error
	for {
		w := claim.Load()
		_, n, k := jobParts(w)
		if k >= n {
			break
		}
		if !claim.CompareAndSwap(w, w+1) {
			continue
		}
		mine++
		if err = r.readPiece(p, k); err != nil {
			break
		}
	}
	claimed := closeJob(claim)
	if werr := a.waitHelper(r, done, claimed-mine); err == nil {
		err = werr
	}
	if k := redo.Load(); err == nil && k != 0 {
		err = r.readPiece(p, int(k-1))
	}
	runtime.KeepAlive(p)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// closeJob stops further claims on the job in claim and returns how many
// of its pieces were claimed.
func closeJob(claim *atomic.Uint64) int {
	for {
		w := claim.Load()
		g, n, k := jobParts(w)
		if k >= n || claim.CompareAndSwap(w, jobWord(g, n, n)) {
			return min(k, n)
		}
	}
}

// readPiece copies piece k of p from the sender's memory.
func (r *directReader) readPiece(p []byte, k int) error {
	lo, hi := k*sharePiece, min((k+1)*sharePiece, len(p))
	for lo < hi {
		n, err := readMemory(r.pid, r.addr+uintptr(lo), p[lo:hi])
		if err != nil || n == 0 {
			return r.readErr(err)
		}
		lo += n
	}
	return nil
}

// waitHelper waits until the sender has finished want pieces of the job.
func (a *Arena) waitHelper(r *directReader, done *atomic.Uint32, want int) error {
	ready := func() bool { return int(done.Load()) >= want }
	if ready() {
		return nil
	}
	bell := a.ctl(a.rank) + ctlBell
	deadline := time.Now().Add(shareWaitMax)
	return a.waitLoopWith(&a.p2pPol, ready, (*uint32)(a.ptr(bell)), a.u32(bell+4), deadline,
		func(now time.Time, live bool) error {
			if err := a.peerErr("recv", r.src, live); err != nil {
				return err
			}
			if !now.Before(deadline) {
				return &transport.PeerError{Op: "recv", Peer: a.globalRank(r.src),
					Err: fmt.Errorf("%w: local rank %d did not finish its part of a copy within %v", transport.ErrTimeout, r.src, shareWaitMax)}
			}
			return nil
		})
}

// waitConsumed waits until peer has consumed everything this rank wrote
// into channel ch (head bytes), the single-copy message data last, and
// meanwhile copies the pieces of data it claims from the receiver's jobs.
// The caller holds sendMu[peer].
func (a *Arena) waitConsumed(c *opCtx, peer, ch int, head uint64, data []byte) error {
	claim := a.u64(ch + chJobClaim)
	open := func() bool {
		_, n, k := jobParts(claim.Load())
		return k < n
	}
	for {
		var also func() bool
		if !a.p2p.noHelp[peer] && sysProcessVMWritev != 0 && a.cmaPossible(peer) {
			also = open
		}
		if err := a.waitSpaceOr(c, peer, ch, head, a.lay.ring, also); err != nil {
			return err
		}
		if a.u64(ch+chTail).Load() == head {
			return nil
		}
		a.help(peer, ch, data)
	}
}

// help copies the pieces of data it can claim from peer's open job into
// peer's memory.
func (a *Arena) help(peer, ch int, data []byte) {
	claim := a.u64(ch + chJobClaim)
	pid := a.procs[peer].pid
	for {
		w := claim.Load()
		_, n, k := jobParts(w)
		if k >= n {
			return
		}
		dst := uintptr(a.u64(ch + chJobDst).Load())
		off, ln := a.u64(ch+chJobOff).Load(), a.u64(ch+chJobLen).Load()
		if !claim.CompareAndSwap(w, w+1) {
			continue
		}
		lo, hi := uint64(k)*sharePiece, min(uint64(k+1)*sharePiece, ln)
		ok := off <= uint64(len(data)) && lo < hi && hi <= uint64(len(data))-off &&
			writeAll(pid, dst+uintptr(lo), data[off+lo:off+hi])
		if !ok {
			a.p2p.noHelp[peer] = true
			a.u32(ch + chJobRedo).Store(uint32(k + 1))
		}
		a.u32(ch + chJobDone).Add(1)
		a.ring(peer)
		if !ok {
			return
		}
	}
}

// writeAll copies all of b to address addr of process pid and reports
// whether it could.
func writeAll(pid int, addr uintptr, b []byte) bool {
	for len(b) > 0 {
		m, err := writeMemory(pid, addr, b)
		if err != nil || m <= 0 {
			return false
		}
		addr += uintptr(m)
		b = b[m:]
	}
	return true
}
