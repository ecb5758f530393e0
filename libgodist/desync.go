package libgodist

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"

	"github.com/godist/godist/libgodist/glog"
	"github.com/godist/godist/libgodist/transport"
)

// Desync detection. Every collective's fingerprint (transport.Call, built
// in ops.go) is in its context; the transport stamps it on the op's
// messages and compares each arriving stamp with the collective this rank
// runs (transport.Mailbox.Track), and the shared-memory arena compares the
// ranks' fingerprints in its step blocks. The rank that finds two calls
// differ tells every peer at once (a notice on desyncTag), so that each
// fails the collective at that sequence number with the same description,
// not after its timeout, including ranks that would never have received a
// message of the other call. The group is broken from then on.

// desyncTag carries a desync notice: the ranks of the pair and both
// stamps (desyncNotice).
var desyncTag = transport.ControlTag(2)

const desyncSize = 8 + 2*transport.StampSize

// maxDetail bounds the description of this rank's tensors an error shows.
const maxDetail = 2048

// ErrDesync is wrapped by the errors of collectives that failed because
// ranks called different collectives (or the same one with other
// arguments) at the same point.
var ErrDesync = errors.New("ranks called different collectives")

// detailHash is the fingerprint of a caller's description of its tensors
// (never 0, which means none).
func detailHash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32() | 1
}

// track registers t's call with the transport; a desync found among
// messages that arrived for it is told to the peers and returned.
func (pg *ProcessGroup) track(t *task) *transport.DesyncError {
	if pg.tracker == nil || pg.cfg.Size == 1 {
		return nil
	}
	if pg.sub != nil {
		// A child's arena publishes its calls itself (the root's router
		// does it for the root's).
		if a, ok := pg.offload.(interface{ SetCall(*transport.Call) }); ok {
			a.SetCall(&t.call)
		}
	}
	de := pg.tracker.Track(&t.call)
	if de != nil {
		pg.desynced(de, true)
	}
	return de
}

// desynced records the first desync the group learns of (found here, or
// told by a peer): the collectives from its sequence number on fail with
// it, the running one at once; with tell, every peer is told. It does not
// block (it runs on transport readers).
func (pg *ProcessGroup) desynced(de *transport.DesyncError, tell bool) {
	pg.mu.Lock()
	if pg.desync != nil || pg.closed {
		pg.mu.Unlock()
		return
	}
	pg.desync = de
	if pg.broken == nil {
		pg.broken = &desyncError{de: de}
	}
	if tell {
		pg.telling.Add(1) // under mu, where closed is false: before Close waits for telling
	}
	pg.mu.Unlock()
	glog.Warnf("godist: group %q rank %d: %v", pg.cfg.Group, pg.cfg.Rank, &desyncError{de: de})
	if t := pg.running.Load(); t != nil && t.w.Seq >= de.Mine.Seq {
		if pg.tracker != nil {
			pg.tracker.FailCollectives(&desyncError{de: de})
		}
		t.ctx.cancel()
	}
	if tell {
		go func() {
			defer pg.telling.Done()
			pg.tellDesync(de)
		}()
	}
}

// listenDesync takes the peers' desync notices as they arrive, on the
// goroutine that delivers them (Recv.OnDone): a notice is handled before
// anything its sender sent after it (its goodbye: the op that fails then
// fails with the desync).
func (pg *ProcessGroup) listenDesync() {
	buf := make([]byte, desyncSize)
	var post func()
	post = func() {
		pg.tr.PostRecv(transport.AnySource, desyncTag, buf).OnDone(func(r *transport.Recv) {
			if r.Err() == nil {
				pg.noticed(buf)
				post()
			}
		})
	}
	post()
}

// tellDesync sends every peer a notice of de.
func (pg *ProcessGroup) tellDesync(de *transport.DesyncError) {
	var b [desyncSize]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(de.Rank))
	binary.LittleEndian.PutUint32(b[4:], uint32(de.Peer))
	de.Mine.Put(b[8:])
	de.Theirs.Put(b[8+transport.StampSize:])
	ctx, cancel := context.WithTimeout(pg.ctx, queryWait)
	defer cancel()
	for p := 0; p < pg.cfg.Size; p++ {
		if p != pg.cfg.Rank {
			_ = pg.tr.Send(ctx, p, desyncTag, b[:])
		}
	}
}

// noticed handles a peer's desync notice b (desyncTag): a notice that
// names ranks outside the group is ignored.
func (pg *ProcessGroup) noticed(b []byte) {
	if len(b) != desyncSize {
		return
	}
	de := &transport.DesyncError{
		Rank:   int(int32(binary.LittleEndian.Uint32(b[0:]))),
		Peer:   int(int32(binary.LittleEndian.Uint32(b[4:]))),
		Mine:   transport.ParseStamp(b[8:]),
		Theirs: transport.ParseStamp(b[8+transport.StampSize:]),
	}
	n := pg.cfg.Size
	if de.Rank < 0 || de.Rank >= n || de.Peer < 0 || de.Peer >= n || de.Rank == de.Peer {
		return
	}
	pg.desynced(de, false)
}

// desyncError is the cause of a group broken by a desync.
type desyncError struct{ de *transport.DesyncError }

func (e *desyncError) Error() string { return ErrDesync.Error() + ": " + e.de.Error() }
func (e *desyncError) Unwrap() []error {
	return []error{ErrDesync, e.de}
}

// desyncOf returns the desync err carries, if any.
func desyncOf(err error) *transport.DesyncError {
	var de *transport.DesyncError
	if errors.As(err, &de) {
		return de
	}
	return nil
}

// refusal returns why the group cannot run op number seq: the desync it
// learned of (for the first collective that meets it), or what usable
// says.
func (pg *ProcessGroup) refusal(op string, seq uint64) error {
	pg.mu.Lock()
	de, shown := pg.desync, pg.desyncShown
	if de == nil && pg.broken == nil && !pg.closed && pg.tr != nil {
		pg.mu.Unlock()
		return nil
	}
	if de != nil && !shown {
		pg.desyncShown = true
	}
	pg.mu.Unlock()
	if de != nil && !shown {
		return pg.desyncOpError(op, seq, de, "")
	}
	return pg.usable()
}

// desyncPending reports whether a desync was learned of and no collective
// has failed with it yet (a collective submitted now is queued, to fail
// with it in turn).
func (pg *ProcessGroup) desyncPending() bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.desync != nil && !pg.desyncShown
}

// desyncOpError is the error of op number seq failed by de; detail is this
// rank's description of its tensors.
func (pg *ProcessGroup) desyncOpError(op string, seq uint64, de *transport.DesyncError, detail string) *OpError {
	peer := de.Peer // the rank whose call differs from the finder's
	if de.Peer == pg.cfg.Rank {
		peer = de.Rank
	}
	if len(detail) > maxDetail {
		detail = detail[:maxDetail] + "..."
	}
	return &OpError{Op: op, Seq: seq, Group: pg.cfg.Group, Peer: peer, Err: &desyncError{de: de}, Detail: detail}
}
