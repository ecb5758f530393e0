package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawConn is a hand-driven client connection for server tests.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, srv *TCPServer, validate bool) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(srv.Port()), 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	c := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
	if validate {
		c.send(rqValidate())
	}
	return c
}

func (c *rawConn) send(reqs ...request) {
	c.t.Helper()
	var b []byte
	for _, r := range reqs {
		b = appendRequest(b, r)
	}
	_, err := c.nc.Write(b)
	require.NoError(c.t, err)
}

func (c *rawConn) read(n int) []byte {
	c.t.Helper()
	b := make([]byte, n)
	_, err := io.ReadFull(c.br, b)
	require.NoError(c.t, err)
	return b
}

// closedByServer reports whether the server closed the connection (EOF or
// reset) within the connection deadline.
func (c *rawConn) closedByServer() bool {
	_, err := c.br.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isConnReset(err)
}

func isConnReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

func TestTCPServerPortZero(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, ServerOptions{})
	assert.NotZero(t, srv.Port())
	assert.Equal(t, srv.Port(), srv.Addr().(*net.TCPAddr).Port)

	// NewTCPStore as master on port 0 reports the bound port too.
	m, err := NewTCPStore(bg(t), TCPStoreOptions{IsMaster: true, Server: ServerOptions{Addr: "127.0.0.1:0"}, WorldSize: 1})
	require.NoError(t, err)
	defer m.Close()
	assert.NotZero(t, m.Port())
	assert.Equal(t, m.Server().Port(), m.Port())
	require.NoError(t, m.Set(bg(t), "k", []byte("v")))
}

func TestTCPServerHandshake(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, ServerOptions{})
	t.Run("missing_validate_closes", func(t *testing.T) {
		c := dialRaw(t, srv, false)
		c.send(request{cmd: cmdPing, u32: 1})
		assert.True(t, c.closedByServer())
	})
	t.Run("wrong_magic_closes", func(t *testing.T) {
		c := dialRaw(t, srv, false)
		c.send(request{cmd: cmdValidate, u32: 1})
		assert.True(t, c.closedByServer())
	})
	t.Run("split_messages_and_ping", func(t *testing.T) {
		c := dialRaw(t, srv, false)
		var b []byte
		b = appendRequest(b, rqValidate())
		b = appendRequest(b, request{cmd: cmdPing, u32: uint32(os.Getpid())})
		b = appendRequest(b, rqSet("/k", "value"))
		b = appendRequest(b, rqKey(cmdGet, "/k"))
		for i := range b { // one byte per write
			_, err := c.nc.Write(b[i : i+1])
			require.NoError(t, err)
		}
		assert.Equal(t, uint32(os.Getpid()), binary.LittleEndian.Uint32(c.read(4)))
		assert.Equal(t, rS("value"), c.read(8+5))
	})
	t.Run("pipelined_replies_in_order", func(t *testing.T) {
		c := dialRaw(t, srv, true)
		c.send(rqSet("/p", "1"), rqAdd("/p", 1), rqKey(cmdGet, "/p"), request{cmd: cmdPing, u32: 9}, rqBare(cmdCancelWait))
		assert.Equal(t, hexBytes(rI(2), rS("2"), binary.LittleEndian.AppendUint32(nil, 9), rB(waitCanceled)), c.read(8+9+4+1))
	})
}

func TestTCPServerBadRequestsCloseOnlyThatConnection(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, ServerOptions{MaxKeyLen: 64, MaxValueLen: 1024})
	good := newTestClient(t, srv)
	ctx := bg(t)
	tests := []struct {
		name  string
		bytes []byte
		close bool // close our side after sending (truncated request)
	}{
		{"garbage_command", []byte{0xEE, 1, 2, 3}, false},
		{"oversized_key", hexBytes([]byte{3}, u64le(65)), false},
		{"oversized_value", hexBytes([]byte{1}, u64le(2), []byte("/k"), u64le(1<<40)), false},
		{"huge_key_count", hexBytes([]byte{10}, u64le(1<<60)), false},
		{"non_numeric_add", hexBytes(appendRequest(nil, rqSet("/n", "x")), appendRequest(nil, rqAdd("/n", 1))), false},
		{"truncated_then_eof", hexBytes([]byte{1}, u64le(2), []byte("/k"), u64le(10), []byte("abc")), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, srv, true)
			_, err := c.nc.Write(tc.bytes)
			require.NoError(t, err)
			if tc.close {
				require.NoError(t, c.nc.(*net.TCPConn).CloseWrite())
			}
			assert.True(t, c.closedByServer())
			// Other clients are unaffected.
			require.NoError(t, good.Set(ctx, "still", []byte(tc.name)))
			v, err := good.Get(ctx, "still")
			require.NoError(t, err)
			assert.Equal(t, tc.name, string(v))
		})
	}
	assert.Eventually(t, func() bool { return srv.numConns() == 1 }, 5*time.Second, time.Millisecond)
}

