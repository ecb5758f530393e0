package shm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/transport"
)

// Arena is one rank's mapping of a group's shared-memory arena. Collectives
// (AllReduce, Broadcast, AllGather, ReduceScatter, AllToAll, Barrier) must
// be called one at a time and in the same order on every local rank; they
// are serialized internally, so concurrent calls are memory-safe but
// desynchronize the group. Send may be called concurrently with anything.
// Close and Abort may be called at any time from any goroutine.
type Arena struct {
	path       string
	rank, size int
	global     []int
	lay        layout
	pol        WaitPolicy
	p2pPol     WaitPolicy // pol for point-to-point waits (see p2pPolicy)

	mem  []byte         // the mapping; valid while a.life is held and !a.closed
	base unsafe.Pointer // &mem[0]

	// life is held shared by every operation that touches mem and
	// exclusively by Close to unmap it.
	life      sync.RWMutex
	closed    bool // guarded by life
	closing   atomic.Bool
	closeOnce sync.Once

	opMu    sync.Mutex // serializes collectives
	step    uint64     // the next step number; guarded by opMu
	seenD   []uint64   // last D value seen per rank; guarded by opMu
	broken  error      // first fatal error of a collective; guarded by opMu
	scratch []bool     // reused by AllToAll; guarded by opMu
	// opCall is the running collective's fingerprint, from its context
	// (desync.go); guarded by opMu.
	opCall *transport.Call
	opPrev uint64 // the hash of the collective before opCall; guarded by opMu
	opName string // the running collective's name; guarded by opMu
	// poison is why a peer gave up on a collective whose words this rank
	// published, and poisonFails whether it was this one (agree.go);
	// guarded by opMu.
	poison      error
	poisonFails bool
	calls       callState // the collectives this rank runs (SetCall)
	// dacc and dtmp are the scratch of single-copy reductions; guarded by
	// opMu.
	dacc, dtmp []byte

	procs []proc // peers' processes; fixed after Open
	// direct: every local rank can read every other's memory, so large
	// collectives copy straight out of it (direct.go). Fixed after Open.
	direct bool
	// sameProc is the number of local ranks in this process (more than one
	// in tests and benchmarks, where waiters may have to yield to the Go
	// scheduler too). Fixed after Open.
	sameProc int

	p2p p2pState
	spr spreadState

	// table chooses the algorithms beyond the layout's limits
	// (libgodist/algo); fixed at Open.
	table algo.Table
}

// proc is what a rank knows about a peer's process.
type proc struct {
	pid   int
	pidfd int  // -1 when unavailable
	check bool // whether the process can be checked (same pid namespace, other process)
}

// Open maps the arena named cfg.Name for local rank cfg.Rank, creating the
// file (see Mode) if this rank is to. It returns once every local rank has
// mapped the arena; the file is then already unlinked, so nothing is left
// in /dev/shm however the ranks end. If ctx ends first, Open unlinks the
// file and returns a *transport.PeerError naming a rank that did not join
// (wrapping transport.ErrTimeout), or another error: ErrInvalid for a bad
// Config, ErrConfig when the arena's layout disagrees with cfg, fs.ErrExist
// (in ModeCreate) when the file already exists.
func Open(ctx context.Context, cfg Config) (*Arena, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.Dir, cfg.Name)
	var (
		mem []byte
		p   params
		err error
	)
	switch cfg.Mode {
	case ModeCreate:
		mem, p, err = create(path, &cfg)
	case ModeJoin:
		mem, p, err = join(ctx, path, &cfg)
	default:
		mem, p, err = create(path, &cfg)
		if errors.Is(err, fs.ErrExist) {
			mem, p, err = join(ctx, path, &cfg)
		}
	}
	if err != nil {
		return nil, err
	}
	return attach(ctx, cfg, path, mem, p)
}

// Created is an arena file made by Create, not yet joined by the other
// local ranks.
type Created struct {
	cfg  Config
	path string
	mem  []byte
	p    params
}

