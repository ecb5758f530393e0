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
	"syscall"
	"time"

	"github.com/godist/godist/auth"
	"github.com/godist/godist/libgodist/glog"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// Config identifies this rank and its group for connection setup.
type Config struct {
	Rank, Size int
	Session    uint64 // random token chosen by rank 0, known to all ranks
	Group      string
	Hosts      []string  // IP addresses to listen on, all on one port; empty: all interfaces
	Key        *auth.Key // the job secret's transport key; nil: no secret
}

// authContext binds a proof to the group and the accepting rank.
func (cfg Config) authContext(to int) string {
	return fmt.Sprintf("group=%q to=%d size=%d", cfg.Group, to, cfg.Size)
}

// Endpoint is where a peer listens: addresses to try in order, one port,
// and for messages the interface of each address and the peer's host.
type Endpoint struct {
	Addrs  []string
	Ifaces []string // parallel to Addrs; may be shorter ("" where not known)
	Host   string
	Port   int
}

// iface is the interface of Addrs[i], "" if not known.
func (ep Endpoint) iface(i int) string {
	if i < len(ep.Ifaces) {
		return ep.Ifaces[i]
	}
	return ""
}

// Listener accepts connections from higher ranks while this rank dials
// lower ranks. Create it before publishing the port, then Connect.
type Listener struct {
	cfg  Config
	lns  []*net.TCPListener // one per address of cfg.Hosts, on one port
	port int
}

// listenTries bounds the attempts to find a port free on every address.
const listenTries = 32

// Listen opens the listening sockets: one on an ephemeral port, and one on
// each further address of cfg.Hosts on the same port.
func Listen(cfg Config) (*Listener, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("tcp: invalid rank %d for size %d", cfg.Rank, cfg.Size)
	}
	hosts := cfg.Hosts
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	var lastErr error
	for range listenTries {
		lns, err := listenSame(hosts)
		if err == nil {
			return &Listener{cfg: cfg, lns: lns, port: lns[0].Addr().(*net.TCPAddr).Port}, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || len(hosts) == 1 {
			return nil, fmt.Errorf("tcp: listen: %w", err)
		}
		lastErr = err
	}
	return nil, fmt.Errorf("tcp: listen: no port free on all of %v: %w", hosts, lastErr)
}

// listenSame listens on every host on one port, the one the first gets.
func listenSame(hosts []string) ([]*net.TCPListener, error) {
	lns := make([]*net.TCPListener, 0, len(hosts))
	port := "0"
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, port))
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln.(*net.TCPListener))
		port = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	return lns, nil
}

// Port is the bound port.
func (l *Listener) Port() int { return l.port }

// SetSession sets the session token checked in handshakes; call it before
// Connect when the token was learnt during rendezvous.
func (l *Listener) SetSession(s uint64) { l.cfg.Session = s }

// Close closes the listening sockets; it is idempotent.
func (l *Listener) Close() error {
	var first error
	for _, ln := range l.lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) && first == nil {
			first = err
		}
	}
	return first
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

	start := time.Now()
	var wg sync.WaitGroup
	if inbound := cfg.Size - 1 - cfg.Rank; inbound > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.acceptAll(ctx, inbound, peers, &mu); err != nil {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					err = l.acceptTimeout(peers, &mu, eps[cfg.Rank], time.Since(start))
				}
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
				fail(err)
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

// acceptTimeout is the error of a rank whose higher ranks did not all
// connect in time: which did not, and where this rank waited for them.
func (l *Listener) acceptTimeout(peers []*peer, mu *sync.Mutex, me Endpoint, after time.Duration) error {
	e := &AcceptError{Rank: l.cfg.Rank, Missing: []int{}, Host: me.Host, Port: l.port, Addrs: me.Addrs, Ifaces: me.Ifaces, After: after}
	mu.Lock()
	for r := l.cfg.Rank + 1; r < l.cfg.Size; r++ {
		if peers[r] == nil {
			e.Missing = append(e.Missing, r)
		}
	}
	mu.Unlock()
	return e
}

// shaken is a connection that passed its handshake, from rank from, or
// the error of a listening socket.
type shaken struct {
	c    *net.TCPConn
	from int
	err  error
}

// acceptAll accepts and handshakes n connections from higher ranks on any
// of the listening sockets, until ctx ends. Each connection is handshaken
// on its own, so a stranger that stays silent holds up no one; one that is
// refused is logged and dropped. It closes the sockets and every
// connection still handshaking before it returns.
func (l *Listener) acceptAll(ctx context.Context, n int, peers []*peer, mu *sync.Mutex) error {
	got := make(chan shaken)
	hctx, stop := context.WithCancel(ctx)
	claimed := make([]bool, l.cfg.Size) // guarded by mu
	var wg sync.WaitGroup
	for _, ln := range l.lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.AcceptTCP()
				if err != nil {
					select {
					case got <- shaken{err: err}:
					case <-hctx.Done():
					}
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					from, err := l.serverHandshake(hctx, c, claimed, mu)
					if err != nil {
						if hctx.Err() != nil {
							err = errors.New("the group formed before its handshake")
						}
						glog.Warnf("godist: rank %d of group %q refused a connection from %s: %v",
							l.cfg.Rank, l.cfg.Group, c.RemoteAddr(), err)
						_ = c.Close()
						return
					}
					select {
					case got <- shaken{c: c, from: from}:
					case <-hctx.Done():
						_ = c.Close()
					}
				}()
			}
		}()
	}
	defer func() {
		stop()
		_ = l.Close() // unblocks the Accepts
		wg.Wait()
	}()
	for left := n; left > 0; {
		var a shaken
		select {
		case a = <-got:
		case <-ctx.Done():
			return fmt.Errorf("tcp: waiting for %d connection(s) from higher ranks: %w", left, transport.ErrTimeout)
		}
		if a.err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("tcp: waiting for %d connection(s) from higher ranks: %w", left, transport.ErrTimeout)
			}
			return fmt.Errorf("tcp: accept: %w", a.err)
		}
		p, err := newPeer(a.from, a.c)
		if err != nil {
			return &transport.PeerError{Op: "connect", Peer: a.from, Err: err}
		}
		mu.Lock()
		peers[a.from] = p
		mu.Unlock()
		left--
	}
	return nil
}

