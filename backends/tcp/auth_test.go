package tcp

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/auth"
	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/glog"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// listenGroup opens n listeners on loopback with key.
func listenGroup(t *testing.T, n int, key *auth.Key) ([]*Listener, []Endpoint) {
	t.Helper()
	lns := make([]*Listener, n)
	eps := make([]Endpoint, n)
	for r := range lns {
		ln, err := Listen(Config{Rank: r, Size: n, Session: 42, Group: "t", Hosts: []string{"127.0.0.1"}, Key: key})
		require.NoError(t, err)
		lns[r] = ln
		eps[r] = Endpoint{Addrs: []string{"127.0.0.1"}, Port: ln.Port()}
	}
	return lns, eps
}

// connectAll runs Connect on every listener and returns the errors. With
// first set, rank 0 connects alone until first returns, then the others
// join it.
func connectAll(t *testing.T, lns []*Listener, eps []Endpoint, within time.Duration, first func()) ([]*Transport, []error) {
	t.Helper()
	trs := make([]*Transport, len(lns))
	errs := make([]error, len(lns))
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var wg sync.WaitGroup
	for r := range lns {
		if r == 1 && first != nil {
			first()
		}
		wg.Add(1)
		go func() { defer wg.Done(); trs[r], errs[r] = lns[r].Connect(ctx, eps) }()
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range trs {
			if tr != nil {
				wg.Add(1)
				go func() { defer wg.Done(); tr.Close() }()
			}
		}
		wg.Wait()
	})
	return trs, errs
}

// logs drains glog's queue.
func logs() []glog.Record {
	var out []glog.Record
	for {
		recs := glog.Drain(0, func(glog.Record) bool { return true })
		if len(recs) == 0 {
			return out
		}
		out = append(out, recs...)
	}
}

// warned reports the warnings of recs that contain every part.
func warned(recs []glog.Record, parts ...string) []string {
	var out []string
next:
	for _, r := range recs {
		for _, p := range parts {
			if !strings.Contains(r.Msg, p) || r.Level != glog.Warning {
				continue next
			}
		}
		out = append(out, r.Msg)
	}
	return out
}

// stranger dials addr until stop, speaking as f says. It adds 1 to queued
// once it holds its first connection.
func stranger(addr string, stop <-chan struct{}, tries, queued *atomic.Int64, f func(c net.Conn)) {
	first := true
	for {
		select {
		case <-stop:
			return
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			time.Sleep(time.Millisecond) // a pause before dialling again, not an ordering
			continue
		}
		if first {
			first = false
			queued.Add(1)
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		f(c)
		c.Close()
		tries.Add(1)
	}
}

func TestAuthGroupConnectsWhileStrangersHammer(t *testing.T) {
	glog.Reset()
	key := auth.NewKey([]byte("right"), auth.Transport)
	lns, eps := listenGroup(t, 3, key)
	stop := make(chan struct{})
	var tries, queued atomic.Int64
	var wg sync.WaitGroup
	wrong := auth.NewKey([]byte("wrong"), auth.Transport)
	cfg := Config{Group: "t", Size: 3}
	for _, r := range []int{0, 1} {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(eps[r].Port))
		wg.Add(3)
		go func() { // wrong secret
			defer wg.Done()
			stranger(addr, stop, &tries, &queued, func(c net.Conn) { _ = auth.Client(c, wrong, cfg.authContext(r)) })
		}()
		go func() { // no secret: a bare handshake
			defer wg.Done()
			hs := (&wire.Handshake{Magic: wire.Magic, Version: wire.Version, Session: 42, Group: "t", FromRank: 2,
				ToRank: int32(r), WorldSize: 3}).Marshal()
			stranger(addr, stop, &tries, &queued, func(c net.Conn) { _ = writeMsg(c, hs); _, _ = c.Read(make([]byte, 8)) })
		}()
		go func() { // silent: holds a connection open
			defer wg.Done()
			stranger(addr, stop, &tries, &queued, func(c net.Conn) { _, _ = c.Read(make([]byte, 1)) })
		}()
	}
	// Every stranger holds a connection before anyone accepts.
	testutil.Eventually(t, 5*time.Second, func() bool { return queued.Load() == 6 }, "six strangers connected")
	start := time.Now()
	trs, errs := connectAll(t, lns, eps, 10*time.Second, nil)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.Less(t, took, 5*time.Second, "a silent stranger held up the group")
	// The mesh works.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { _ = trs[2].Send(ctx, 0, transport.P2PTag(2), []byte("hi")) }()
	buf := make([]byte, 2)
	require.NoError(t, trs[0].PostRecv(2, transport.P2PTag(2), buf).Wait(ctx))
	require.Equal(t, "hi", string(buf))
	t.Logf("connected in %v while strangers made %d tries", took, tries.Load())
	recs := logs()
	require.NotEmpty(t, warned(recs, "refused a connection from 127.0.0.1", string(auth.WrongSecret)))
	require.NotEmpty(t, warned(recs, "refused a connection from 127.0.0.1", string(auth.NoAuth)))
}

