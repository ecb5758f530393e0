package libgodist

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
)

// Config describes one process group.
type Config struct {
	Rank, Size int
	Group      string        // the group's name (c10d group name)
	Timeout    time.Duration // default deadline of each operation
	// Tuning sets the sizes at which algorithms switch, in the engine and
	// in the offloads (backend.Setup carries it to them); nil takes
	// algo.Default(). Every rank of a group must pass the same values.
	Tuning *algo.Table
}

func (c Config) validate() error {
	if c.Size < 1 {
		return invalidf("group size %d must be at least 1", c.Size)
	}
	if c.Rank < 0 || c.Rank >= c.Size {
		return invalidf("rank %d is out of range for a group of %d", c.Rank, c.Size)
	}
	if c.Timeout <= 0 {
		return invalidf("timeout %v must be positive", c.Timeout)
	}
	return nil
}

// ProcessGroup runs the collectives of one group on one rank. Collectives
// are executed one at a time in issue order (c10d semantics: every rank
// issues the same collectives in the same order), see executor.go;
// point-to-point operations bypass the queue.
type ProcessGroup struct {
	cfg     Config
	tune    algo.Table
	tr      transport.Transport
	offload backend.Offload // carries the collectives when set (shared memory of co-located ranks)
	rdv     *rendezvous     // nil once connected or for in-memory groups
	hosts   [][]int         // the group's ranks by host (set at rendezvous)
	via     []string        // how each rank is reached (State.Via; set at rendezvous)
	spare   bool            // this host's ranks of the group fit its cores (set at rendezvous)
	// every host's ranks of the group fit its cores (set at rendezvous; the same on every rank)
	allSpare bool

	seq      atomic.Uint64 // last sequence number handed out
	entered  atomic.Uint64 // sequence number of the collective running or last run
	running  atomic.Pointer[task]
	lastDone atomic.Pointer[task] // the last collective that completed
	created  time.Time

	exec    executor
	ctx     context.Context // canceled by Close/Abort
	cancel  context.CancelCauseFunc
	ctlDone chan struct{}

	tracker transport.Tracker // tr's desync checks, if it has them

	mu          sync.Mutex
	desync      *transport.DesyncError // the first desync learned of; guarded by mu
	desyncShown bool                   // a collective failed with desync; guarded by mu
	broken      error                  // first fatal error; guarded by mu
	closed      bool                   // guarded by mu

	fwMu      sync.Mutex           // one farewell lookup at a time
	farewells map[int]farewellNote // peers' farewells read so far; guarded by fwMu

	flight flight // the last operations (flight.go)

	dev *devicePath // device memory (CUDA tensors); nil for groups made without backends

	closeOnce sync.Once
	queries   atomic.Uint64
	timeout   atomic.Int64   // default deadline set by SetTimeout, in ns; 0: cfg.Timeout
	telling   sync.WaitGroup // desync and give-up notices being sent (desync.go, agree.go)
	// abandoned is the first collective a peer gave up on (agree.go).
	abandoned atomic.Pointer[giveUp]

	fam *family       // the groups sharing these connections (split.go); guarded by mu
	sub *subTransport // a split child's transport; nil for a group with connections of its own
	// opening is a split child's offload being opened (split.go).
	opening atomic.Pointer[opening]
}

type task struct {
	w       *Work // &work for collectives: one allocation for both
	work    Work
	timeout time.Duration
	run     func(c *comm) error
	at      time.Time // submission of a deferrable op (executor.runQueued)
	started time.Time
	call    transport.Call // the op's fingerprint, in its context (transport.CallOf)
	detail  string         // the caller's description of its tensors (Opts.Detail)
	flight  flightRef      // its flight recorder entry
	ctx     opContext      // set up before the task is stored in pg.running
	comm    comm           // what the op's algorithm runs on (runTask)
	// progress is the query of the peers' progress started as the deadline
	// neared (progress.go), if one was.
	progress atomic.Pointer[progress]
}

// NewWithTransport builds a connected group over an existing transport
// (used for in-memory tests and for size-1 groups).
func NewWithTransport(cfg Config, tr transport.Transport) (*ProcessGroup, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if tr.Size() != cfg.Size || tr.Rank() != cfg.Rank {
		return nil, invalidf("transport is rank %d of %d, config says %d of %d", tr.Rank(), tr.Size(), cfg.Rank, cfg.Size)
	}
	pg := newPG(cfg)
	pg.start(tr)
	return pg, nil
}

