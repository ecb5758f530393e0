package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Config identifies this rank and its group for connection setup.
type Config struct {
	Rank, Size int
	Session    uint64 // random token chosen by rank 0, known to all ranks
	Group      string
	BindHost   string // host/IP to listen on; "" listens on all interfaces
}

// Endpoint is where a peer listens: addresses to try in order, one port.
type Endpoint struct {
	Addrs []string
	Port  int
}

// Listener accepts connections from higher ranks while this rank dials
// lower ranks. Create it before publishing the port, then Connect.
type Listener struct {
	cfg Config
	ln  *net.TCPListener
}

// Listen opens the listening socket on an ephemeral port.
func Listen(cfg Config) (*Listener, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("tcp: invalid rank %d for size %d", cfg.Rank, cfg.Size)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.BindHost, "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp: listen: %w", err)
	}
	return &Listener{cfg: cfg, ln: ln.(*net.TCPListener)}, nil
}

// Port is the bound port.
func (l *Listener) Port() int { return l.ln.Addr().(*net.TCPAddr).Port }

// SetSession sets the session token checked in handshakes; call it before
// Connect when the token was learnt during rendezvous.
func (l *Listener) SetSession(s uint64) { l.cfg.Session = s }

// Close closes the listening socket; it is idempotent.
func (l *Listener) Close() error {
	err := l.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Connect builds the full mesh: rank r dials every rank below r and accepts
// one connection from every rank above r. It returns when all connections
// are up and handshaken, or fails when ctx ends. The listener is closed on
// return.
func (l *Listener) Connect(ctx context.Context, eps []Endpoint) (*Transport, error) {
	defer l.Close()
	cfg := l.cfg
	if len(eps) != cfg.Size {
		return nil, fmt.Errorf("tcp: %d endpoints for a group of %d", len(eps), cfg.Size)
	}
	peers := make([]*peer, cfg.Size)
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	if inbound := cfg.Size - 1 - cfg.Rank; inbound > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.acceptAll(ctx, inbound, peers, &mu); err != nil {
				fail(err)
				cancel()
			}
		}()
	}
	for r := 0; r < cfg.Rank; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c, err := dial(ctx, cfg, r, eps[r])
			if err != nil {
				fail(&transport.PeerError{Op: "connect", Peer: r, Err: err})
				cancel()
				return
			}
			p, err := newPeer(r, c)
			if err != nil {
				fail(&transport.PeerError{Op: "connect", Peer: r, Err: err})
				cancel()
				return
			}
			mu.Lock()
			peers[r] = p
			mu.Unlock()
		}(r)
	}
	wg.Wait()
	if firstErr != nil {
		for _, p := range peers {
			if p != nil {
				p.sk.release()
			}
		}
		return nil, firstErr
	}
	return newTransport(cfg.Rank, cfg.Size, transport.NewMailbox(cfg.Size), peers), nil
}

func (l *Listener) acceptAll(ctx context.Context, n int, peers []*peer, mu *sync.Mutex) error {
	stop := context.AfterFunc(ctx, func() { _ = l.ln.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	for got := 0; got < n; {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("tcp: waiting for %d connection(s) from higher ranks: %w", n-got, transport.ErrTimeout)
			}
			return fmt.Errorf("tcp: accept: %w", err)
		}
		from, err := l.serverHandshake(ctx, c, peers, mu)
		if err != nil {
			// Not one of ours (stale group, port scan): drop it and go on.
			_ = c.Close()
			continue
		}
		p, err := newPeer(from, c)
		if err != nil {
			return &transport.PeerError{Op: "connect", Peer: from, Err: err}
		}
		mu.Lock()
		peers[from] = p
		mu.Unlock()
		got++
	}
	return nil
}

// handshakeTimeout bounds each handshake exchange.
var handshakeTimeout = 10 * time.Second

func (l *Listener) serverHandshake(ctx context.Context, c *net.TCPConn, peers []*peer, mu *sync.Mutex) (int, error) {
	d := time.Now().Add(handshakeTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	_ = c.SetDeadline(d)
	defer c.SetDeadline(time.Time{})
	msg, err := readMsg(c)
	if err != nil {
		return 0, err
	}
	h, err := wire.UnmarshalHandshake(msg)
	if err != nil {
		return 0, err
	}
	cfg := l.cfg
	reject := func(why string) (int, error) {
		_, _ = c.Write([]byte{1})
		return 0, fmt.Errorf("%w: %s", errHandshake, why)
	}
	switch {
	case h.Session != cfg.Session || h.Group != cfg.Group:
		return reject("different group or session")
	case int(h.WorldSize) != cfg.Size || int(h.ToRank) != cfg.Rank:
		return reject("addressed to another rank or group size")
	case int(h.FromRank) <= cfg.Rank || int(h.FromRank) >= cfg.Size:
		return reject("unexpected source rank")
	}
	mu.Lock()
	dup := peers[h.FromRank] != nil
	mu.Unlock()
	if dup {
		return reject("duplicate connection")
	}
	if _, err := c.Write([]byte{0}); err != nil {
		return 0, err
	}
	return int(h.FromRank), nil
}

// dial connects to rank r, retrying until ctx ends.
func dial(ctx context.Context, cfg Config, r int, ep Endpoint) (*net.TCPConn, error) {
	if len(ep.Addrs) == 0 {
		return nil, fmt.Errorf("no address published")
	}
	hs := (&wire.Handshake{Magic: wire.Magic, Version: wire.Version, Session: cfg.Session, Group: cfg.Group,
		FromRank: int32(cfg.Rank), ToRank: int32(r), WorldSize: int32(cfg.Size)}).Marshal()
	var lastErr error
	backoff := 10 * time.Millisecond
	for {
		for _, a := range ep.Addrs {
			addr := net.JoinHostPort(a, strconv.Itoa(ep.Port))
			c, err := tryDial(ctx, addr, hs)
			if err == nil {
				return c, nil
			}
			lastErr = fmt.Errorf("%s: %w", addr, err)
			if errors.Is(err, errHandshake) {
				return nil, lastErr
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", transport.ErrTimeout, lastErr)
		case <-time.After(backoff):
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

func tryDial(ctx context.Context, addr string, hs []byte) (*net.TCPConn, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := nc.(*net.TCPConn)
	dl, _ := dctx.Deadline()
	_ = c.SetDeadline(dl)
	if err := writeMsg(c, hs); err != nil {
		c.Close()
		return nil, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		c.Close()
		return nil, err
	}
	if ack[0] != 0 {
		c.Close()
		return nil, fmt.Errorf("%w by the peer", errHandshake)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

const maxHandshake = 64 << 10

func writeMsg(c net.Conn, b []byte) error {
	buf := make([]byte, 4+len(b))
	binary.LittleEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err := c.Write(buf)
	return err
}

func readMsg(c net.Conn) ([]byte, error) {
	var lb [4]byte
	if _, err := io.ReadFull(c, lb[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(lb[:])
	if n > maxHandshake {
		return nil, fmt.Errorf("%w: handshake of %d bytes", errHandshake, n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return b, err
}
