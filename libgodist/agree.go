package libgodist

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/godist/godist/libgodist/transport"
)

// Agreement on outcomes. A collective must succeed on every rank or fail
// on every rank: a rank that gives up on collective seq N (its timeout
// fired, or it failed for another reason and its group broke) may already
// have sent its contribution, and a peer that comes to seq N later would
// otherwise complete it with that contribution while this rank reported a
// failure.
//
// So a rank whose collective fails and breaks its group tells every peer
// at once (a give-up notice on giveUpTag: the sequence number and why).
// A peer that has the notice fails every collective from seq N on: one
// that starts later is refused before it sends anything, and one that was
// running fails instead of returning its result (a running one is not
// cut short, so that a peer that times out itself still says which
// ranks never joined). The check costs one atomic load per collective.
//
// The notice travels like any message, so a peer that completes seq N in
// the instant between this rank's deadline and the notice's arrival still
// returns the result. The shared-memory arena closes that window within a
// host (the giving-up rank poisons the word it waited for, see
// backends/shm/agree.go); over TCP it stays open (closing it would take an
// extra round trip per collective).

// giveUpTag carries a give-up notice: the sequence number (8 bytes, little
// endian), what kind of failure it was (1 byte: giveUpOther, giveUpLost or
// giveUpGone), the rank at fault (int32, little endian; -1 if none), then
// why, NUL-padded to giveUpSize.
var giveUpTag = transport.ControlTag(3)

const (
	giveUpSize = 512
	giveUpHead = 13
)

// The kinds of failure a give-up notice reports: a peer's op that fails
// because of it fails with the same cause (a lost connection stays a lost
// connection), and a timeout reads as the giving-up rank having left.
const (
	giveUpOther byte = iota
	giveUpLost
	giveUpGone
)

// ErrAbandoned is wrapped by the errors of collectives that a peer gave up
// on (timed out or failed) before this rank completed them.
var ErrAbandoned = transport.ErrAbandoned

// giveUp is a peer's give-up notice.
type giveUp struct {
	seq   uint64
	rank  int // who gave up
	kind  byte
	fault int // the rank at fault in its error, or -1
	why   string
}

// tellGiveUp tells every peer that this rank failed collective seq with
// err, so that none completes it. It does not wait for slow peers: the
// sends go out on their own goroutine (Close waits for them).
func (pg *ProcessGroup) tellGiveUp(seq uint64, err error) {
	if pg.cfg.Size == 1 || pg.ctx.Err() != nil {
		return // closing: the peers learn that from the transport
	}
	var b [giveUpSize]byte
	binary.LittleEndian.PutUint64(b[:8], seq)
	switch {
	case errors.Is(err, transport.ErrConnLost):
		b[8] = giveUpLost
	case errors.Is(err, transport.ErrPeerGone), errors.Is(err, transport.ErrTimeout):
		b[8] = giveUpGone
	}
	fault := int32(-1)
	if pe := rootPeerError(err); pe != nil {
		fault = int32(pe.Peer)
	}
	binary.LittleEndian.PutUint32(b[9:], uint32(fault))
	copy(b[giveUpHead:len(b)-1], err.Error())
	pg.mu.Lock()
	if pg.closed {
		pg.mu.Unlock()
		return // Close may be waiting for telling already
	}
	pg.telling.Add(1)
	pg.mu.Unlock()
	go func() {
		defer pg.telling.Done()
		ctx, cancel := context.WithTimeout(pg.ctx, farewellWait)
		defer cancel()
		for p := 0; p < pg.cfg.Size; p++ {
			if p != pg.cfg.Rank {
				_ = pg.tr.Send(ctx, p, giveUpTag, b[:])
			}
		}
	}()
}

// listenGiveUps takes the peers' give-up notices as they arrive, on the
// goroutine that delivers them.
func (pg *ProcessGroup) listenGiveUps() {
	buf := make([]byte, giveUpSize)
	var post func()
	post = func() {
		pg.tr.PostRecv(transport.AnySource, giveUpTag, buf).OnDone(func(r *transport.Recv) {
			if r.Err() == nil {
				pg.gaveUp(r.Source(), buf)
				post()
			}
		})
	}
	post()
}

// gaveUp records peer's notice b; the lowest sequence number wins.
func (pg *ProcessGroup) gaveUp(peer int, b []byte) {
	if len(b) != giveUpSize || peer < 0 || peer >= pg.cfg.Size {
		return
	}
	why := b[giveUpHead:]
	if i := bytes.IndexByte(why, 0); i >= 0 {
		why = why[:i]
	}
	n := &giveUp{seq: binary.LittleEndian.Uint64(b[:8]), rank: peer, kind: b[8],
		fault: int(int32(binary.LittleEndian.Uint32(b[9:]))), why: string(why)}
	for {
		old := pg.abandoned.Load()
		if old != nil && old.seq <= n.seq {
			return
		}
		if pg.abandoned.CompareAndSwap(old, n) {
			return
		}
	}
}

// abandonedAt returns why collective op number seq must fail, if a peer
// gave up on it or on an earlier one, else nil.
func (pg *ProcessGroup) abandonedAt(op string, seq uint64) error {
	n := pg.abandoned.Load()
	if n == nil || n.seq > seq {
		return nil
	}
	// The rank at fault: the one the peer's own error names (a lost
	// connection's), unless that is this rank.
	at := n.rank
	if n.fault >= 0 && n.fault < pg.cfg.Size && n.fault != pg.cfg.Rank && n.kind == giveUpLost {
		at = n.fault
	}
	return &transport.PeerError{Op: op, Peer: at, Err: &abandonError{n: n}}
}

// abandonError says that a peer gave up on a collective. It matches
// ErrAbandoned and, by the kind of the peer's failure, transport's
// ErrConnLost or ErrPeerGone.
type abandonError struct{ n *giveUp }

func (e *abandonError) Error() string {
	return fmt.Sprintf("%v: rank %d gave up on collective seq %d: %s", ErrAbandoned, e.n.rank, e.n.seq, e.n.why)
}

func (e *abandonError) Unwrap() []error {
	switch e.n.kind {
	case giveUpLost:
		return []error{ErrAbandoned, transport.ErrConnLost}
	case giveUpGone:
		return []error{ErrAbandoned, transport.ErrPeerGone}
	}
	return []error{ErrAbandoned}
}
