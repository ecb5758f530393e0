package libgodist

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// Progress queries let a rank whose collective timed out learn which ranks
// never started it. Every group runs controlLoop, which answers a query
// (an 8-byte query id on ControlTag(0)) with the sequence number of the
// collective it last started, sent back on ControlTag(query id). The
// answer comes from the transport's reader side, so it arrives even while
// the peer's executor is blocked in another collective.
//
// A rank that closes its group gracefully first sends every peer a
// farewell (its last sequence number and, if its group broke, why), so a
// peer whose own timeout fires after this rank has left still learns how
// far it got instead of naming it as a rank that never joined, and a peer
// whose op fails because this rank left is told the root cause.

// queryWait bounds how long a rank waits for answers to a progress query:
// the query starts that long before the op's deadline, or a tenth of the
// op's timeout if that is less (queryShare), so that a timeout raises at
// its deadline with the ranks at fault named.
var queryWait = time.Second

// refreshWait bounds the second query, at the deadline, of the ranks that
// answered the first but had not reached the op yet.
var refreshWait = 50 * time.Millisecond

// queryShare is how long before the deadline of an op with timeout d the
// query of the peers' progress starts.
func queryShare(d time.Duration) time.Duration { return min(queryWait, d/10) }

// progress is the outcome of a query of the peers' progress (missingRanks),
// started before the deadline of the op it is for (nearDeadline); done is
// closed once the fields are set.
type progress struct {
	done            chan struct{}
	missing, silent []int
	de              *transport.DesyncError
}

// nearDeadline starts the query of the peers' progress for t, which is
// still running share before its deadline, so that its answers are in
// when the deadline passes. It does not block.
func (pg *ProcessGroup) nearDeadline(t *task) {
	p := &progress{done: make(chan struct{})}
	t.progress.Store(p)
	wait := max(time.Until(t.ctx.deadline), refreshWait) // a late warning still waits a little
	go func() {
		defer close(p.done)
		p.missing, p.silent, p.de = pg.missingRanks(t.w.Seq, &t.call, wait)
	}()
}

// progressOf returns the progress of the peers for t, whose op timed out:
// the early query's answers, refreshed for the ranks that answered but
// had not started the op, or a query made now if none was started.
func (pg *ProcessGroup) progressOf(t *task) (missing, silent []int, de *transport.DesyncError) {
	if t.ctx.warned.CompareAndSwap(false, true) {
		return pg.missingRanks(t.w.Seq, &t.call, max(queryShare(t.timeout), refreshWait))
	}
	var p *progress
	for p = t.progress.Load(); p == nil; p = t.progress.Load() {
		runtime.Gosched() // the warner stores it right after it won warned
	}
	<-p.done
	if p.de != nil || len(p.missing) == len(p.silent) {
		return p.missing, p.silent, p.de
	}
	// Ranks that were behind may have joined since.
	return pg.missingRanks(t.w.Seq, &t.call, refreshWait)
}

// farewellWait bounds how long Close spends sending farewells.
var farewellWait = 200 * time.Millisecond

// farewellTag carries a leaving rank's farewell: its last sequence number
// (8 bytes, little endian), then why it left (the error that broke its
// group; empty for a plain close), NUL-padded to farewellSize. Query ids
// have a rank in bits 40 and up, so they never equal its id.
var farewellTag = transport.ControlTag(1)

const farewellSize = 512

// farewellNote is what a peer said as it left.
type farewellNote struct {
	seq uint64
	why string
}

// farewell tells every peer which collective this rank last started and,
// if its group broke, why.
func (pg *ProcessGroup) farewell() {
	var a [farewellSize]byte
	binary.LittleEndian.PutUint64(a[:8], pg.entered.Load())
	pg.mu.Lock()
	if pg.broken != nil {
		copy(a[8:], pg.broken.Error())
	}
	pg.mu.Unlock()
	ctx, cancel := context.WithTimeout(pg.ctx, farewellWait)
	defer cancel()
	for p := 0; p < pg.cfg.Size; p++ {
		if p != pg.cfg.Rank {
			_ = pg.tr.Send(ctx, p, farewellTag, a[:])
		}
	}
}

