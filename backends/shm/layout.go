package shm

import (
	"sync/atomic"
	"unsafe"
)

// The arena's layout; doc.go has the picture. All offsets are bytes from
// the start of the file. Every word that more than one rank reads is
// written by exactly one rank (its owner) unless noted, and every owner's
// words sit on cache lines of their own.
const (
	lineSize = 64
	pageSize = 4096

	// InlineSize is the largest per-rank payload that travels inside a step
	// block, right behind its sequence word, instead of in the rank's data
	// slot.
	InlineSize = 256
	blockSize  = lineSize + InlineSize

	// Header (page 0).
	hdrMagic   = 0   // u64, stored last by the creator: the arena is ready
	hdrVersion = 8   // u32
	hdrSize    = 12  // u32 local ranks
	hdrChunk   = 16  // u64
	hdrOneShot = 24  // i64
	hdrRing    = 32  // u64
	hdrTotal   = 40  // u64 file length
	hdrDirect  = 48  // i64 single-copy threshold (-1: never)
	hdrJoined  = 64  // u32 ranks that mapped the file (multi-writer, own line)
	hdrProbed  = 128 // u32 ranks that published ctlDirect (multi-writer, own line)

	// Per-rank control area, ctlStride bytes at ctl(r).
	ctlState = 0  // u32 rank state (stateFree...)
	ctlCause = 4  // i32 local rank whose loss failed this rank, -1 if none
	ctlPID   = 8  // i64 process id
	ctlPIDNS = 16 // u64 inode of the pid namespace
	// ctlCauseKind says how ctlCause was lost: causeGone or causeLost.
	ctlCauseKind = 24
	// ctlProbe is the address (u64) of a word in this rank's process that
	// peers read to learn whether they can read its memory; ctlDirect
	// (u32) is this rank's verdict on all its peers (direct.go).
	ctlProbe  = 32
	ctlDirect = 40
	// ctlCPU (u32) is the CPU this rank's waiting thread last ran on, +1
	// (0: unknown): see spread.go.
	ctlCPU = 48
	ctlD   = 64  // u64 D: last step whose data this rank has consumed
	ctlR   = 128 // u64 R: last step whose reduced share this rank has published
	// ctlSleep holds the sleeper counts for this rank's words (written by
	// the waiters, read by the owner after each publish): u32 each.
	ctlSleep = 192
	// ctlBlock is two step blocks (parity 0 and 1) of blockSize bytes:
	// u64 seq, u32 kind, u32 arg, u64 n, padding to 64, InlineSize bytes.
	ctlBlock = 256
	// ctlBell is this rank's point-to-point doorbell: u32 counter bumped by
	// senders (multi-writer) and, at +4, u32 count of this rank's
	// goroutines sleeping on it (waiters in Progress, readers of a
	// streamed message). The receiver goroutine sleeps on its own word
	// when idle (ctlIdle, or its doorbell socket: the flag at ctlIdle+4
	// says which, see p2p_door.go), which
	// senders wake only while no waiter is present (ctlWaiters: how many
	// goroutines of this rank are in Progress).
	ctlBell    = ctlBlock + 2*blockSize // 896
	ctlIdle    = ctlBell + 8
	ctlWaiters = ctlBell + 16
	// ctlDoorOff: u32, non-zero once a peer could not ring this rank's
	// doorbell socket (p2p_door.go): its idle receiver sleeps on ctlIdle.
	ctlDoorOff = ctlBell + 20
	// ctlCall is the collective this rank runs and the one before
	// (desync.go): a u64 version, odd while the owner rewrites them, then
	// two transport.Stamp encodings; on lines of their own, rewritten once
	// per collective and read by peers only while they wait.
	ctlCall   = 1024
	ctlStride = 1152

	// Step block fields: then the fingerprint of the collective that
	// published it (desync.go): u32 op | dtype<<8 | reduce op<<16, i32
	// root, u32 detail, u64 count, u64 seq; and a hash of the collective
	// before it (u64, 0 if none).
	bSeq      = 0
	bKind     = 8
	bArg      = 12
	bN        = 16
	bStOp     = 24
	bStRoot   = 28
	bStDetail = 32
	bStCount  = 40
	bStSeq    = 48
	bStPrev   = 56
	bInline   = lineSize

	// Sleeper slots in ctlSleep.
	sleepBlk0 = 0 // block of parity 0 (parity 1 is sleepBlk0+1)
	sleepD    = 2
	sleepR    = 3

	// Point-to-point channel, one per ordered pair (src, dst).
	chHead      = 0   // u64 bytes written (owner: src)
	chTail      = 64  // u64 bytes consumed (owner: dst)
	chBroken    = 128 // u32 set by either side when a message was cut
	chSendSleep = 132 // u32 set while the sender waits for space
	chRefused   = 136 // u32 set by dst when it cannot read src's memory (single copy)
	chJobClaim  = 144 // u64 shared single-copy job (p2p_share.go): gen<<32 | pieces<<16 | next piece
	chJobDst    = 152 // u64 address of the job's destination in dst's process
	chJobOff    = 160 // u64 offset of the job in the message
	chJobLen    = 168 // u64 bytes in the job
	chJobDone   = 176 // u32 pieces src has copied
	chJobRedo   = 180 // u32 1 + a piece src failed to copy (it then stops helping)
	chRing      = 192

	// msgHdr is the size of a message header in a ring: u64 tag, u64 n.
	msgHdr = 16
	// stampFlag in a header's length says that the sender's
	// transport.Stamp (transport.StampSize bytes) follows the header.
	stampFlag = uint64(1) << 62
	// cmaDesc follows a header whose length has cmaFlag set: u64 address of
	// the data in the sender's process, u64 reserved.
	cmaDesc = 16
	cmaFlag = uint64(1) << 63

	magic   uint64 = 0x314d48535453444f // "ODSTSHM1", little-endian
	version        = 4
)