// Create does the part of Open (ModeCreate) that needs no other rank: it
// creates, sizes and initializes the arena file, so that a directory
// without room for it fails here, at once, before any rank waits for the
// file. Created.Open then waits for the local ranks as Open does;
// Created.Discard removes the file instead.
func Create(cfg Config) (*Created, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	if cfg.Mode != ModeCreate {
		return nil, invalidf("Create needs ModeCreate")
	}
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.Dir, cfg.Name)
	mem, p, err := create(path, &cfg)
	if err != nil {
		return nil, err
	}
	return &Created{cfg: cfg, path: path, mem: mem, p: p}, nil
}

// Open waits for every local rank to map the arena, as Open does. It may
// be called once.
func (c *Created) Open(ctx context.Context) (*Arena, error) {
	mem := c.mem
	c.mem = nil
	if mem == nil {
		return nil, invalidf("arena %s was already opened or discarded", c.path)
	}
	return attach(ctx, c.cfg, c.path, mem, c.p)
}

// fits reports whether the arena was created with cfg's layout limits, so
// that a rank configured with cfg could open it as its creator.
func (c *Created) fits(cfg Config) bool {
	return cfg.normalize() == nil && cfg.params() == c.p
}

// Discard removes and unmaps an arena that will not be opened.
func (c *Created) Discard() {
	if c.mem != nil {
		_ = unlink(c.path)
		_ = unmap(c.mem)
		c.mem = nil
	}
}

// attach makes the Arena of a mapped arena file and joins it (Open's
// second half).
func attach(ctx context.Context, cfg Config, path string, mem []byte, p params) (*Arena, error) {
	a := &Arena{path: path, rank: cfg.Rank, size: cfg.Size, global: cfg.GlobalRanks,
		lay: newLayout(p), mem: mem, base: unsafe.Pointer(unsafe.SliceData(mem)),
		step: 1, seenD: make([]uint64, cfg.Size), table: algo.Default()}
	if cfg.Table != nil {
		a.table = *cfg.Table
	}
	if a.global == nil {
		a.global = make([]int, a.size)
		for i := range a.global {
			a.global[i] = i
		}
	}
	if cfg.Wait != nil {
		a.pol = *cfg.Wait
	} else {
		a.pol = DefaultWaitPolicy(a.size)
	}
	a.p2pPol = p2pPolicy(a.pol)
	if err := a.join(ctx); err != nil {
		_ = unmap(mem)
		return nil, err
	}
	a.p2p.init(a.size)
	a.p2p.share.Store(a.size <= runtime.NumCPU())
	a.p2p.door.base = doorBase(a.path)
	a.spr.on = a.pol.Spread && a.sameProc <= 1
	return a, nil
}

// create creates and initializes the arena file.
func create(path string, cfg *Config) ([]byte, params, error) {
	p := cfg.params()
	lay := newLayout(p)
	mem, err := createFile(path, lay.total, cfg.markFailure)
	if err != nil {
		return nil, p, err
	}
	h := unsafe.Pointer(unsafe.SliceData(mem))
	*(*uint32)(unsafe.Add(h, hdrVersion)) = version
	*(*uint32)(unsafe.Add(h, hdrSize)) = uint32(p.size)
	*(*uint64)(unsafe.Add(h, hdrChunk)) = uint64(p.chunk)
	*(*int64)(unsafe.Add(h, hdrOneShot)) = int64(p.oneShot)
	*(*int64)(unsafe.Add(h, hdrDirect)) = int64(p.direct)
	*(*uint64)(unsafe.Add(h, hdrRing)) = uint64(p.ring)
	*(*uint64)(unsafe.Add(h, hdrTotal)) = uint64(lay.total)
	for r := 0; r < p.size; r++ {
		*(*int32)(unsafe.Add(h, lay.ctl(r)+ctlCause)) = -1
	}
	(*atomic.Uint64)(unsafe.Add(h, hdrMagic)).Store(magic)
	return mem, p, nil
}

