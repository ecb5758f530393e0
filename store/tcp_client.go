package store

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/auth"
)

// TCPStoreOptions configures NewTCPStore. The zero value connects to
// 127.0.0.1:0, which is only useful with IsMaster.
type TCPStoreOptions struct {
	// Host and Port locate the server. Host "" means "127.0.0.1". With
	// IsMaster and Port 0 the client uses the port the server bound.
	Host string
	Port int

	// IsMaster starts a TCPServer in this process, listening on all
	// interfaces at Port (or on Server.Addr / Server.Listener if set), that
	// the store owns and closes.
	IsMaster bool
	Server   ServerOptions

	// WorldSize > 0 makes the client register with ADD "init/" 1 after
	// connecting, as every torch TCPStore with a world size does; a torch
	// master waits for WorldSize such registrations.
	WorldSize int

	// NoWaitForWorkers stops a master from waiting until "init/" reaches
	// WorldSize (torch's wait_for_workers=False). The wait uses Timeout, with
	// 0 meaning no limit other than ctx, as in torch.
	NoWaitForWorkers bool

	// Timeout is the default timeout of operations and of connecting. 0
	// means DefaultTimeout; use SetTimeout(0) for torch's "waits fail at
	// once" behaviour.
	Timeout time.Duration

	// LegacyServer says the server is torch's classic backend
	// (use_libuv=False / USE_LIBUV=0), which closes the connection on queue
	// commands. Queue operations then fail with ErrNotSupported without
	// sending anything, like torch's client-side guard.
	LegacyServer bool

	// Key, if set, is the job secret's store key (auth.Store): the client
	// authenticates on every connection before its first request. A master
	// also gives it to its server unless Server.Key is set.
	Key *auth.Key

	// dial replaces net.Dialer in tests.
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

// replyLimits bounds what the client accepts in a reply (garbage lengths
// must not make it allocate without bound). Requests are checked against
// torch libuv's limits instead (see wire).
var replyLimits = limits{maxKeyLen: 1 << 20, maxValueLen: 1 << 30, maxKeys: 1 << 26}

// cancelGrace bounds the CANCEL_WAIT exchange after a wait ends.
const cancelGrace = 10 * time.Second

// TCPStore is a Store backed by a TCPStore server (torch's or godist's)
// through one connection, with torch's client semantics: user keys go on the
// wire as "/"+key; Get is WAIT then GET; a wait that times out is withdrawn
// with CANCEL_WAIT and the connection stays usable. One request is in flight
// at a time; concurrent callers queue, each bounded by its own deadline.
// Only commands 0–17 are ever sent (BARRIER, 18, exists only in torch
// ≥ 2.12 servers; use the package-level Barrier instead).
//
// A timeout of 0 (SetTimeout(0)) makes waits fail at once unless the keys
// already exist, like torch's TCPStore. Other replies are read with the
// operation's deadline (DefaultTimeout if the timeout is 0).
//
// If the connection breaks (for example the server closed it after an ADD on
// a non-numeric value), the operation fails with ErrConnLost and the next
// operation dials again (without registering "init/" again).
type TCPStore struct {
	addr    string
	opts    TCPStoreOptions
	timeout atomic.Int64 // time.Duration
	server  *TCPServer   // owned when master

	sem    chan struct{} // one operation at a time
	connMu sync.Mutex    // guards conn (Close reads it)
	conn   net.Conn      // nil: dial on next operation
	br     *bufio.Reader // reader of conn; guarded by sem
	wbuf   []byte        // request scratch; guarded by sem

	closed    chan struct{}
	life      context.Context // cancelled by Close: aborts a dial in progress
	kill      context.CancelFunc
	closeOnce sync.Once
}

var _ Store = (*TCPStore)(nil)

// newClient returns an unconnected client.
func newClient(addr string, opts TCPStoreOptions) *TCPStore {
	t := &TCPStore{addr: addr, opts: opts, sem: make(chan struct{}, 1), closed: make(chan struct{})}
	t.life, t.kill = context.WithCancel(context.Background())
	t.timeout.Store(int64(opts.Timeout))
	return t
}

// NewTCPStore connects to (and with IsMaster first starts) a TCPStore
// server, retrying the connection until ctx's deadline or the timeout; then
// registers under "init/" if WorldSize > 0 and, for a master, waits for the
// other workers. On error nothing is left open.
func NewTCPStore(ctx context.Context, opts TCPStoreOptions) (*TCPStore, error) {
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	t := newClient("", opts)
	port := opts.Port
	if opts.IsMaster {
		so := opts.Server
		if so.Key == nil {
			so.Key = opts.Key
		}
		if so.Addr == "" && so.Listener == nil {
			so.Addr = ":" + strconv.Itoa(opts.Port)
		}
		srv, err := NewTCPServer(so)
		if err != nil {
			return nil, err
		}
		t.server = srv
		port = srv.Port()
	}
	t.addr = net.JoinHostPort(opts.Host, strconv.Itoa(port))
	if err := t.start(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// start connects, registers and waits for workers.
func (t *TCPStore) start(ctx context.Context) error {
	var err error
	if t.opts.WorldSize > 0 {
		_, err = t.addRaw(ctx, initKey, 1)
	} else {
		err = t.session(ctx, "connect", nil, func(*sess) error { return nil })
	}
	if err != nil || !t.opts.IsMaster || t.opts.NoWaitForWorkers || t.opts.WorldSize <= 0 {
		return err
	}
	return t.waitForWorkers(ctx)
}

// waitForWorkers polls "init/" every 10 ms until it reaches WorldSize, like
// torch's master.
func (t *TCPStore) waitForWorkers(ctx context.Context) error {
	d := newDeadline(ctx, t.Timeout(), true)
	for {
		n, err := t.addRaw(ctx, initKey, 0)
		if err != nil {
			return err
		}
		if n >= int64(t.opts.WorldSize) {
			return nil
		}
		if err := d.sleep(ctx, nil, 10*time.Millisecond, t.closed); err != nil {
			if err == errWaitDeadline {
				return &TimeoutError{Op: "wait_for_workers", After: d.after,
					Detail: fmt.Sprintf("%d/%d clients joined", n, t.opts.WorldSize)}
			}
			return t.opErr("wait_for_workers", nil, err)
		}
	}
}

// addRaw sends ADD on a raw wire key (used for "init/").
func (t *TCPStore) addRaw(ctx context.Context, wireKey string, delta int64) (int64, error) {
	var n int64
	err := t.do(ctx, "add", []string{wireKey}, request{cmd: cmdAdd, keys: []string{wireKey}, num: delta},
		func(d *decoder) (err error) { n, err = d.i64(); return err })
	return n, err
}

// Addr returns the server address the client connects to.
func (t *TCPStore) Addr() string { return t.addr }

// Port returns the server port (the bound port for a master).
func (t *TCPStore) Port() int {
	_, p, _ := net.SplitHostPort(t.addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Server returns the server this store runs, or nil if it is not a master.
func (t *TCPStore) Server() *TCPServer { return t.server }

// Timeout returns the default timeout.
func (t *TCPStore) Timeout() time.Duration { return time.Duration(t.timeout.Load()) }

// SetTimeout sets the default timeout (client side only, as in torch).
func (t *TCPStore) SetTimeout(d time.Duration) { t.timeout.Store(int64(d)) }

// Close closes the connection (interrupting a pending operation, which
// fails with ErrClosed) and, for a master, the server. It is idempotent.
func (t *TCPStore) Close() error {
	var err error
	t.closeOnce.Do(func() {
		close(t.closed)
		t.kill()
		t.connMu.Lock()
		if t.conn != nil {
			t.conn.Close()
		}
		t.connMu.Unlock()
		if t.server != nil {
			err = t.server.Close()
		}
	})
	return err
}

// Clone returns a new client on its own connection to the same server (no
// "init/" registration; it does not own the server).
func (t *TCPStore) Clone(ctx context.Context) (Store, error) {
	if isClosed(t.closed) {
		return nil, t.opErr("clone", nil, ErrClosed)
	}
	o := t.opts
	o.IsMaster, o.WorldSize = false, 0
	o.Port = t.Port()
	o.Timeout = t.Timeout()
	c := newClient(t.addr, o)
	if err := c.start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ioDeadline is the deadline for a non-waiting exchange.
func (t *TCPStore) ioDeadline(ctx context.Context) deadline {
	to := t.Timeout()
	if to <= 0 {
		to = DefaultTimeout
	}
	return newDeadline(ctx, to, false)
}

func (t *TCPStore) opErr(op string, keys []string, err error) error {
	var te *TimeoutError
	if errors.As(err, &te) {
		return err
	}
	return &OpError{Store: "tcp", Op: op, Keys: keys, Addr: t.addr, Err: err}
}

// lock takes the one-operation semaphore, giving up at d, on ctx or Close.
func (t *TCPStore) lock(ctx context.Context, d deadline) error {
	select {
	case t.sem <- struct{}{}:
		return nil
	default:
	}
	var timer <-chan time.Time
	if d.has {
		tm := time.NewTimer(time.Until(d.at))
		defer tm.Stop()
		timer = tm.C
	}
	select {
	case t.sem <- struct{}{}:
		return nil
	case <-t.closed:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	case <-timer:
		return errWaitDeadline
	}
}

// ensureConn dials and handshakes if there is no connection. Called with
// the semaphore held.
func (t *TCPStore) ensureConn(ctx context.Context) error {
	t.connMu.Lock()
	have := t.conn != nil
	t.connMu.Unlock()
	if have {
		return nil
	}
	d := t.ioDeadline(ctx)
	backoff := 20 * time.Millisecond
	var last error
	for {
		conn, err := t.dialOnce(ctx, d)
		if err == nil {
			t.connMu.Lock()
			select {
			case <-t.closed:
				t.connMu.Unlock()
				conn.Close()
				return ErrClosed
			default:
			}
			t.conn = conn
			t.br = bufio.NewReaderSize(conn, 64<<10)
			t.connMu.Unlock()
			return nil
		}
		if errors.Is(err, auth.ErrAuth) { // final: another try would fail alike
			return err
		}
		last = err
		wait := time.Duration(float64(backoff) * (0.5 + rand.Float64()))
		backoff = min(backoff*3/2, time.Second)
		if err := d.sleep(ctx, nil, wait, t.closed); err != nil {
			if err == errWaitDeadline {
				return &TimeoutError{Op: "connect", After: d.after, Detail: fmt.Sprintf("%s: %v", t.addr, last)}
			}
			return err
		}
	}
}

// dialOnce connects and performs VALIDATE and PING.
func (t *TCPStore) dialOnce(ctx context.Context, d deadline) (net.Conn, error) {
	dctx, cancel := context.WithDeadline(ctx, d.at)
	defer cancel()
	stopDial := context.AfterFunc(t.life, cancel)
	defer stopDial()
	var conn net.Conn
	var err error
	if t.opts.dial != nil {
		conn, err = t.opts.dial(dctx, t.addr)
	} else {
		var nd net.Dialer
		conn, err = nd.DialContext(dctx, "tcp", t.addr)
	}
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(d.at)
	stop := context.AfterFunc(dctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if t.opts.Key != nil {
		if err := auth.Client(conn, t.opts.Key, ""); err != nil {
			conn.Close()
			return nil, err
		}
	}
	// VALIDATE must be one write (libuv mishandles a split one); PING follows.
	nonce := uint32(os.Getpid())
	if _, err = conn.Write(appendRequest(nil, request{cmd: cmdValidate, u32: validationMagic})); err == nil {
		_, err = conn.Write(appendRequest(nil, request{cmd: cmdPing, u32: nonce}))
	}
	var echo [4]byte
	if err == nil {
		_, err = readFull(conn, echo[:])
	}
	if err == nil && t.opts.Key == nil && string(echo[:]) == string(auth.Refusal) {
		err = &auth.Error{Side: "client", Reason: auth.Refused,
			Err: fmt.Errorf("the store server at %s requires %s and this client has none", t.addr, auth.Env)}
	}
	if err == nil && binary.LittleEndian.Uint32(echo[:]) != nonce {
		err = errf(ErrProtocol, "ping failed: expected %d, got %d", nonce, binary.LittleEndian.Uint32(echo[:]))
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

func readFull(conn net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := conn.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// dropConn closes and forgets the connection after an error left it in an
// unknown state. Called with the semaphore held.
func (t *TCPStore) dropConn() {
	t.connMu.Lock()
	if t.conn != nil {
		t.conn.Close()
		t.conn = nil
		t.br = nil
	}
	t.connMu.Unlock()
}

// sess is one operation's hold on the connection.
type sess struct {
	conn   net.Conn
	io     deadline // deadline for non-waiting exchanges
	mu     sync.Mutex
	disarm bool // set: ctx cancellation no longer touches conn
}

// disarmCtx stops ctx cancellation from changing the connection's
// deadlines; after it returns, the deadlines are the caller's to set.
func (s *sess) disarmCtx() {
	s.mu.Lock()
	s.disarm = true
	s.mu.Unlock()
}

// session runs f with the semaphore held, a live connection, and ctx
// cancellation wired to the connection's deadlines. It maps errors: a
// closed store gives ErrClosed, a deadline a *TimeoutError, other I/O
// errors ErrConnLost (after dropping the connection).
func (t *TCPStore) session(ctx context.Context, op string, keys []string, f func(s *sess) error) error {
	if isClosed(t.closed) {
		return t.opErr(op, keys, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return t.opErr(op, keys, err)
	}
	d := t.ioDeadline(ctx)
	if err := t.lock(ctx, d); err != nil {
		if err == errWaitDeadline {
			return d.timeout(op, keys)
		}
		return t.opErr(op, keys, err)
	}
	defer func() { <-t.sem }()
	if err := t.ensureConn(ctx); err != nil {
		return t.opErr(op, keys, err)
	}
	s := &sess{conn: t.conn, io: d}
	_ = s.conn.SetDeadline(d.at)
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		if !s.disarm {
			_ = s.conn.SetDeadline(time.Unix(1, 0))
		}
		s.mu.Unlock()
	})
	err := f(s)
	stop()
	if err == nil {
		return nil
	}
	var te *TimeoutError
	switch {
	case errors.As(err, &te):
		return err
	case isClosed(t.closed):
		t.dropConn()
		return t.opErr(op, keys, ErrClosed)
	case errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) || errors.Is(err, context.Canceled):
		return t.opErr(op, keys, err)
	}
	t.dropConn()
	if errors.Is(err, ErrProtocol) {
		return t.opErr(op, keys, err)
	}
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return d.timeout(op, keys)
		}
		return t.opErr(op, keys, ctx.Err())
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return d.timeout(op, keys)
	}
	return t.opErr(op, keys, fmt.Errorf("%w: %w", ErrConnLost, err))
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// send writes one request. Called inside session.
func (t *TCPStore) send(conn net.Conn, req request) error {
	t.wbuf = appendRequest(t.wbuf[:0], req)
	_, err := conn.Write(t.wbuf)
	if cap(t.wbuf) > 1<<20 {
		t.wbuf = nil
	}
	return err
}

// do sends req and, if read is not nil, reads its reply with read.
func (t *TCPStore) do(ctx context.Context, op string, keys []string, req request, read func(d *decoder) error) error {
	return t.session(ctx, op, keys, func(s *sess) error {
		if err := t.send(s.conn, req); err != nil {
			return err
		}
		if read == nil {
			return nil
		}
		return read(newReplyDecoder(t.br))
	})
}

// waitKeys sends WAIT for wire keys and waits for STOP_WAITING until wd
// (ctx's deadline, else the timeout; a 0 timeout means now), withdrawing the wait
// with CANCEL_WAIT if it ends first. Called inside session. On success the
// connection's deadline is left at least cancelGrace ahead, for the reply
// that follows.
func (t *TCPStore) waitKeys(ctx context.Context, s *sess, wd deadline, op string, userKeys, wireKeys []string) error {
	if err := t.send(s.conn, request{cmd: cmdWait, keys: wireKeys}); err != nil {
		return err
	}
	s.mu.Lock()
	_ = s.conn.SetReadDeadline(wd.at)
	if ctx.Err() != nil && !s.disarm {
		_ = s.conn.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()
	b, err := t.br.ReadByte()
	s.disarmCtx()
	_ = s.conn.SetDeadline(later(s.io.at, time.Now().Add(cancelGrace)))
	if err == nil {
		if b != waitStop {
			return errf(ErrProtocol, "WAIT reply %d, want %d", b, waitStop)
		}
		return nil
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || isClosed(t.closed) {
		return err
	}
	// The wait ended (deadline or ctx): withdraw it. A STOP_WAITING that
	// crossed the CANCEL_WAIT on the wire means the keys did arrive.
	ready, cerr := t.cancelWait(s.conn)
	if cerr != nil {
		return cerr
	}
	if ready {
		return nil
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return wd.timeout(op, userKeys)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// cancelWait sends CANCEL_WAIT and reads WAIT_CANCELED, first draining a
// STOP_WAITING that was already on its way (ready reports that).
func (t *TCPStore) cancelWait(conn net.Conn) (ready bool, err error) {
	if err := t.send(conn, request{cmd: cmdCancelWait}); err != nil {
		return false, err
	}
	b, err := t.br.ReadByte()
	if err != nil {
		return false, err
	}
	if b == waitStop {
		ready = true
		if b, err = t.br.ReadByte(); err != nil {
			return false, err
		}
	}
	if b != waitCanceled {
		return false, errf(ErrProtocol, "CANCEL_WAIT reply %d, want %d", b, waitCanceled)
	}
	return ready, nil
}
