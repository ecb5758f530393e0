package libgodist

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// Progress queries let a rank whose collective timed out learn which ranks
// never started it. Every group runs controlLoop, which answers a query
// (an 8-byte query id on ControlTag(0)) with the sequence number of the
// collective it last started, sent back on ControlTag(query id). The
// answer comes from the transport's reader side, so it arrives even while
// the peer's executor is blocked in another collective.

// queryWait bounds how long a timed-out rank waits for answers.
var queryWait = time.Second

func (pg *ProcessGroup) controlLoop() {
	defer close(pg.ctlDone)
	var q [8]byte
	for {
		r := pg.tr.PostRecv(transport.AnySource, transport.ControlTag(0), q[:])
		if err := r.Wait(pg.ctx); err != nil {
			return
		}
		id := binary.LittleEndian.Uint64(q[:])
		var a [8]byte
		binary.LittleEndian.PutUint64(a[:], pg.entered.Load())
		ctx, cancel := context.WithTimeout(pg.ctx, queryWait)
		_ = pg.tr.Send(ctx, r.Source(), transport.ControlTag(id), a[:])
		cancel()
	}
}

// missingRanks asks every peer which collective it last started and returns
// the ranks that have not reached seq (including those that do not answer).
func (pg *ProcessGroup) missingRanks(seq uint64) []int {
	n, me := pg.cfg.Size, pg.cfg.Rank
	id := uint64(me+1)<<40 | pg.queries.Add(1)
	ctx, cancel := context.WithTimeout(pg.ctx, queryWait)
	defer cancel()
	var q [8]byte
	binary.LittleEndian.PutUint64(q[:], id)
	answers := make([][8]byte, n)
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
	var missing []int
	for p := 0; p < n; p++ {
		if p == me {
			continue
		}
		if rs[p].Wait(ctx) != nil || binary.LittleEndian.Uint64(answers[p][:]) < seq {
			missing = append(missing, p)
		}
	}
	return missing
}
