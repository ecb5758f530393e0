package libgodist

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
)

// The flight recorder: the group's last operations, kept on every rank so
// that after a hang or a failure the ranks' records show which rank issued
// what, and which ops started and finished. python/godist/_flight.py
// writes them in the format of torch's flight recorder, which torchfrtrace
// reads. Recording an op costs one short critical section and two clock
// readings; nothing is allocated once the ring has grown to its size.

// DefaultFlightEntries is how many ops a group keeps unless told otherwise
// (torch's flight recorder keeps as many by default).
const DefaultFlightEntries = 2000

// FlightEntry is one recorded operation.
type FlightEntry struct {
	ID        uint64 `json:"id"`      // this group's record number, from 0
	Seq       uint64 `json:"seq"`     // the collective's sequence number; 0 for send and recv
	P2PSeq    uint64 `json:"p2p_seq"` // the send's or receive's number in the group, from 1; 0 for collectives
	Op        string `json:"op"`
	Peer      int    `json:"peer"`      // send: the destination; recv: the source (-1: any); -1 for collectives
	DType     int    `json:"dtype"`     // libgodist/reduce's numbering; -1: bytes or none
	In        uint64 `json:"in"`        // elements this rank contributes
	Out       uint64 `json:"out"`       // elements this rank receives
	Created   int64  `json:"created"`   // ns since the epoch
	Started   int64  `json:"started"`   // 0: not started
	Completed int64  `json:"completed"` // 0: not completed
	TimeoutMs int64  `json:"timeout_ms"`
	Error     string `json:"error,omitempty"`
	// Device marks an op on device memory (DeviceRun). Those are numbered
	// apart from the ops on host memory: Seq and P2PSeq count the
	// device's collectives and sends and receives.
	Device bool `json:"device,omitempty"`
}

// flightChunk is how many slots the ring grows by.
const flightChunk = 64

// flightSlot holds one entry. The task that owns the entry sets its times
// without the lock (flightRef); the rest is written under flight.mu.
type flightSlot struct {
	key       atomic.Uint64 // the entry's ID plus one; 0: empty
	started   atomic.Int64
	completed atomic.Int64
	e         FlightEntry
}

// flightRef is an op's entry: its slot, if the slot still holds it.
type flightRef struct {
	s   *flightSlot
	key uint64
}

// flight is a group's ring of entries, grown a chunk at a time up to
// size; entry id is in slot (id-base) % size.
type flight struct {
	mu      sync.Mutex
	size    int // entries kept; 0: off
	configd bool
	next    uint64 // the next entry's id
	base    uint64 // the id in slot 0 since the ring was (re)started
	p2p     uint64
	devColl uint64 // collectives on device memory
	devP2P  uint64 // sends and receives on device memory
	chunks  []*[flightChunk]flightSlot
	epoch   time.Time // the group's creation: times are read against it (one clock read each)
	epochNs int64
}

func (f *flight) init(created time.Time) {
	f.epoch, f.epochNs = created, created.UnixNano()
}

// ns is t in ns since the Unix epoch, from t's monotonic reading.
func (f *flight) ns(t time.Time) int64 { return f.epochNs + int64(t.Sub(f.epoch)) }

// now is the time in ns since the Unix epoch.
func (f *flight) now() int64 { return f.epochNs + int64(time.Since(f.epoch)) }

// record adds e (its ID and P2PSeq assigned here) and returns its ref; a
// zero ref when the recorder is off.
func (f *flight) record(e FlightEntry) flightRef {
	f.mu.Lock()
	if !f.configd {
		f.size, f.configd = DefaultFlightEntries, true
	}
	if f.size == 0 {
		f.mu.Unlock()
		return flightRef{}
	}
	switch p2p := e.Op == "send" || e.Op == "recv"; {
	case e.Device && p2p:
		f.devP2P++
		e.P2PSeq = f.devP2P
	case e.Device:
		f.devColl++
		e.Seq = f.devColl
	case p2p:
		f.p2p++
		e.P2PSeq = f.p2p
	}
	e.ID = f.next
	f.next++
	i := int((e.ID - f.base) % uint64(f.size))
	if i/flightChunk >= len(f.chunks) {
		f.chunks = append(f.chunks, new([flightChunk]flightSlot))
	}
	s := &f.chunks[i/flightChunk][i%flightChunk]
	s.e = e
	s.started.Store(e.Started)
	s.completed.Store(0)
	s.key.Store(e.ID + 1)
	f.mu.Unlock()
	return flightRef{s, e.ID + 1}
}

func (r flightRef) started(f *flight, at time.Time) {
	if r.s != nil && r.s.key.Load() == r.key {
		r.s.started.Store(f.ns(at))
	}
}