// join waits for the arena file to exist and be initialized, checks its
// layout against cfg and maps it.
func join(ctx context.Context, path string, cfg *Config) ([]byte, params, error) {
	var p params
	backoff := 20 * time.Microsecond
	sleep := func(what string) error {
		t := time.NewTimer(backoff)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("shm: open %s: %w: %s", path, ctxErr(ctx), what)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Millisecond)
		return nil
	}
	var fd int
	for {
		var err error
		fd, err = openFile(path)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, p, err
		}
		if err := sleep("the arena file was not created"); err != nil {
			return nil, p, err
		}
	}
	defer closeFD(fd)
	for {
		n, err := fileSize(fd)
		if err != nil {
			return nil, p, &os.PathError{Op: "stat", Path: path, Err: err}
		}
		if n >= pageSize {
			break
		}
		if n == failedSize {
			return nil, p, fmt.Errorf("shm: open %s: %w", path, errCreatorFailed)
		}
		if err := sleep("the arena file was not sized"); err != nil {
			return nil, p, err
		}
	}
	hdr, err := mapFD(fd, pageSize)
	if err != nil {
		return nil, p, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	h := unsafe.Pointer(unsafe.SliceData(hdr))
	for (*atomic.Uint64)(unsafe.Add(h, hdrMagic)).Load() != magic {
		if err := sleep("the arena was not initialized"); err != nil {
			_ = unmap(hdr)
			return nil, p, err
		}
	}
	ver := *(*uint32)(unsafe.Add(h, hdrVersion))
	p = params{size: int(*(*uint32)(unsafe.Add(h, hdrSize))), chunk: int(*(*uint64)(unsafe.Add(h, hdrChunk))),
		oneShot: int(*(*int64)(unsafe.Add(h, hdrOneShot))), ring: int(*(*uint64)(unsafe.Add(h, hdrRing))),
		direct: int(*(*int64)(unsafe.Add(h, hdrDirect)))}
	total := int(*(*uint64)(unsafe.Add(h, hdrTotal)))
	_ = unmap(hdr)
	if ver != version {
		return nil, p, fmt.Errorf("%w: %s has layout version %d, this library speaks %d", ErrConfig, path, ver, version)
	}
	if err := cfg.adopt(p); err != nil {
		return nil, p, err
	}
	if p.size < 1 || p.size > maxSize || p.chunk < MinChunkSize(p.size) || p.chunk%64 != 0 || p.ring < 256 || p.ring%64 != 0 ||
		p.oneShot > p.chunk || newLayout(p).total != total {
		return nil, p, fmt.Errorf("%w: %s has an inconsistent header", ErrConfig, path)
	}
	if n, err := fileSize(fd); err != nil || n != int64(total) {
		return nil, p, fmt.Errorf("%w: %s is %d bytes, its header says %d", ErrConfig, path, n, total)
	}
	mem, err := mapFD(fd, total)
	if err != nil {
		return nil, p, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	return mem, p, nil
}

// join claims this rank's slot, publishes its process, unlinks the file
// once every rank has mapped it, and waits for all ranks.
func (a *Arena) join(ctx context.Context) error {
	c := a.ctl(a.rank)
	if !a.u32(c+ctlState).CompareAndSwap(stateFree, stateJoining) {
		return fmt.Errorf("%w: local rank %d of %s is already taken", ErrConfig, a.rank, a.path)
	}
	*(*int64)(a.ptr(c + ctlPID)) = int64(os.Getpid())
	*(*uint64)(a.ptr(c + ctlPIDNS)) = pidNamespace()
	a.publishProbe()
	a.u32(c + ctlState).Store(stateActive)
	joined := a.u32(hdrJoined)
	if joined.Add(1) == uint32(a.size) {
		_ = unlink(a.path) // every rank has it mapped: nothing can leak now
	}
	futexWake((*uint32)(a.ptr(hdrJoined)))
	if !a.awaitCount(ctx, hdrJoined) {
		missing := -1
		var list []int
		for r := 0; r < a.size; r++ {
			if a.u32(a.ctl(r)+ctlState).Load() < stateActive {
				list = append(list, r)
				if missing < 0 {
					missing = r
				}
			}
		}
		a.u32(c + ctlState).Store(stateClosed)
		_ = unlink(a.path)
		return &transport.PeerError{Op: "open", Peer: a.globalRank(missing),
			Err: fmt.Errorf("%w: local rank(s) %v did not map %s", ctxErr(ctx), list, a.path)}
	}
	a.procs = make([]proc, a.size)
	me, myNS := os.Getpid(), pidNamespace()
	for r := range a.procs {
		pid := int(*(*int64)(a.ptr(a.ctl(r) + ctlPID)))
		ns := *(*uint64)(a.ptr(a.ctl(r) + ctlPIDNS))
		pr := proc{pid: pid, pidfd: -1}
		if pid == me && ns == myNS {
			a.sameProc++
		}
		if r != a.rank && pid != me && pid > 0 && ns != 0 && ns == myNS {
			pr.check = true
			pr.pidfd = openPidfd(pid)
		}
		a.procs[r] = pr
	}
	return a.probeDirect(ctx)
}

// awaitCount waits until the multi-writer header counter at off reaches
// the number of local ranks; it reports false if ctx ended first.
func (a *Arena) awaitCount(ctx context.Context, off int) bool {
	n := a.u32(off)
	for {
		v := n.Load()
		if v >= uint32(a.size) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		d := 5 * time.Millisecond
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, time.Until(dl)+time.Microsecond)
		}
		futexWait((*uint32)(a.ptr(off)), v, d)
	}
}

