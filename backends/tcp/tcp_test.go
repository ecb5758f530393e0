package tcp

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/transport/transporttest"
)

// connectLoopback builds a full mesh of n TCP transports on 127.0.0.1.
func connectLoopback(t *testing.T, n int) []*Transport {
	t.Helper()
	lns := make([]*Listener, n)
	eps := make([]Endpoint, n)
	for r := range lns {
		ln, err := Listen(Config{Rank: r, Size: n, Session: 42, Group: "t", BindHost: "127.0.0.1"})
		require.NoError(t, err)
		lns[r] = ln
		eps[r] = Endpoint{Addrs: []string{"127.0.0.1"}, Port: ln.Port()}
	}
	trs := make([]*Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for r := range lns {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			trs[r], errs[r] = lns[r].Connect(ctx, eps)
		}(r)
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range trs {
			wg.Add(1)
			go func() { defer wg.Done(); tr.Close() }()
		}
		wg.Wait()
	})
	return trs
}

func TestTCPConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, n int) []transport.Transport {
		trs := connectLoopback(t, n)
		out := make([]transport.Transport, n)
		for i, tr := range trs {
			out[i] = tr
		}
		return out
	})
}

func TestAbortLooksLikeDeadPeer(t *testing.T) {
	trs := connectLoopback(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := trs[0].PostRecv(2, transport.P2PTag(0), make([]byte, 4))
	trs[2].Abort(errors.New("killed"))
	err := r.Wait(ctx)
	require.ErrorIs(t, err, transport.ErrConnLost)
	var pe *transport.PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 2, pe.Peer)
}

func TestHandshakeRejectsStrangers(t *testing.T) {
	ln, err := Listen(Config{Rank: 0, Size: 2, Session: 7, Group: "g", BindHost: "127.0.0.1"})
	require.NoError(t, err)
	port := ln.Port()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		tr, err := ln.Connect(ctx, []Endpoint{{Addrs: []string{"127.0.0.1"}, Port: port}, {}})
		if tr != nil {
			tr.Close()
		}
		done <- err
	}()
	// garbage, then a handshake for another session: both dropped
	c, err := net.Dial("tcp", "127.0.0.1:"+itoa(port))
	require.NoError(t, err)
	_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.Close()
	_, err = dial(ctx, Config{Rank: 1, Size: 2, Session: 8, Group: "g"}, 0, Endpoint{Addrs: []string{"127.0.0.1"}, Port: port})
	require.ErrorIs(t, err, errHandshake)
	// the right peer still gets in
	c2, err := dial(ctx, Config{Rank: 1, Size: 2, Session: 7, Group: "g"}, 0, Endpoint{Addrs: []string{"127.0.0.1"}, Port: port})
	require.NoError(t, err)
	defer c2.Close()
	require.NoError(t, <-done)
}

func TestFrameHeaderRoundTrip(t *testing.T) {
	var b [headerSize]byte
	putHeader(&b, header{kind: kindData, tag: transport.CollTag(5, 3), n: 12345})
	h, err := parseHeader(&b)
	require.NoError(t, err)
	require.Equal(t, header{kind: kindData, tag: transport.CollTag(5, 3), n: 12345}, h)
	b[0] = 0
	_, err = parseHeader(&b)
	require.ErrorIs(t, err, errCorrupt)
}

func FuzzParseHeader(f *testing.F) {
	var b [headerSize]byte
	putHeader(&b, header{kind: kindData, tag: 1, n: 10})
	f.Add(b[:])
	f.Add(make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		var hb [headerSize]byte
		copy(hb[:], in)
		h, err := parseHeader(&hb)
		if err == nil && h.n > maxPayload {
			t.Fatalf("accepted oversized payload %d", h.n)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
