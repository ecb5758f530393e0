package shm

import (
	"context"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/godist/godist/libgodist/transport"
)

// Single-copy collectives. A collective normally moves every byte twice,
// into the sender's slot and out of it, in chunks of at most ChunkSize
// with a synchronization per chunk. When every local rank can read every
// other rank's memory (process_vm_readv, cross-memory attach), AllToAll
// with blocks of DirectMin bytes or more instead publishes the addresses
// of its blocks in its first step, and every rank reads its blocks straight
// out of the senders' memory: one copy, and two synchronizations per
// operation whatever the size. With more ranks than cores every
// synchronization costs a round of context switches, which is what makes
// this faster (8 ranks on 2 cores, 64 MiB: ~2.5x). Reading another
// process's memory runs at about a quarter of memmove's speed, so the
// collectives that read every byte more than once per rank (AllReduce,
// ReduceScatter) or that pipeline well through the slots (Broadcast,
// AllGather) keep using the slots.
//
// Whether the ranks can read each other is settled once, at Open: each
// rank publishes the address of a probe word of its process, reads every
// peer's, and publishes its verdict; Open returns when every rank has, so
// all ranks take the same path. (Another pid namespace, a ptrace policy
// such as Yama's ptrace_scope >= 1, or a seccomp filter makes the reads
// fail; the collectives then use the slots.)

// directPiece is the most one process_vm_readv call copies: large calls
// pin many pages at once and run slower than a sequence of small ones.
const directPiece = 1 << 20

// probeMagic is the value of every process's probe word.
const probeMagic uint64 = 0x65626f7270747364 // "dstprobe"

var probeWord = probeMagic

// Verdicts in ctlDirect.
const (
	directUnknown = 0
	directYes     = 1
	directNo      = 2
)

// publishProbe writes the address of this process's probe word into this
// rank's control block; called before the rank counts itself joined.
func (a *Arena) publishProbe() {
	*(*uint64)(a.ptr(a.ctl(a.rank) + ctlProbe)) = uint64(uintptr(unsafe.Pointer(&probeWord)))
}

// probeDirect reads every peer's probe word, publishes this rank's verdict
// and waits until every rank has published its own (bounded by ctx); it
// sets a.direct when all verdicts are yes. Called by join once every rank
// has joined.
func (a *Arena) probeDirect(ctx context.Context) error {
	ok := sysProcessVMReadv != 0
	for q := 0; q < a.size && ok; q++ {
		if q == a.rank {
			continue
		}
		addr := uintptr(*(*uint64)(a.ptr(a.ctl(q) + ctlProbe)))
		var b [8]byte
		k, err := readMemory(a.procs[q].pid, addr, b[:])
		ok = err == nil && k == 8 && *(*uint64)(unsafe.Pointer(&b[0])) == probeMagic
	}
	v := uint32(directNo)
	if ok {
		v = directYes
	}
	a.u32(a.ctl(a.rank) + ctlDirect).Store(v)
	if a.u32(hdrProbed).Add(1)&countFailed != 0 {
		a.u32(a.ctl(a.rank) + ctlState).Store(stateClosed)
		return fmt.Errorf("%w: another local rank gave up waiting for the ranks to probe each other", transport.ErrTimeout)
	}
	futexWake((*uint32)(a.ptr(hdrProbed)))
	if !a.awaitCountAlike(ctx, hdrProbed) {
		a.u32(a.ctl(a.rank) + ctlState).Store(stateClosed)
		return fmt.Errorf("%w: waiting for the local ranks to probe each other", ctxErr(ctx))
	}
	a.direct = true
	for q := 0; q < a.size; q++ {
		if a.u32(a.ctl(q)+ctlDirect).Load() != directYes {
			a.direct = false
		}
	}
	return nil
}

// Direct reports whether large collectives copy straight out of the peers'
// memory (every local rank could read every other's at Open).
func (a *Arena) Direct() bool { return a.direct }

// addrOf is the address of b's first byte, 0 for an empty b.
func addrOf(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// readPeer copies len(dst) bytes at address addr of local rank q's process
// into dst, in pieces of at most directPiece, checking between pieces that
// the operation may go on. A failed read is fatal (*transport.PeerError
// wrapping ErrConnLost): q's process is gone or its memory went away.
func (a *Arena) readPeer(c *opCtx, q int, addr uint64, dst []byte) error {
	pid := a.procs[q].pid
	for len(dst) > 0 {
		k, err := readMemory(pid, uintptr(addr), dst[:min(len(dst), directPiece)])
		if err != nil || k == 0 {
			if err == nil {
				err = fmt.Errorf("read 0 of %d bytes", len(dst))
			}
			if perr := a.peerErr(c.op, q, true); perr != nil {
				return perr
			}
			return &transport.PeerError{Op: c.op, Peer: a.globalRank(q),
				Err: fmt.Errorf("%w: reading local rank %d's memory: %v", transport.ErrConnLost, q, err)}
		}
		dst = dst[k:]
		addr += uint64(k)
		if len(dst) > 0 {
			if err := a.checkWait(c, q, time.Now(), false); err != nil {
				return err
			}
		}
	}
	runtime.KeepAlive(dst)
	return nil
}

// awaitAll waits until every peer's counter at field (ctlR or ctlD, with
// sleeper slot sleepIdx) has reached s.
func (a *Arena) awaitAll(c *opCtx, field, sleepIdx int, s uint64) error {
	for q := 0; q < a.size; q++ {
		if q == a.rank {
			continue
		}
		if _, err := a.await(c, q, a.ctl(q)+field, sleepIdx, s); err != nil {
			return err
		}
	}
	return nil
}

// finishDirect ends a single-copy operation at step s: this rank has read
// everything it needs (publish D), then it waits until every peer has too,
// since they may still be reading this rank's buffers.
func (a *Arena) finishDirect(c *opCtx, s uint64) error {
	a.pubD(s)
	a.step = s + 1
	return a.awaitAll(c, ctlD, sleepD, s)
}