// countFailed marks a header counter that a rank gave up waiting on.
const countFailed = 1 << 31

// awaitCountAlike is awaitCount for the last count of the arena's setup, which
// every rank must see end alike: a rank whose ctx ends first marks the
// counter failed (if it has not reached the number of local ranks by
// then), and every rank then reports false. So either every rank sees
// the count complete, or none does, and the ranks need no further
// agreement on whether the arena opened.
func (a *Arena) awaitCountAlike(ctx context.Context, off int) bool {
	n := a.u32(off)
	for {
		v := n.Load()
		switch {
		case v&countFailed != 0:
			return false
		case v >= uint32(a.size):
			return true
		case ctx.Err() != nil:
			if n.CompareAndSwap(v, v|countFailed) {
				futexWake((*uint32)(a.ptr(off)))
				return false
			}
			continue // it moved on: look again
		}
		d := 5 * time.Millisecond
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, time.Until(dl)+time.Microsecond)
		}
		futexWait((*uint32)(a.ptr(off)), v, d)
	}
}

func (a *Arena) ctl(r int) int { return a.lay.ctl(r) }

func (a *Arena) globalRank(r int) int {
	if r < 0 || r >= len(a.global) {
		return transport.AnySource
	}
	return a.global[r]
}

// Rank is this rank's local rank; Size the number of local ranks.
func (a *Arena) Rank() int { return a.rank }

// Size is the number of local ranks.
func (a *Arena) Size() int { return a.size }

// GlobalRank maps a local rank to its group rank (Config.GlobalRanks).
func (a *Arena) GlobalRank(local int) int { return a.globalRank(local) }

// LocalRank maps a group rank to its local rank, if it is in this arena.
func (a *Arena) LocalRank(global int) (int, bool) {
	for i, g := range a.global {
		if g == global {
			return i, true
		}
	}
	return -1, false
}

// ChunkSize is the arena's chunk size in bytes.
func (a *Arena) ChunkSize() int { return a.lay.chunk }

// OneShotMax is the largest all-reduce done one-shot, -1 if none.
func (a *Arena) OneShotMax() int { return a.lay.oneShot }

// DirectMin returns the smallest AllToAll block moved by single copy when
// the ranks can read each other's memory (-1: never; see Direct).
func (a *Arena) DirectMin() int { return a.lay.direct }

// Path is the arena file's path (already unlinked once Open returns).
func (a *Arena) Path() string { return a.path }

// Close leaves the arena gracefully: peers waiting for this rank fail with
// transport.ErrPeerGone, this rank's own pending operations with
// transport.ErrClosed. It stops the point-to-point receiver, waits for
// in-flight operations to return and unmaps the memory. Idempotent.
func (a *Arena) Close() error {
	a.shutdown(stateClosed)
	return nil
}

// Abort leaves the arena at once: peers waiting for this rank fail with
// transport.ErrConnLost, as if the process had died (err is the caller's
// to report; peers only learn that this rank is gone). Pending operations
// on this rank fail with transport.ErrClosed. Idempotent with Close (the
// first call decides).
func (a *Arena) Abort(err error) {
	a.shutdown(stateFailed)
}