// handshakeTimeout bounds each handshake exchange.
var handshakeTimeout = 10 * time.Second

// serverHandshake authenticates c when there is a secret, then reads its
// handshake and claims its rank. Every read is bounded in size and by
// handshakeTimeout (or ctx's end, whichever is first).
func (l *Listener) serverHandshake(ctx context.Context, c *net.TCPConn, claimed []bool, mu *sync.Mutex) (int, error) {
	d := time.Now().Add(handshakeTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	_ = c.SetDeadline(d)
	abort := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if abort() {
			_ = c.SetDeadline(time.Time{})
		}
	}()
	cfg := l.cfg
	if cfg.Key != nil {
		if err := auth.Server(c, cfg.Key, cfg.authContext(cfg.Rank)); err != nil {
			return 0, err
		}
	}
	msg, err := readMsg(c)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errHandshake, err)
	}
	h, err := wire.UnmarshalHandshake(msg)
	if err != nil {
		_, _ = c.Write([]byte{1})
		return 0, fmt.Errorf("%w: %w", errHandshake, err)
	}
	reject := func(why string) (int, error) {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte{1})
		return 0, fmt.Errorf("%w: %s (group %q, rank %d to rank %d of %d)", errHandshake, why, h.Group, h.FromRank, h.ToRank, h.WorldSize)
	}
	switch {
	case h.Session != cfg.Session || h.Group != cfg.Group:
		return reject(fmt.Sprintf("different group or session (group %q)", h.Group))
	case int(h.WorldSize) != cfg.Size || int(h.ToRank) != cfg.Rank:
		return reject("addressed to another rank or group size")
	case int(h.FromRank) <= cfg.Rank || int(h.FromRank) >= cfg.Size:
		return reject(fmt.Sprintf("unexpected source rank %d", h.FromRank))
	}
	mu.Lock()
	dup := claimed[h.FromRank]
	claimed[h.FromRank] = true
	mu.Unlock()
	if dup {
		return reject(fmt.Sprintf("duplicate connection from rank %d", h.FromRank))
	}
	if _, err := c.Write([]byte{0}); err != nil {
		mu.Lock()
		claimed[h.FromRank] = false
		mu.Unlock()
		return 0, err
	}
	return int(h.FromRank), nil
}

// dial connects to rank r, trying its addresses in turn again and again
// until one answers or ctx ends.
func dial(ctx context.Context, cfg Config, r int, ep Endpoint) (*net.TCPConn, error) {
	start := time.Now()
	derr := &DialError{Rank: cfg.Rank, Peer: r, Host: ep.Host, Port: ep.Port}
	if len(ep.Addrs) == 0 {
		derr.Err = errNoAddress
		return nil, derr
	}
	hs := (&wire.Handshake{Magic: wire.Magic, Version: wire.Version, Session: cfg.Session, Group: cfg.Group,
		FromRank: int32(cfg.Rank), ToRank: int32(r), WorldSize: int32(cfg.Size)}).Marshal()
	derr.Tries = make([]Try, len(ep.Addrs))
	for i, a := range ep.Addrs {
		derr.Tries[i] = Try{Addr: a, Iface: ep.iface(i)}
	}
	backoff := 10 * time.Millisecond
	for {
		for i, a := range ep.Addrs {
			c, err := tryDial(ctx, net.JoinHostPort(a, strconv.Itoa(ep.Port)), hs, cfg.Key, cfg.authContext(r))
			if err == nil {
				return c, nil
			}
			// Keep what the address said before over a try cut short by
			// the end of ctx ("i/o timeout", "canceled").
			if derr.Tries[i].Err == nil || ctx.Err() == nil && !cutShort(ctx, err) {
				derr.Tries[i].Err = err
			}
			if errors.Is(err, errHandshake) || errors.Is(err, auth.ErrAuth) {
				derr.Tries = derr.Tries[i : i+1]
				derr.Err, derr.After = errHandshake, time.Since(start)
				if errors.Is(err, auth.ErrAuth) {
					derr.Err = err
				}
				return nil, derr
			}
		}
		select {
		case <-ctx.Done():
			derr.Err, derr.After = transport.ErrTimeout, time.Since(start)
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) { // another rank failed, or the group closed
				derr.Err = ctx.Err()
			}
			return nil, derr
		case <-time.After(backoff):
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

// cutShort reports whether err is the timeout of a try that ran into
// ctx's deadline (which the dialer can see before ctx reports it).
func cutShort(ctx context.Context, err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// tryDial connects to addr, authenticates with k if there is a secret, and
// sends the handshake hs.
func tryDial(ctx context.Context, addr string, hs []byte, k *auth.Key, actx string) (*net.TCPConn, error) {
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
	if k != nil {
		if err := auth.Client(c, k, actx); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := writeMsg(c, hs); err != nil {
		c.Close()
		return nil, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		c.Close()
		return nil, err
	}
	if ack[0] == auth.Refusal[0] && k == nil {
		c.Close()
		return nil, &auth.Error{Side: "client", Reason: auth.Refused,
			Err: fmt.Errorf("the peer at %s requires %s and this rank has none", addr, auth.Env)}
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