func (r flightRef) completed(f *flight, err error) {
	if r.s == nil || r.s.key.Load() != r.key {
		return
	}
	r.s.completed.Store(f.now())
	if err != nil {
		f.mu.Lock()
		if r.s.key.Load() == r.key {
			r.s.e.Error = err.Error()
		}
		f.mu.Unlock()
	}
}

// SetFlightEntries sets how many operations the group's flight recorder
// keeps (0 turns it off) and drops what it holds.
func (pg *ProcessGroup) SetFlightEntries(n int) {
	f := &pg.flight
	f.mu.Lock()
	f.size, f.configd, f.chunks, f.base = max(n, 0), true, nil, f.next
	f.mu.Unlock()
}

// Flight returns the recorded operations, oldest first.
func (pg *ProcessGroup) Flight() []FlightEntry {
	f := &pg.flight
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(int(f.next-f.base), f.size)
	out := make([]FlightEntry, 0, n)
	for id := f.next - uint64(n); id < f.next; id++ {
		i := int((id - f.base) % uint64(f.size))
		s := &f.chunks[i/flightChunk][i%flightChunk]
		if s.key.Load() != id+1 {
			continue
		}
		e := s.e
		e.Started, e.Completed = s.started.Load(), s.completed.Load()
		if e.Completed != 0 && e.Started == 0 {
			e.Started = e.Completed
		}
		out = append(out, e)
	}
	return out
}

// recordCall records a collective described by call, issued now.
func (pg *ProcessGroup) recordCall(seq uint64, op string, call *transport.Call, timeout time.Duration) flightRef {
	in, out := flightCounts(call, pg.cfg.Size, pg.cfg.Rank)
	dt := int(call.DType)
	if call.DType == transport.NoDType || call.Op == transport.OpBarrier || call.Op == transport.OpMonitoredBarrier {
		dt = -1
	}
	return pg.flight.record(FlightEntry{Seq: seq, Op: op, Peer: -1, DType: dt, In: in, Out: out,
		Created: pg.flight.now(), TimeoutMs: timeout.Milliseconds()})
}

// recordP2P records a send or a receive of n bytes, issued now.
func (pg *ProcessGroup) recordP2P(op string, peer int, n int, timeout time.Duration) flightRef {
	now := pg.flight.now() // a send or a posted receive is under way from now on
	e := FlightEntry{Op: op, Peer: peer, DType: -1, Created: now, Started: now, TimeoutMs: timeout.Milliseconds()}
	if op == "send" {
		e.In = uint64(n)
	} else {
		e.Out = uint64(n)
	}
	return pg.flight.record(e)
}

// recordDevice records op name on device memory, made of calls (before
// DeviceRun maps their roots), issued now: elements of the reductions'
// dtype, bytes of the rest.
func (pg *ProcessGroup) recordDevice(name string, calls []backend.DeviceCall, timeout time.Duration) flightRef {
	e := FlightEntry{Op: name, Peer: -1, DType: -1, Device: true, Created: pg.flight.now(),
		TimeoutMs: timeout.Milliseconds()}
	p := uint64(pg.cfg.Size)
	for _, c := range calls {
		n := uint64(max(c.Count, 0))
		switch c.Kind {
		case backend.CallAllReduce, backend.CallReduce:
			e.In, e.Out, e.DType = e.In+n, e.Out+n, int(c.DType)
		case backend.CallReduceScatter:
			e.In, e.Out, e.DType = e.In+n*p, e.Out+n, int(c.DType)
		case backend.CallBroadcast:
			e.In, e.Out = e.In+n, e.Out+n
		case backend.CallAllGather:
			e.In, e.Out = e.In+n, e.Out+n*p
		case backend.CallSend:
			if name == "allgather" { // the same input to every rank
				e.In = n
			} else {
				e.In += n
			}
			e.Peer = c.Root
		case backend.CallRecv:
			e.Out += n
			e.Peer = c.Root
		}
	}
	if name != "send" && name != "recv" {
		e.Peer = -1
	}
	return pg.flight.record(e)
}

// flightCounts is how many elements a rank of a group of size contributes
// and receives in call.
func flightCounts(call *transport.Call, size, rank int) (in, out uint64) {
	n, p := call.Count, uint64(size)
	switch call.Op {
	case transport.OpAllGather:
		return n, n * p
	case transport.OpReduceScatter:
		return n * p, n
	case transport.OpGather:
		if int(call.Root) == rank {
			return n, n * p
		}
		return n, 0
	case transport.OpScatter:
		if int(call.Root) == rank {
			return n * p, n
		}
		return 0, n
	case transport.OpAllToAll:
		if b := call.Blocks; b != nil {
			e := uint64(max(b.Elem, 1))
			for _, x := range b.Ins {
				in += uint64(len(x)) / e
			}
			for _, x := range b.Outs {
				out += uint64(len(x)) / e
			}
		}
		return in, out
	case transport.OpBarrier, transport.OpMonitoredBarrier:
		return 0, 0
	}
	return n, n
}