func newPG(cfg Config) *ProcessGroup {
	ctx, cancel := context.WithCancelCause(context.Background())
	pg := &ProcessGroup{cfg: cfg, tune: algo.Default(), ctx: ctx, cancel: cancel, ctlDone: make(chan struct{}),
		created: time.Now()}
	if cfg.Tuning != nil {
		pg.tune = *cfg.Tuning
	}
	pg.exec.init(pg)
	pg.flight.init(pg.created)
	return pg
}

func (pg *ProcessGroup) start(tr transport.Transport) {
	pg.tr = tr
	if tk, ok := tr.(transport.Tracker); ok {
		pg.tracker = tk
		tk.SetOnDesync(func(de *transport.DesyncError) { pg.desynced(de, true) })
	}
	pg.listenDesync()
	pg.listenGiveUps()
	go pg.controlLoop()
}

// Rank, Size and Name describe the group.
func (pg *ProcessGroup) Rank() int    { return pg.cfg.Rank }
func (pg *ProcessGroup) Size() int    { return pg.cfg.Size }
func (pg *ProcessGroup) Name() string { return pg.cfg.Group }

// Seq is the sequence number of the last collective issued.
func (pg *ProcessGroup) Seq() uint64 { return pg.seq.Load() }

// Offload names the offload that carries the group's collectives ("shm"),
// or returns "" when the engine's own algorithms run them.
func (pg *ProcessGroup) Offload() string {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.offload == nil {
		return ""
	}
	return pg.offload.Name()
}

// Algorithms names the algorithms the group's collectives take: the
// offload's when it names them (backend.Described), else the engine's over
// the transport; "" for a group of one or one not yet connected.
func (pg *ProcessGroup) Algorithms() string {
	pg.mu.Lock()
	off, tr, spare := pg.offload, pg.tr, pg.spare
	pg.mu.Unlock()
	if d, ok := off.(backend.Described); ok {
		return d.Algorithms()
	}
	if off != nil || tr == nil || pg.cfg.Size < 2 {
		return ""
	}
	return pg.tune.DescribeEngine(pg.cfg.Size, spare)
}

// SetTimeout changes the default deadline of the operations submitted from
// now on (those already submitted keep theirs).
func (pg *ProcessGroup) SetTimeout(d time.Duration) error {
	if d <= 0 {
		return invalidf("timeout must be positive, got %v", d)
	}
	pg.timeout.Store(int64(d))
	return nil
}

// Timeout returns the default deadline of the group's operations.
func (pg *ProcessGroup) Timeout() time.Duration {
	if d := pg.timeout.Load(); d > 0 {
		return time.Duration(d)
	}
	return pg.cfg.Timeout
}

// Err returns the error that broke the group, if any.
func (pg *ProcessGroup) Err() error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.broken
}

func (pg *ProcessGroup) breakWith(err error) {
	pg.mu.Lock()
	if pg.broken == nil {
		pg.broken = err
	}
	pg.mu.Unlock()
}

// usable returns why the group cannot take new work, if it cannot.
func (pg *ProcessGroup) usable() error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.closed {
		return fmt.Errorf("godist: group %q: %w", pg.cfg.Group, ErrClosed)
	}
	if pg.tr == nil {
		return fmt.Errorf("godist: group %q: %w: not connected yet", pg.cfg.Group, ErrInvalid)
	}
	if pg.broken != nil {
		return fmt.Errorf("godist: group %q: %w: %v", pg.cfg.Group, ErrBroken, pg.broken)
	}
	return nil
}

// safeRun turns a panic inside an algorithm into an error, so one bad op
// cannot take the process down.
func safeRun(run func(*comm) error, c *comm) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error (panic): %v", r)
		}
	}()
	return run(c)
}

