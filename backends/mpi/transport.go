package mpi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/transport"
)

// Transport is a group's point-to-point traffic over MPI (GODIST_TRANSPORT=mpi).
// Every message is two MPI messages to the peer: a header (the godist tag
// and the length) on the header communicator, then the payload on the data
// communicator. One progress goroutine per group keeps a receive for the
// next header from any rank posted, receives the payload that follows it,
// and hands it to the shared Mailbox, which matches it to posted receives
// (any source, folds, failures) exactly as the TCP transport's readers do.
// So sends are eager in the engine's sense: the receiver takes every
// message as it comes, whether or not a receive is posted for it.
type Transport struct {
	lib        *Lib
	rank, size int
	hdr, data  Comm // point-to-point communicators
	coll       Comm // the offload's collectives (offload.go)
	mb         *transport.Mailbox
	sendMu     []sync.Mutex // per peer: a header and its payload go out back to back

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	once   sync.Once
}

var _ transport.Transport = (*Transport)(nil)

const hdrLen = 16

// A message's payload goes as pieces of at most pieceBytes (MPI counts are
// C ints); a header announcing more than maxMessage bytes fails its sender.
const (
	pieceBytes = 1 << 30
	maxMessage = 1 << 46
)

// pieces is how many MPI messages carry a payload of n bytes.
func pieces(n int) int { return max(1, (n+pieceBytes-1)/pieceBytes) }

// errClosed is the cause of a closed transport's failures.
var errClosed = errors.New("mpi transport closed")

func newTransport(l *Lib, rank, size int, coll, hdr, data Comm) *Transport {
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &Transport{lib: l, rank: rank, size: size, hdr: hdr, data: data, coll: coll, mb: transport.NewMailbox(size),
		sendMu: make([]sync.Mutex, size), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go t.progress()
	return t
}

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// Send implements transport.Transport.
func (t *Transport) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if peer < 0 || peer >= t.size {
		return fmt.Errorf("mpi: send to rank %d of a group of %d", peer, t.size)
	}
	if err := context.Cause(t.ctx); err != nil {
		return &transport.PeerError{Peer: peer, Err: err}
	}
	head, free := Alloc(hdrLen)
	defer free()
	binary.LittleEndian.PutUint64(head[0:], uint64(tag))
	binary.LittleEndian.PutUint64(head[8:], uint64(len(data)))
	t.sendMu[peer].Lock()
	reqs := make([]Request, 0, 1+pieces(len(data)))
	r, err := t.lib.Isend(t.hdr, head, peer, 0)
	if err == nil {
		reqs = append(reqs, r)
		for off := 0; err == nil && (off < len(data) || off == 0); off += pieceBytes {
			if r, err = t.lib.Isend(t.data, data[off:min(off+pieceBytes, len(data))], peer, 0); err == nil {
				reqs = append(reqs, r)
			}
			if len(data) == 0 {
				break
			}
		}
		if err != nil {
			t.lib.abandon(reqs, 0)
			keepForever(head, data)
		}
	}
	t.sendMu[peer].Unlock()
	if err != nil {
		return &transport.PeerError{Peer: peer, Err: err}
	}
	wctx, done := merge(ctx, t.ctx)
	defer done()
	if err := t.lib.waitAll(wctx, "MPI_Isend", reqs, head, data); err != nil {
		return &transport.PeerError{Peer: peer, Err: err}
	}
	return nil
}

// PostRecv implements transport.Transport.
func (t *Transport) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	return t.mb.Post(peer, tag, buf)
}

// PostFold implements transport.Transport.
func (t *Transport) PostFold(peer int, tag transport.Tag, buf []byte, f transport.Fold) *transport.Recv {
	return t.mb.PostFold(peer, tag, buf, f)
}

// progress receives every message sent to this rank until the transport
// closes.
func (t *Transport) progress() {
	defer close(t.done)
	head, freeHead := Alloc(hdrLen)
	defer freeHead()
	var payload []byte
	freePayload := func() {}
	defer func() { freePayload() }()
	for {
		r, err := t.lib.Irecv(t.hdr, head, -1, 0)
		if err != nil {
			t.mb.Fail(fmt.Errorf("mpi: posting a receive: %w", err))
			return
		}
		src, err := t.await(r, head)
		if err != nil {
			t.mb.Fail(err)
			return
		}
		tag := transport.Tag(binary.LittleEndian.Uint64(head[0:]))
		size := binary.LittleEndian.Uint64(head[8:])
		if size > maxMessage {
			// Its payload is never received: the stream from src is lost.
			t.mb.FailPeer(src, fmt.Errorf("mpi: rank %d announced a message of %d bytes (at most %d)", src, size,
				uint64(maxMessage)))
			continue
		}
		n := int(size)
		if n > len(payload) {
			freePayload()
			payload, freePayload = Alloc(max(n, 4096))
		}
		for off := 0; err == nil && (off < n || off == 0); off += pieceBytes {
			if r, err = t.lib.Irecv(t.data, payload[off:min(off+pieceBytes, n)], src, 0); err == nil {
				_, err = t.await(r, payload)
			}
			if n == 0 {
				break
			}
		}
		if err != nil {
			t.mb.FailPeer(src, err)
			continue
		}
		if err := t.mb.Deliver(src, tag, n, bytes.NewReader(payload[:n])); err != nil {
			t.mb.FailPeer(src, err)
		}
	}
}

// await waits for receive r until it completes or the transport closes,
// and returns its source.
func (t *Transport) await(r Request, buf []byte) (int, error) {
	nap := 10 * time.Microsecond
	start := time.Now()
	for {
		done, src, _, err := t.lib.Test(r)
		if err != nil {
			return -1, err
		}
		if done {
			return src, nil
		}
		if cause := context.Cause(t.ctx); cause != nil {
			_ = t.lib.Abandon(r)
			keepForever(buf)
			return -1, cause
		}
		if time.Since(start) < idleSpin {
			continue
		}
		tm := time.NewTimer(nap)
		select {
		case <-t.ctx.Done():
		case <-tm.C:
		}
		tm.Stop()
		if nap < idleNap {
			nap *= 2
		}
	}
}

// The progress goroutine waits for messages that may be long in coming: it
// spins less and sleeps longer than an op's wait (wait.go).
const (
	idleSpin = 100 * time.Microsecond
	idleNap  = time.Millisecond
)

// Close implements transport.Transport. The communicators are not freed:
// MPI_Comm_free is collective, and a closing rank cannot count on its
// peers to free theirs at the same time.
func (t *Transport) Close() error {
	t.shutdown(errClosed)
	return nil
}

// Abort implements transport.Transport.
func (t *Transport) Abort(err error) {
	if err == nil {
		err = errClosed
	}
	t.shutdown(err)
}

func (t *Transport) shutdown(err error) {
	t.once.Do(func() {
		t.cancel(err)
		<-t.done
		t.mb.Fail(fmt.Errorf("%w: %v", transport.ErrClosed, err))
	})
}

// merge is a context done when either a or b is, with a's deadline; call
// done when finished with it.
func merge(a, b context.Context) (ctx context.Context, done func()) {
	ctx, cancel := context.WithCancelCause(a)
	stop := context.AfterFunc(b, func() { cancel(context.Cause(b)) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}
