package store

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeConn is the server end of a net.Pipe given to a TCPStore under test.
type fakeConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

// handshake reads VALIDATE and PING, each of which must arrive as one write
// (net.Pipe delivers writes as they were made), and echoes the nonce.
func (f *fakeConn) handshake(echo func(uint32) uint32) bool {
	buf := make([]byte, 64)
	n, err := f.nc.Read(buf)
	if err != nil || !assert.Equal(f.t, []byte{0x00, 0xCE, 0xF7, 0x85, 0x3C}, buf[:n], "VALIDATE in one write") {
		return false
	}
	n, err = f.nc.Read(buf)
	if err != nil || !assert.Equal(f.t, 5, n) || !assert.Equal(f.t, byte(cmdPing), buf[0]) {
		return false
	}
	nonce := binary.LittleEndian.Uint32(buf[1:5])
	assert.Equal(f.t, uint32(os.Getpid()), nonce)
	_, err = f.nc.Write(binary.LittleEndian.AppendUint32(nil, echo(nonce)))
	f.br = bufio.NewReader(f.nc)
	return err == nil
}

func (f *fakeConn) next() (request, error) { return readRequest(f.br, defaultLimits) }

func (f *fakeConn) reply(b ...byte) {
	_, err := f.nc.Write(b)
	assert.NoError(f.t, err)
}

// fakeServer returns TCPStoreOptions whose dial hands each new connection
// to script, in a goroutine, and counts dials.
func fakeServer(t *testing.T, dials *atomic.Int32, script func(n int, f *fakeConn)) TCPStoreOptions {
	return TCPStoreOptions{Port: 1, Timeout: 10 * time.Second, dial: func(ctx context.Context, addr string) (net.Conn, error) {
		n := int(dials.Add(1))
		cli, srv := net.Pipe()
		t.Cleanup(func() { srv.Close(); cli.Close() })
		go script(n, &fakeConn{t: t, nc: srv})
		return cli, nil
	}}
}

func identity(n uint32) uint32 { return n }

func TestTCPClientHandshakeAndInit(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	got := make(chan request, 1)
	opts := fakeServer(t, &dials, func(_ int, f *fakeConn) {
		if !f.handshake(identity) {
			return
		}
		req, err := f.next()
		if assert.NoError(t, err) {
			got <- req
			f.reply(rI(1)...)
		}
	})
	opts.WorldSize = 3
	c, err := NewTCPStore(bg(t), opts)
	require.NoError(t, err)
	defer c.Close()
	req := <-got
	assert.Equal(t, appendRequest(nil, rqAdd("init/", 1)), appendRequest(nil, req), `ADD "init/" 1, no leading "/"`)
}

func TestTCPClientConnectRetries(t *testing.T) {
	t.Parallel()
	t.Run("refused_then_ok", func(t *testing.T) {
		var dials atomic.Int32
		opts := fakeServer(t, &dials, func(_ int, f *fakeConn) { f.handshake(identity) })
		inner := opts.dial
		opts.dial = func(ctx context.Context, addr string) (net.Conn, error) {
			if dials.Load() < 2 {
				dials.Add(1)
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			}
			return inner(ctx, addr)
		}
		c, err := NewTCPStore(bg(t), opts)
		require.NoError(t, err)
		defer c.Close()
		assert.EqualValues(t, 3, dials.Load())
	})
	t.Run("ping_mismatch_times_out", func(t *testing.T) {
		var dials atomic.Int32
		opts := fakeServer(t, &dials, func(_ int, f *fakeConn) { f.handshake(func(n uint32) uint32 { return n + 1 }) })
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := NewTCPStore(ctx, opts)
		requireTimeout(t, err)
		var te *TimeoutError
		require.ErrorAs(t, err, &te)
		assert.Equal(t, "connect", te.Op)
		assert.Contains(t, te.Detail, "ping failed")
		assert.Greater(t, dials.Load(), int32(1), "retried")
	})
	t.Run("nothing_listening", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err = NewTCPStore(ctx, TCPStoreOptions{Port: port})
		requireTimeout(t, err)
		assert.Contains(t, err.Error(), "connect timed out")
	})
}