// Rank states.
const (
	stateFree    = 0 // slot not claimed yet
	stateJoining = 1 // claimed, pid being written
	stateActive  = 2
	stateClosed  = 3 // closed gracefully: ErrPeerGone
	stateFailed  = 4 // aborted or failed: ErrConnLost
)

// Kinds of loss recorded in ctlCauseKind.
const (
	causeLost = 1
	causeGone = 2
)

// layout holds the derived offsets of one arena.
type layout struct {
	params
	ctlBase, dataBase, chanBase, chanStride, total int
}

func newLayout(p params) layout {
	l := layout{params: p}
	l.ctlBase = pageSize
	l.dataBase = alignUp(l.ctlBase+p.size*ctlStride, pageSize)
	l.chanBase = alignUp(l.dataBase+2*p.size*p.chunk, pageSize)
	l.chanStride = chRing + p.ring
	l.total = alignUp(l.chanBase+p.size*p.size*l.chanStride, pageSize)
	return l
}

func (l *layout) ctl(r int) int { return l.ctlBase + r*ctlStride }

// blk is the step block of rank r used by step s.
func (l *layout) blk(r int, s uint64) int { return l.ctl(r) + ctlBlock + int(s&1)*blockSize }

// buf is the data slot half of rank r used by step s.
func (l *layout) buf(r int, s uint64) int { return l.dataBase + (2*r+int(s&1))*l.chunk }

// ch is the channel carrying messages from src to dst.
func (l *layout) ch(src, dst int) int { return l.chanBase + (src*l.size+dst)*l.chanStride }

// lowHalf is the offset of the low 32 bits within a 64-bit word: futexes
// wait on 32-bit words, and a counter's low half changes on every store.
var lowHalf = func() int {
	x := uint64(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return 0
	}
	return 4
}()

// Accessors for the mapped memory. Offsets are trusted (computed from the
// layout); the memory stays mapped while an operation holds a.life.

func (a *Arena) ptr(off int) unsafe.Pointer       { return unsafe.Add(a.base, off) }
func (a *Arena) u64(off int) *atomic.Uint64       { return (*atomic.Uint64)(a.ptr(off)) }
func (a *Arena) u32(off int) *atomic.Uint32       { return (*atomic.Uint32)(a.ptr(off)) }
func (a *Arena) low(off int) *uint32              { return (*uint32)(a.ptr(off + lowHalf)) }
func (a *Arena) bytes(off, n int) []byte          { return a.mem[off : off+n : off+n] }
func (a *Arena) sleepers(r, i int) *atomic.Uint32 { return a.u32(a.lay.ctl(r) + ctlSleep + 4*i) }

// area is where rank r's payload of n bytes for step s lives: the inline
// part of its step block when inline, else its data slot.
func (a *Arena) area(r int, s uint64, n int, inline bool) []byte {
	if inline {
		return a.bytes(a.lay.blk(r, s)+bInline, n)
	}
	return a.bytes(a.lay.buf(r, s), n)
}
