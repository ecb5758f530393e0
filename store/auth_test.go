package store

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/auth"
	"github.com/godist/godist/libgodist/glog"
)

// lockedLog collects a server's log lines.
type lockedLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(strings.ReplaceAll(format, "%v", "")))
	for _, a := range args {
		if e, ok := a.(error); ok {
			l.lines[len(l.lines)-1] += " " + e.Error()
		}
	}
}

func (l *lockedLog) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.lines {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

func dialStore(port int, key *auth.Key, within time.Duration) (*TCPStore, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return NewTCPStore(ctx, TCPStoreOptions{Port: port, WorldSize: 1, Timeout: within, Key: key})
}

func TestStoreAuth(t *testing.T) {
	glog.Reset()
	key := auth.NewKey([]byte("right"), auth.Store)
	var log lockedLog
	srv, err := NewTCPServer(ServerOptions{Addr: "127.0.0.1:0", Key: key, Logf: log.logf, Warnf: glog.Warnf})
	require.NoError(t, err)
	defer srv.Close()

	good, err := dialStore(srv.Port(), key, 5*time.Second)
	require.NoError(t, err)
	defer good.Close()
	ctx := context.Background()
	require.NoError(t, good.Set(ctx, "k", []byte("v")))

	// Wrong secret: refused at once, with an error naming authentication.
	start := time.Now()
	_, err = dialStore(srv.Port(), auth.NewKey([]byte("wrong"), auth.Store), 5*time.Second)
	require.True(t, errors.Is(err, auth.ErrAuth), "%v", err)
	require.Contains(t, err.Error(), "wrong secret")
	require.Less(t, time.Since(start), 2*time.Second)

	// No secret (what a torch client also does: VALIDATE first).
	_, err = dialStore(srv.Port(), nil, 5*time.Second)
	require.True(t, errors.Is(err, auth.ErrAuth), "%v", err)
	require.Contains(t, err.Error(), auth.Env)

	// Garbage and a silent stranger.
	c, err := net.Dial("tcp", srv.Addr().String())
	require.NoError(t, err)
	_, _ = c.Write([]byte("GDA1 but not really a nonce, and then some more bytes than that"))
	c.Close()
	silent, err := net.Dial("tcp", srv.Addr().String())
	require.NoError(t, err)
	defer silent.Close()

	// The server goes on serving the right clients.
	again, err := dialStore(srv.Port(), key, 5*time.Second)
	require.NoError(t, err)
	defer again.Close()
	v, err := again.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
	require.NoError(t, good.Set(ctx, "k2", []byte("v2")))

	require.Eventually(t, func() bool {
		return log.has(string(auth.WrongSecret)) && log.has(string(auth.NoAuth)) && log.has(string(auth.Malformed))
	}, 5*time.Second, 10*time.Millisecond)
	var warned int
	for _, r := range glog.Drain(0, func(glog.Record) bool { return true }) {
		if r.Level == glog.Warning && strings.Contains(r.Msg, "store server refused a connection from 127.0.0.1") {
			warned++
		}
	}
	require.Positive(t, warned)

	// Close does not wait for the silent stranger's deadline.
	start = time.Now()
	require.NoError(t, srv.Close())
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestStoreAuthMaster(t *testing.T) {
	key := auth.NewKey([]byte("right"), auth.Store)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := NewTCPStore(ctx, TCPStoreOptions{Host: "127.0.0.1", IsMaster: true, WorldSize: 2, Timeout: 5 * time.Second,
		NoWaitForWorkers: true, Key: key})
	require.NoError(t, err)
	defer m.Close()
	w, err := dialStore(m.Port(), key, 5*time.Second)
	require.NoError(t, err)
	defer w.Close()
	n, err := m.Add(ctx, "c", 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	cl, err := w.Clone(ctx)
	require.NoError(t, err)
	defer cl.Close()
	n, err = cl.Add(ctx, "c", 1)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

func TestStoreClientSecretServerWithout(t *testing.T) {
	srv := newTestServer(t, ServerOptions{})
	_, err := dialStore(srv.Port(), auth.NewKey([]byte("x"), auth.Store), 5*time.Second)
	require.True(t, errors.Is(err, auth.ErrAuth), "%v", err)
	require.Contains(t, err.Error(), "did not authenticate")
}