func TestTCPServerDisconnectMidWait(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, ServerOptions{})
	c := dialRaw(t, srv, true)
	c.send(rqKeys(cmdWait, "/a", "/b"))
	require.Eventually(t, func() bool { return srv.numWaiting() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.nc.Close())
	require.Eventually(t, func() bool { return srv.numWaiting() == 0 && srv.numConns() == 0 }, 5*time.Second, time.Millisecond)
	srv.mu.Lock()
	assert.Empty(t, srv.state.waiters)
	srv.mu.Unlock()
	// Writing the awaited keys later wakes nobody and breaks nothing.
	cl := newTestClient(t, srv)
	require.NoError(t, cl.MultiSet(bg(t), []string{"a", "b"}, [][]byte{nil, nil}))
	ok, err := cl.Check(bg(t), []string{"a", "b"})
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestTCPServerClose(t *testing.T) {
	t.Parallel()
	srv, err := NewTCPServer(ServerOptions{Addr: "127.0.0.1:0"})
	require.NoError(t, err)
	cl := newTestClient(t, srv)
	raw := dialRaw(t, srv, true)
	errc := make(chan error, 1)
	go func() { _, err := cl.Get(context.Background(), "never"); errc <- err }()
	require.Eventually(t, func() bool { return srv.numWaiting() == 1 }, 5*time.Second, time.Millisecond)

	done := make(chan error, 1)
	go func() { done <- srv.Close() }() // waits for every server goroutine
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	require.ErrorIs(t, <-errc, ErrConnLost) // the pending Get fails at once
	assert.True(t, raw.closedByServer())
	assert.Zero(t, srv.numConns())
	_, err = net.DialTimeout("tcp", srv.Addr().String(), time.Second)
	assert.Error(t, err, "listener still open")
	require.NoError(t, srv.Close()) // idempotent
}

func TestTCPServerBackpressure(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, ServerOptions{})
	c := dialRaw(t, srv, true)
	val := bytes.Repeat([]byte("v"), 1<<20)
	c.send(request{cmd: cmdSet, keys: []string{"/big"}, values: [][]byte{val}})
	const n = 24 // 24 MiB of replies, far above the high-water mark
	go func() {
		for range n {
			if _, err := c.nc.Write(appendRequest(nil, rqKey(cmdGet, "/big"))); err != nil {
				return
			}
		}
	}()
	for i := range n {
		got := c.read(8 + len(val))
		require.Equal(t, uint64(len(val)), binary.LittleEndian.Uint64(got), "reply %d", i)
	}
}

func TestTCPServerWriteTimeoutDropsStalledReader(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, ServerOptions{WriteTimeout: 100 * time.Millisecond})
	c := dialRaw(t, srv, true)
	require.NoError(t, c.nc.(*net.TCPConn).SetReadBuffer(4096))
	val := bytes.Repeat([]byte("v"), 1<<20)
	c.send(request{cmd: cmdSet, keys: []string{"/big"}, values: [][]byte{val}})
	go func() {
		for range 64 {
			if _, err := c.nc.Write(appendRequest(nil, rqKey(cmdGet, "/big"))); err != nil {
				return
			}
		}
	}()
	// We never read: the server must give up on us rather than block forever.
	assert.Eventually(t, func() bool { return srv.numConns() == 0 }, 10*time.Second, 5*time.Millisecond)
}
