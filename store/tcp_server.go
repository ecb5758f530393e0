package store

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/godist/godist/auth"
)

// ServerOptions configures a TCPServer. The zero value listens on an
// ephemeral port on all interfaces with torch's libuv limits.
type ServerOptions struct {
	// Addr is the listen address, "host:port". "" means ":0" (all
	// interfaces, dual-stack, ephemeral port). Ignored if Listener is set.
	Addr string

	// Listener, if set, is served instead of listening on Addr (torch's
	// master_listen_fd). The server closes it on Close.
	Listener net.Listener

	// Limits on one request; 0 means torch libuv's value (8 KiB per key,
	// 8 MiB per value, 128 Ki keys per request) and 64 MiB per request. A
	// request over a limit closes its connection.
	MaxKeyLen         int
	MaxValueLen       int
	MaxKeysPerRequest int
	MaxRequestBytes   int64

	// WriteTimeout bounds each write of replies to a connection; a client
	// that stops reading for longer is disconnected. 0 means 60 s.
	WriteTimeout time.Duration

	// Logf, if set, receives one line per dropped connection and accept
	// error. It must be safe for concurrent use.
	Logf func(format string, args ...any)

	// Warnf, if set, receives one line per connection refused for its
	// authentication (the caller's warning log). It must be safe for
	// concurrent use.
	Warnf func(format string, args ...any)

	// Key, if set, is the job secret's store key (auth.Store): every
	// connection must then authenticate before its first request is read,
	// which torch's own clients cannot do. Refusals are logged at WARNING.
	Key *auth.Key
}

// authTimeout bounds the authentication of a new connection.
var authTimeout = 10 * time.Second

// backlogHighWater is how many reply bytes may wait for a slow client
// before the server stops reading its requests.
const backlogHighWater = 4 << 20

// TCPServer is a TCPStore server that speaks torch's wire protocol, so torch
// and godist clients can both use it. It serves each connection with one
// reader goroutine (decode, apply to the shared serverState) and one writer
// goroutine (drains that connection's reply queue). A request that is
// truncated, oversized, unknown or rejected closes only its connection; a
// client that disconnects while waiting has its wait state cleared.
type TCPServer struct {
	ln           net.Listener
	lim          limits
	writeTimeout time.Duration
	logf         func(string, ...any)
	warnf        func(string, ...any)
	key          *auth.Key

	mu     sync.Mutex // guards state, conns, nextID, closed
	state  *serverState
	conns  map[connID]*serverConn
	nextID connID
	closed bool

	done      chan struct{} // closed by Close
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// NewTCPServer listens (or takes opts.Listener) and starts serving in the
// background. Stop it with Close.
func NewTCPServer(opts ServerOptions) (*TCPServer, error) {
	ln := opts.Listener
	if ln == nil {
		addr := opts.Addr
		if addr == "" {
			addr = ":0"
		}
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, &OpError{Store: "tcp-server", Op: "listen", Addr: addr, Err: err}
		}
	}
	orDefault := func(v, d int) int {
		if v > 0 {
			return v
		}
		return d
	}
	s := &TCPServer{
		ln: ln,
		lim: limits{
			maxKeyLen:   orDefault(opts.MaxKeyLen, defaultLimits.maxKeyLen),
			maxValueLen: orDefault(opts.MaxValueLen, defaultLimits.maxValueLen),
			maxKeys:     orDefault(opts.MaxKeysPerRequest, defaultLimits.maxKeys),
			maxRequest:  defaultLimits.maxRequest,
		},
		writeTimeout: opts.WriteTimeout,
		logf:         opts.Logf,
		warnf:        opts.Warnf,
		key:          opts.Key,
		state:        newServerState(),
		conns:        make(map[connID]*serverConn),
		done:         make(chan struct{}),
	}
	if opts.MaxRequestBytes > 0 {
		s.lim.maxRequest = opts.MaxRequestBytes
	}
	if s.writeTimeout <= 0 {
		s.writeTimeout = 60 * time.Second
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if s.warnf == nil {
		s.warnf = func(string, ...any) {}
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *TCPServer) Addr() net.Addr { return s.ln.Addr() }

// Port returns the port the server listens on (the bound port when it was
// asked for port 0).
func (s *TCPServer) Port() int {
	if a, ok := s.ln.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	_, p, _ := net.SplitHostPort(s.ln.Addr().String())
	n, _ := strconv.Atoi(p)
	return n
}

// Close stops the listener, closes every connection and waits for all the
// server's goroutines to exit. It is idempotent: later calls do nothing and
// return nil.
func (s *TCPServer) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.done)
		conns := make([]*serverConn, 0, len(s.conns))
		for _, c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		if cerr := s.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = &OpError{Store: "tcp-server", Op: "close", Addr: s.ln.Addr().String(), Err: cerr}
		}
		for _, c := range conns {
			c.close()
		}
		s.wg.Wait()
	})
	return err
}