// TestTCPClientWaitCancel drives the CANCEL_WAIT exchange (reference §1.6).
func TestTCPClientWaitCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		reply     []byte // after CANCEL_WAIT
		wantReady bool
		wantProto bool
	}{
		{"canceled", []byte{waitCanceled}, false, false},
		{"stop_crossed_cancel", []byte{waitStop, waitCanceled}, true, false},
		{"bad_reply", []byte{7}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var dials atomic.Int32
			after := make(chan request, 1)
			opts := fakeServer(t, &dials, func(n int, f *fakeConn) {
				if !f.handshake(identity) {
					return
				}
				if n > 1 {
					_, _ = io.Copy(io.Discard, f.br) // net.Pipe writes block until read
					return
				}
				req, err := f.next()
				if !assert.NoError(t, err) || !assert.Equal(t, cmdWait, req.cmd) {
					return
				}
				assert.Equal(t, []string{"/k"}, req.keys)
				req, err = f.next()
				if !assert.NoError(t, err) || !assert.Equal(t, cmdCancelWait, req.cmd) {
					return
				}
				f.reply(tc.reply...)
				if req, err = f.next(); err == nil {
					after <- req
				}
			})
			c, err := NewTCPStore(bg(t), opts)
			require.NoError(t, err)
			defer c.Close()
			err = c.Wait(shortCtx(t), []string{"k"})
			switch {
			case tc.wantReady:
				require.NoError(t, err)
			case tc.wantProto:
				require.ErrorIs(t, err, ErrProtocol)
			default:
				requireTimeout(t, err, "k")
			}
			// The connection is still in step (or was replaced).
			require.NoError(t, c.Set(bg(t), "x", []byte("1")))
			if tc.wantProto {
				assert.EqualValues(t, 2, dials.Load(), "redialled after a desync")
				return
			}
			req := <-after
			assert.Equal(t, cmdSet, req.cmd)
			assert.EqualValues(t, 1, dials.Load())
		})
	}
}

func TestTCPClientLimitsAndGuards(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, ServerOptions{})
	c := newTestClient(t, srv)
	ctx := bg(t)
	err := c.Set(ctx, strings.Repeat("k", 8<<10), nil)
	require.ErrorIs(t, err, ErrInvalid)
	err = c.Set(ctx, "k", make([]byte, 8<<20+1))
	require.ErrorIs(t, err, ErrInvalid)
	require.NoError(t, c.Set(ctx, strings.Repeat("k", 8<<10-1), nil)) // the largest key libuv accepts
	require.Equal(t, 1, srv.numConns(), "nothing was dropped")

	legacy, err := NewTCPStore(ctx, TCPStoreOptions{Port: srv.Port(), LegacyServer: true})
	require.NoError(t, err)
	defer legacy.Close()
	require.ErrorIs(t, legacy.QueuePush(ctx, "q", nil), ErrNotSupported)
	_, err = legacy.QueuePop(ctx, "q", false)
	require.ErrorIs(t, err, ErrNotSupported)
	_, err = legacy.QueueLen(ctx, "q")
	require.ErrorIs(t, err, ErrNotSupported)
	require.NoError(t, legacy.Set(ctx, "k", nil))
}

func TestTCPStoreWaitForWorkers(t *testing.T) {
	t.Parallel()
	t.Run("all_join", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		type res struct {
			s   *TCPStore
			err error
		}
		mc := make(chan res, 1)
		go func() {
			m, err := NewTCPStore(bg(t), TCPStoreOptions{Port: port, IsMaster: true, WorldSize: 3, Server: ServerOptions{Listener: ln}})
			mc <- res{m, err}
		}()
		for range 2 {
			w, err := NewTCPStore(bg(t), TCPStoreOptions{Port: port, WorldSize: 3})
			require.NoError(t, err)
			defer w.Close()
		}
		r := <-mc
		require.NoError(t, r.err)
		defer r.s.Close()
		n, err := r.s.NumKeys(bg(t))
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, `only "init/"`)
	})
	t.Run("timeout", func(t *testing.T) {
		_, err := NewTCPStore(context.Background(), TCPStoreOptions{IsMaster: true, WorldSize: 2, Timeout: 100 * time.Millisecond,
			Server: ServerOptions{Addr: "127.0.0.1:0"}})
		requireTimeout(t, err)
		assert.Contains(t, err.Error(), "1/2 clients joined")
	})
	t.Run("no_wait", func(t *testing.T) {
		m, err := NewTCPStore(bg(t), TCPStoreOptions{IsMaster: true, WorldSize: 2, NoWaitForWorkers: true,
			Server: ServerOptions{Addr: "127.0.0.1:0"}})
		require.NoError(t, err)
		require.NoError(t, m.Close())
		require.NoError(t, m.Close())
	})
}
