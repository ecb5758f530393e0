package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// newTestServer starts a TCPServer on loopback, closed at cleanup.
func newTestServer(t *testing.T, opts ServerOptions) *TCPServer {
	t.Helper()
	if opts.Addr == "" && opts.Listener == nil {
		opts.Addr = "127.0.0.1:0"
	}
	opts.Logf = t.Logf
	srv, err := NewTCPServer(opts)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// newTestClient connects a TCPStore client (world size 1, so "init/" is
// registered) to srv.
func newTestClient(t *testing.T, srv *TCPServer) *TCPStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewTCPStore(ctx, TCPStoreOptions{Port: srv.Port(), WorldSize: 1, Timeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTCPStore(t *testing.T) {
	t.Parallel()
	runStoreSuite(t, func(t *testing.T) Store {
		return newTestClient(t, newTestServer(t, ServerOptions{}))
	}, suiteTraits{baseKeys: 1, addBadDropsConn: true, zeroTimeoutFails: true})
}