// farewellOf returns peer p's farewell, if it has arrived or arrives
// within wait.
func (pg *ProcessGroup) farewellOf(p int, wait time.Duration) (farewellNote, bool) {
	pg.fwMu.Lock()
	defer pg.fwMu.Unlock()
	if n, ok := pg.farewells[p]; ok {
		return n, true
	}
	var a [farewellSize]byte
	deadline := time.Now().Add(wait)
	for {
		r := pg.tr.PostRecv(p, farewellTag, a[:])
		if wait > 0 {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			_ = r.Wait(ctx)
			cancel()
		}
		r.Cancel(ErrClosed) // a farewell that arrived has matched already
		if r.Err() == nil {
			break
		}
		// A mailbox that failed (another peer's connection was lost)
		// refuses a receive at once, while the farewell may still be on
		// its way through shared memory: look again.
		if !time.Now().Before(deadline) {
			return farewellNote{}, false
		}
		time.Sleep(2 * time.Millisecond)
	}
	why := a[8:]
	if i := bytes.IndexByte(why, 0); i >= 0 {
		why = why[:i]
	}
	n := farewellNote{seq: binary.LittleEndian.Uint64(a[:8]), why: string(why)}
	if pg.farewells == nil {
		pg.farewells = map[int]farewellNote{}
	}
	pg.farewells[p] = n
	return n, true
}

// controlLoop answers peers' progress queries (missingRanks) until the
// group closes. It waits parked for the transports' own receivers to
// deliver a query and never reads a transport itself (Recv.Wait would): a
// waiter that helps sits in the shared-memory receiver's wait loop for as
// long as the group lives, waking every few milliseconds (measured: ~400
// wake-ups a second per idle process, 3.5% of a core).
func (pg *ProcessGroup) controlLoop() {
	defer close(pg.ctlDone)
	var q [8]byte
	for {
		r := pg.tr.PostRecv(transport.AnySource, transport.ControlTag(0), q[:])
		select {
		case <-r.Done():
		case <-pg.ctx.Done():
			r.Cancel(transport.ErrClosed)
		}
		if r.Err() != nil {
			return
		}
		pg.answer(r.Source(), binary.LittleEndian.Uint64(q[:]))
	}
}

// answerSize is the length of an answer to a progress query: the sequence
// number of the collective this rank last started, then that collective's
// stamp (zero if unknown), so that a rank whose collective timed out while
// a peer waited in another one at the same sequence number can say so.
const answerSize = 8 + transport.StampSize

// answer tells peer, which asked with query id, the sequence number of the
// collective this rank last started, and its stamp.
func (pg *ProcessGroup) answer(peer int, id uint64) {
	var a [answerSize]byte
	seq := pg.entered.Load()
	binary.LittleEndian.PutUint64(a[:], seq)
	for _, t := range [...]*task{pg.running.Load(), pg.lastDone.Load()} {
		if t != nil && t.call.Seq == seq {
			t.call.Stamp.Put(a[8:])
			break
		}
	}
	ctx, cancel := context.WithTimeout(pg.ctx, queryWait)
	_ = pg.tr.Send(ctx, peer, transport.ControlTag(id), a[:])
	cancel()
}

// missingRanks asks every peer which collective it last started and returns
// the ranks that have not reached seq, and of those the ones that did not
// answer (nor said farewell) within wait; and the first peer found
// running another collective than call at seq, if any.
func (pg *ProcessGroup) missingRanks(seq uint64, call *transport.Call, wait time.Duration) (missing, silent []int, de *transport.DesyncError) {
	n, me := pg.cfg.Size, pg.cfg.Rank
	id := uint64(me+1)<<24 | pg.queries.Add(1)&(1<<24-1) // above the fixed control tags; fits a child group's tags
	ctx, cancel := context.WithTimeout(pg.ctx, wait)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var q [8]byte
	binary.LittleEndian.PutUint64(q[:], id)
	answers := make([][answerSize]byte, n)
	rs := make([]*transport.Recv, n)
	for p := 0; p < n; p++ {
		if p == me {
			continue
		}
		rs[p] = pg.tr.PostRecv(p, transport.ControlTag(id), answers[p][:])
		if err := pg.tr.Send(ctx, p, transport.ControlTag(0), q[:]); err != nil {
			rs[p].Cancel(err)
		}
	}
	for p := 0; p < n; p++ {
		if p == me {
			continue
		}
		var at uint64
		err := rs[p].Wait(ctx)
		// A peer that left sent its farewell first, which may still be
		// on its way (shared memory); one that does not answer is not
		// waited for again.
		fw := time.Duration(0)
		if errors.Is(err, transport.ErrPeerGone) {
			fw = min(farewellWait, max(0, time.Until(deadline)))
		}
		if err == nil {
			at = binary.LittleEndian.Uint64(answers[p][:])
			st := transport.ParseStamp(answers[p][8:])
			if call != nil && de == nil && at == seq && st.Op != transport.OpNone {
				mine := call.To(p)
				mine.Send, mine.Recv = 0, 0 // the answer's stamp has no pair
				if !st.Matches(mine) {
					de = &transport.DesyncError{Rank: me, Peer: p, Mine: mine, Theirs: st}
				}
			}
		} else if n, ok := pg.farewellOf(p, fw); ok {
			at = n.seq
		} else {
			silent = append(silent, p)
		}
		if at < seq {
			missing = append(missing, p)
		}
	}
	return missing, silent, de
}