func (a *Arena) shutdown(state uint32) {
	a.closeOnce.Do(func() {
		a.closing.Store(true)
		a.life.RLock()
		st := a.u32(a.ctl(a.rank) + ctlState)
		if state == stateFailed {
			st.Store(stateFailed)
		} else {
			st.CompareAndSwap(stateActive, state) // a failed rank stays failed
		}
		a.wakeAll()
		a.life.RUnlock()
		a.p2p.stop()
		a.life.Lock()
		a.closeDoor() // no operation (ringDoor) runs now
		a.closed = true
		_ = unmap(a.mem)
		a.mem, a.base = nil, nil
		for _, p := range a.procs {
			if p.pidfd >= 0 {
				closeFD(p.pidfd)
			}
		}
		a.life.Unlock()
	})
}

// wakeAll wakes every sleeper on every word of the arena a waiter can
// sleep on: this rank's own goroutines (which then see a.closing) and the
// peers' (which then see this rank's state).
func (a *Arena) wakeAll() {
	for r := 0; r < a.size; r++ {
		c := a.ctl(r)
		futexWake(a.low(c + ctlBlock + bSeq))
		futexWake(a.low(c + ctlBlock + blockSize + bSeq))
		futexWake(a.low(c + ctlD))
		futexWake(a.low(c + ctlR))
		a.u32(c + ctlBell).Add(1) // a receiver about to sleep sees the change
		futexWake((*uint32)(a.ptr(c + ctlBell)))
		a.wakeIdleOf(r)
		if r != a.rank {
			futexWake(a.low(a.lay.ch(a.rank, r) + chTail))
		}
	}
}

// enter starts an operation: it holds a.life shared until exit.
func (a *Arena) enter(op string) error {
	a.life.RLock()
	if a.closed || a.closing.Load() {
		a.life.RUnlock()
		return errClosed(op)
	}
	return nil
}

func (a *Arena) exit() { a.life.RUnlock() }

// peerErr reports why local rank q can no longer take part, if it cannot:
// it closed (ErrPeerGone), aborted or failed (ErrConnLost), or, when
// checkProc, its process has exited (ErrConnLost).
func (a *Arena) peerErr(op string, q int, checkProc bool) error {
	c := a.ctl(q)
	switch a.u32(c + ctlState).Load() {
	case stateClosed:
		return &transport.PeerError{Op: op, Peer: a.globalRank(q),
			Err: fmt.Errorf("%w: local rank %d closed the arena", transport.ErrPeerGone, q)}
	case stateFailed:
		cause := int(*(*int32)(a.ptr(c + ctlCause)))
		if cause >= 0 && cause < a.size && cause != q && cause != a.rank {
			why := transport.ErrConnLost
			if *(*uint32)(a.ptr(c + ctlCauseKind)) == causeGone {
				why = transport.ErrPeerGone
			}
			return &transport.PeerError{Op: op, Peer: a.globalRank(cause),
				Err: fmt.Errorf("%w: local rank %d failed because local rank %d is gone", why, q, cause)}
		}
		return &transport.PeerError{Op: op, Peer: a.globalRank(q),
			Err: fmt.Errorf("%w: local rank %d aborted", transport.ErrConnLost, q)}
	}
	if checkProc && a.procs[q].check && exited(a.procs[q].pid, a.procs[q].pidfd) {
		return &transport.PeerError{Op: op, Peer: a.globalRank(q),
			Err: fmt.Errorf("%w: process %d of local rank %d exited", transport.ErrConnLost, a.procs[q].pid, q)}
	}
	return nil
}

// markFailed records that this rank failed because local rank cause is
// gone (closed: kind causeGone; died or aborted: causeLost), so that peers
// waiting for this rank fail at once and name cause.
func (a *Arena) markFailed(cause int, kind uint32) {
	c := a.ctl(a.rank)
	st := a.u32(c + ctlState)
	if st.Load() != stateActive {
		return
	}
	*(*int32)(a.ptr(c + ctlCause)) = int32(cause)
	*(*uint32)(a.ptr(c + ctlCauseKind)) = kind
	if st.CompareAndSwap(stateActive, stateFailed) {
		a.wakeAll()
	}
}

// pid returns the process id recorded for local rank r (for tests).
func (a *Arena) pid(r int) int { return a.procs[r].pid }