func TestAuthWrongSecretRankFails(t *testing.T) {
	glog.Reset()
	lns := make([]*Listener, 2)
	eps := make([]Endpoint, 2)
	for r, secret := range []string{"right", "wrong"} {
		ln, err := Listen(Config{Rank: r, Size: 2, Session: 42, Group: "t", Hosts: []string{"127.0.0.1"},
			Key: auth.NewKey([]byte(secret), auth.Transport)})
		require.NoError(t, err)
		lns[r], eps[r] = ln, Endpoint{Addrs: []string{"127.0.0.1"}, Port: ln.Port()}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() { _, _ = lns[0].Connect(ctx, eps) }()
	_, err := lns[1].Connect(ctx, eps)
	require.Error(t, err)
	require.True(t, errors.Is(err, auth.ErrAuth), "%v", err)
	require.Contains(t, err.Error(), "authentication failed")
	require.Contains(t, err.Error(), string(auth.WrongSecret))
	require.Less(t, time.Since(start), 2*time.Second, "a wrong secret is not worth retrying")
	require.Eventually(t, func() bool { return len(warned(logs(), "rank 0", string(auth.WrongSecret))) > 0 }, 2*time.Second, 10*time.Millisecond)
}

func TestAuthMissingSecretRankFails(t *testing.T) {
	lns := make([]*Listener, 2)
	eps := make([]Endpoint, 2)
	for r, key := range []*auth.Key{auth.NewKey([]byte("right"), auth.Transport), nil} {
		ln, err := Listen(Config{Rank: r, Size: 2, Session: 42, Group: "t", Hosts: []string{"127.0.0.1"}, Key: key})
		require.NoError(t, err)
		lns[r], eps[r] = ln, Endpoint{Addrs: []string{"127.0.0.1"}, Port: ln.Port()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() { _, _ = lns[0].Connect(ctx, eps) }()
	_, err := lns[1].Connect(ctx, eps)
	require.True(t, errors.Is(err, auth.ErrAuth), "%v", err)
	require.Contains(t, err.Error(), auth.Env)
}

func TestNoSecretRefusesStrangersAndServes(t *testing.T) {
	glog.Reset()
	lns, eps := listenGroup(t, 3, nil)
	for r := range lns {
		lns[r].SetSession(42)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(eps[0].Port))
	var sent atomic.Int64
	for _, h := range []wire.Handshake{
		{Session: 41, Group: "t", FromRank: 1, ToRank: 0, WorldSize: 3}, // another job's token
		{Session: 42, Group: "u", FromRank: 1, ToRank: 0, WorldSize: 3}, // another group
		{Session: 42, Group: "t", FromRank: 5, ToRank: 0, WorldSize: 9}, // not a rank of the group
		{Session: 42, Group: "t", FromRank: 0, ToRank: 0, WorldSize: 3}, // not a higher rank
	} {
		h.Magic, h.Version = wire.Magic, wire.Version
		go func() {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				t.Errorf("stranger: %v", err)
				sent.Add(1)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_ = writeMsg(c, h.Marshal())
			sent.Add(1)
			_, _ = c.Read(make([]byte, 1))
		}()
	}
	// Every stranger's handshake waits in rank 0's queue before it accepts,
	// and rank 0 has refused all four before the others dial it (once the
	// group forms, a handshake still in progress is refused for that
	// reason instead).
	testutil.Eventually(t, 5*time.Second, func() bool { return sent.Load() == 4 }, "four strangers' handshakes sent")
	var recs []glog.Record
	start := time.Now()
	_, errs := connectAll(t, lns, eps, 10*time.Second, func() {
		testutil.Eventually(t, 5*time.Second, func() bool {
			recs = append(recs, logs()...)
			return len(warned(recs, "rank 0 ", "refused a connection")) == 4
		}, "rank 0 to refuse the four strangers")
	})
	t.Logf("connected in %v", time.Since(start))
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.NotEmpty(t, warned(recs, "refused a connection", "different group or session"))
	require.NotEmpty(t, warned(recs, "refused a connection", "unexpected source rank"))
}

// BenchmarkConnectAuth measures a 3-rank mesh's setup with and without a
// secret.
func BenchmarkConnectAuth(b *testing.B) {
	for _, tc := range []struct {
		name string
		key  *auth.Key
	}{{"nosecret", nil}, {"secret", auth.NewKey([]byte("s"), auth.Transport)}} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				t := &testing.T{}
				lns, eps := listenGroup(t, 3, tc.key)
				trs := make([]*Transport, 3)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var wg sync.WaitGroup
				for r := range lns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var err error
						if trs[r], err = lns[r].Connect(ctx, eps); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
				cancel()
				b.StopTimer()
				for _, tr := range trs {
					wg.Add(1)
					go func() { defer wg.Done(); tr.Close() }()
				}
				wg.Wait()
				b.StartTimer()
			}
		})
	}
}