// opError wraps an algorithm's error with the op, sequence number, group
// and the peer at fault; on a timeout it asks the peers how far they got,
// to name the ranks that never joined. Transport failures break the group.
func (pg *ProcessGroup) opError(t *task, err error) error {
	if de := desyncOf(err); de != nil {
		pg.desynced(de, true) // found here (by the arena): the peers may not know
	}
	pg.mu.Lock()
	de := pg.desync
	pg.desyncShown = pg.desyncShown || de != nil
	pg.mu.Unlock()
	if de != nil {
		return pg.desyncOpError(t.w.Op, t.w.Seq, de, t.detail)
	}
	oe := &OpError{Op: t.w.Op, Seq: t.w.Seq, Group: pg.cfg.Group, Peer: -1, Err: err}
	if pe := rootPeerError(err); pe != nil {
		oe.Peer = pe.Peer
	}
	if errors.Is(err, ErrAbandoned) {
		// A peer gave up on it and told the others (agree.go); the error
		// says why.
		pg.breakWith(oe)
		return oe
	}
	var me *monitoredError
	if errors.As(err, &me) {
		oe.Missing = me.late
		return oe // a late rank is reported, the transport is fine
	}
	if errors.Is(err, ErrInvalid) || errors.Is(err, transport.ErrSizeMismatch) || errors.Is(err, ErrNotArrived) {
		return oe
	}
	if oe.Timeout() {
		oe.After = t.timeout
		var de *transport.DesyncError
		oe.Missing, oe.Silent, de = pg.progressOf(t)
		if de != nil {
			// Ranks that waited for each other in different collectives
			// (neither sent the other anything): say so, and tell them.
			pg.desynced(de, true)
			pg.mu.Lock()
			pg.desyncShown = true
			pg.mu.Unlock()
			return pg.desyncOpError(t.w.Op, t.w.Seq, de, t.detail)
		}
	} else if oe.Peer >= 0 && errors.Is(err, transport.ErrPeerGone) {
		// The peer sent its farewell before it left; through shared
		// memory it may still be on its way.
		if n, ok := pg.farewellOf(oe.Peer, farewellWait); ok {
			oe.PeerLeft = n.why
		}
	}
	pg.breakWith(oe)
	pg.tellGiveUp(t.w.Seq, oe)
	return oe
}

// rootPeerError is the innermost *transport.PeerError in err's chain: a
// receive from one rank that failed because the connection of another
// was lost (the mailbox fails all receives then) names the receive's rank
// outside and the lost one inside.
func rootPeerError(err error) *transport.PeerError {
	var pe *transport.PeerError
	if !errors.As(err, &pe) {
		return nil
	}
	for {
		var inner *transport.PeerError
		if !errors.As(pe.Err, &inner) {
			return pe
		}
		pe = inner
	}
}

// Close shuts the group down gracefully: queued work fails with ErrClosed,
// the transport says goodbye to every peer. Idempotent.
func (pg *ProcessGroup) Close() error {
	pg.shutdown(nil)
	return nil
}

// Abort shuts the group down at once, failing pending work with err.
func (pg *ProcessGroup) Abort(err error) {
	if err == nil {
		err = fmt.Errorf("godist: group %q: aborted", pg.cfg.Group)
	}
	pg.shutdown(err)
}

func (pg *ProcessGroup) shutdown(abortErr error) {
	pg.closeOnce.Do(func() {
		pg.mu.Lock()
		pg.closed = true
		tr, rdv, off := pg.tr, pg.rdv, pg.offload
		pg.mu.Unlock()
		pg.closeDevice(abortErr)
		if abortErr != nil && tr != nil {
			// A give-up or desync notice on its way goes out before the
			// abort: a child group's abort leaves the connections open, so
			// its peers learn of the failure from the notice alone.
			waitAtMost(&pg.telling, farewellWait)
			tr.Abort(abortErr)
		}
		if abortErr != nil && off != nil {
			off.Abort(abortErr)
		}
		if abortErr == nil && tr != nil {
			pg.telling.Wait() // a notice goes before the farewell
			pg.farewell()
		}
		pg.cancel(ErrClosed)
		if rdv != nil {
			rdv.close()
		}
		if tr != nil {
			pg.exec.waitIdle()
			<-pg.ctlDone
			var closeAll func()
			if abortErr == nil {
				closeAll = func() {
					if off != nil {
						_ = off.Close()
					}
					_ = tr.Close()
				}
			}
			pg.leaveFamily(closeAll)
		}
	})
}

// leaveFamily runs closeAll (the graceful close of the group's transport
// and offload; nil after an abort), except that a group whose connections
// serve groups split from it keeps them open until the last has closed.
func (pg *ProcessGroup) leaveFamily(closeAll func()) {
	pg.mu.Lock()
	f := pg.fam
	pg.mu.Unlock()
	if f == nil || pg.sub != nil {
		if closeAll != nil {
			closeAll()
		}
		if f != nil {
			f.release(nil)
		}
		return
	}
	f.release(closeAll)
}

// waitAtMost waits for wg, or for d to pass.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