func (s *TCPServer) acceptLoop() {
	defer s.wg.Done()
	backoff := time.Duration(0)
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of fds and the like: back off, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logf("store: tcp server accept: %v; retrying in %v", err, backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		if s.key == nil {
			if !s.serve(nc) {
				return
			}
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if s.authenticate(nc) {
				s.serve(nc)
			}
		}()
	}
}

// authenticate runs the server side of the auth exchange on nc, within
// authTimeout or until Close. A refused connection is logged and closed.
func (s *TCPServer) authenticate(nc net.Conn) bool {
	_ = nc.SetDeadline(time.Now().Add(authTimeout))
	stop := make(chan struct{})
	go func() {
		select {
		case <-s.done:
			_ = nc.SetDeadline(time.Unix(1, 0))
		case <-stop:
		}
	}()
	err := auth.Server(nc, s.key, "")
	close(stop)
	if err != nil {
		select {
		case <-s.done:
		default:
			s.warnf("godist: store server refused a connection from %v: %v", nc.RemoteAddr(), err)
			s.logf("store: tcp server: refused %v: %v", nc.RemoteAddr(), err)
		}
		nc.Close()
		return false
	}
	_ = nc.SetDeadline(time.Time{})
	return true
}

// serve starts serving nc; it reports false, having closed nc, if the
// server is closed.
func (s *TCPServer) serve(nc net.Conn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return false
	}
	s.nextID++
	c := &serverConn{id: s.nextID, nc: nc, srv: s, wake: make(chan struct{}, 1), drained: make(chan struct{}, 1), done: make(chan struct{})}
	s.conns[c.id] = c
	s.state.connect(c.id)
	s.wg.Add(2)
	s.mu.Unlock()
	go c.readLoop()
	go c.writeLoop()
	return true
}

// numConns returns the number of open connections (tests).
func (s *TCPServer) numConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// numWaiting returns the number of connections with a pending WAIT (tests).
func (s *TCPServer) numWaiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.numWaiting()
}

// serverConn is one client connection.
type serverConn struct {
	id  connID
	nc  net.Conn
	srv *TCPServer

	wmu     sync.Mutex // guards pending, backlog
	pending [][]byte   // replies not yet handed to the writer
	backlog int        // bytes pending or being written

	wake    chan struct{} // cap 1: pending is non-empty
	drained chan struct{} // cap 1: the writer finished a write
	done    chan struct{} // closed by close
	once    sync.Once
}

// close closes the connection once; both loops then exit.
func (c *serverConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.nc.Close()
	})
}

// enqueue queues data for the writer. Called with srv.mu held, which
// orders all outputs.
func (c *serverConn) enqueue(data []byte) {
	c.wmu.Lock()
	c.pending = append(c.pending, data)
	c.backlog += len(data)
	c.wmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *serverConn) readLoop() {
	s := c.srv
	defer s.wg.Done()
	defer func() {
		c.close()
		s.mu.Lock()
		s.state.disconnect(c.id)
		delete(s.conns, c.id)
		s.mu.Unlock()
	}()
	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		req, err := readRequest(br, s.lim)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.logf("store: tcp server: dropping %v: %v", c.nc.RemoteAddr(), err)
			}
			return
		}
		s.mu.Lock()
		outs, err := s.state.handle(c.id, &req)
		if err == nil {
			for _, o := range outs {
				if oc := s.conns[o.conn]; oc != nil {
					oc.enqueue(o.data)
				}
			}
		}
		s.mu.Unlock()
		if err != nil {
			s.logf("store: tcp server: dropping %v after %v: %v", c.nc.RemoteAddr(), req.cmd, err)
			return
		}
		// Backpressure: stop reading while too many replies are unsent.
		for c.backlogBytes() > backlogHighWater {
			select {
			case <-c.drained:
			case <-c.done:
				return
			}
		}
	}
}

func (c *serverConn) backlogBytes() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.backlog
}

func (c *serverConn) writeLoop() {
	defer c.srv.wg.Done()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.wmu.Lock()
		bufs := c.pending
		c.pending = nil
		c.wmu.Unlock()
		n := 0
		for _, b := range bufs {
			n += len(b)
		}
		if n == 0 {
			continue
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.writeTimeout))
		nb := net.Buffers(bufs)
		_, err := nb.WriteTo(c.nc)
		c.wmu.Lock()
		c.backlog -= n
		c.wmu.Unlock()
		select {
		case c.drained <- struct{}{}:
		default:
		}
		if err != nil {
			c.close()
			return
		}
	}
}
