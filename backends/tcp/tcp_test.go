package tcp

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/glog"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/transport/transporttest"
)

// connectLoopback builds a full mesh of n TCP transports on 127.0.0.1.
func connectLoopback(t *testing.T, n int) []*Transport {
	t.Helper()
	lns := make([]*Listener, n)
	eps := make([]Endpoint, n)
	for r := range lns {
		ln, err := Listen(Config{Rank: r, Size: n, Session: 42, Group: "t", Hosts: []string{"127.0.0.1"}})
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

// TestTCPConformanceHelping: the same suite with waiters that read the
// sockets themselves (Transport.Help) while the reader goroutines also run.
func TestTCPConformanceHelping(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, n int) []transport.Transport {
		trs := connectLoopback(t, n)
		out := make([]transport.Transport, n)
		for i, tr := range trs {
			tr.SetSpin(time.Second)
			out[i] = tr
		}
		return out
	})
}

// TestHelpAndReaderInterleave: a stream of messages of every size class
// (inside the read buffer, straddling it, read straight into place, some
// arriving before their receive is posted) from two senders, received in
// order by a waiter that reads the sockets itself part of the time; every
// byte must land where it belongs.
func TestHelpAndReaderInterleave(t *testing.T) {
	trs := connectLoopback(t, 3)
	trs[0].SetSpin(50 * time.Microsecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sizes := []int{0, 1, 23, 24, 25, 1000, readBufSize - 24, readBufSize, readBufSize + 7, directMin - 1, directMin, 3*readBufSize + 5, 1 << 20}
	const rounds = 6
	fill := func(src, i, n int) []byte {
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(src*131 + i*7 + k)
		}
		return b
	}
	total := rounds * len(sizes)
	var sent [3]atomic.Int64 // messages each sender has sent
	var wg sync.WaitGroup
	for _, src := range []int{1, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sent[src].Store(int64(total)) // also when it gave up
			for i := 0; i < total; i++ {
				if err := trs[src].Send(ctx, 0, transport.P2PTag(int64(src)), fill(src, i, sizes[i%len(sizes)])); err != nil {
					t.Error(err)
					return
				}
				sent[src].Store(int64(i + 1))
				if i%5 == 0 {
					time.Sleep(200 * time.Microsecond) // jitter: some receives wait
				}
			}
		}()
	}
	for i := 0; i < total; i++ {
		for _, src := range []int{1, 2} {
			n := sizes[i%len(sizes)]
			buf := make([]byte, n)
			r := trs[0].PostRecv(src, transport.P2PTag(int64(src)), buf)
			require.NoError(t, r.Wait(ctx))
			require.Equal(t, fill(src, i, n), buf, "message %d from %d (%d bytes)", i, src, n)
		}
		if i%7 == 0 {
			// The next two messages of each sender are sent before their
			// receives are posted.
			want := int64(min(i+3, total))
			testutil.Eventually(t, 10*time.Second, func() bool { return sent[1].Load() >= want && sent[2].Load() >= want },
				"the senders did not get ahead of the receives")
		}
	}
	wg.Wait()
}

// TestHelpNoLostWakeup: ping-pong with waiters that give up reading the
// socket after a few microseconds, so they often let go just as bytes
// arrive; the reader goroutine must still deliver every message (a lost
// wake-up shows as a receive that times out).
func TestHelpNoLostWakeup(t *testing.T) {
	trs := connectLoopback(t, 2)
	for _, tr := range trs {
		tr.SetSpin(3 * time.Microsecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const rounds = 5000
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for i := 0; i < rounds; i++ {
			if err := trs[1].PostRecv(0, transport.P2PTag(0), buf).Wait(ctx); err != nil {
				done <- err
				return
			}
			if err := trs[1].Send(ctx, 0, transport.P2PTag(1), buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, 4096)
	for i := 0; i < rounds; i++ {
		r := trs[0].PostRecv(1, transport.P2PTag(1), buf)
		require.NoError(t, trs[0].Send(ctx, 1, transport.P2PTag(0), buf))
		require.NoError(t, r.Wait(ctx), "round %d", i)
	}
	require.NoError(t, <-done)
}

// TestHelpSeesPeerLoss: a waiter reading the socket itself when the peer
// dies gets the connection error, and so do later receives.
func TestHelpSeesPeerLoss(t *testing.T) {
	trs := connectLoopback(t, 2)
	trs[0].SetSpin(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := trs[0].PostRecv(1, transport.P2PTag(0), make([]byte, 8))
	go func() {
		if !testutil.WaitUntil(10*time.Second, func() bool { return trs[0].peers[1].helpers.Load() > 0 }) {
			t.Error("the waiter never read the socket itself")
		}
		trs[1].Abort(errors.New("killed"))
	}()
	require.ErrorIs(t, r.Wait(ctx), transport.ErrConnLost)
	require.ErrorIs(t, trs[0].PostRecv(1, transport.P2PTag(1), make([]byte, 8)).Wait(ctx), transport.ErrConnLost)
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

// TestSendAfterThirdPeerLoss: rank 2's connection is lost. Every receive
// of ranks 0 and 1 fails, and a send to rank 2 fails at once, but rank 0
// can still send to rank 1 (the farewell that says why it leaves the
// group), and rank 1 receives it.
func TestSendAfterThirdPeerLoss(t *testing.T) {
	trs := connectLoopback(t, 3)
	trs[2].Abort(errors.New("killed"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { return trs[0].mb.Err() != nil }, 5*time.Second, time.Millisecond)
	err := trs[0].Send(ctx, 2, transport.P2PTag(5), []byte("why"))
	require.ErrorIs(t, err, transport.ErrConnLost)
	var pe *transport.PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 2, pe.Peer)
	require.NoError(t, trs[0].Send(ctx, 1, transport.P2PTag(5), []byte("why")))
	buf := make([]byte, 3)
	require.Eventually(t, func() bool {
		r := trs[1].PostRecv(0, transport.P2PTag(5), buf)
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer wcancel()
		err := r.Wait(wctx)
		r.Cancel(transport.ErrClosed)
		return err == nil
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, "why", string(buf))
}

// TestSendFailureKeepsOtherPeers: a send to rank 2 fails on a broken
// connection; the group is broken (receives fail) but rank 0 still reaches
// rank 1. A failed write used to abort every connection of the transport.
func TestSendFailureKeepsOtherPeers(t *testing.T) {
	trs := connectLoopback(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	trs[0].BreakPeer(2)
	err := trs[0].Send(ctx, 2, transport.P2PTag(5), make([]byte, 1<<20))
	require.Error(t, err)
	var pe *transport.PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 2, pe.Peer)
	require.Error(t, trs[0].PostRecv(1, transport.P2PTag(6), make([]byte, 1)).Wait(ctx), "the group is broken")
	require.NoError(t, trs[0].Send(ctx, 1, transport.P2PTag(5), []byte("why")))
	buf := make([]byte, 3)
	require.NoError(t, trs[1].PostRecv(0, transport.P2PTag(5), buf).Wait(ctx))
	require.Equal(t, "why", string(buf))
}

func TestHandshakeRejectsStrangers(t *testing.T) {
	ln, err := Listen(Config{Rank: 0, Size: 2, Session: 7, Group: "g", Hosts: []string{"127.0.0.1"}})
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

// TestStrangersHoldUpNoRank: connections that send nothing, or half a
// handshake, wait in the accept queue ahead of the real peer. The peer
// still gets in at once (handshakes used to be read one connection at a
// time, for up to handshakeTimeout each, so a silent stranger failed the
// group's setup); the strangers are closed once the group formed, and
// every refused connection is logged.
func TestStrangersHoldUpNoRank(t *testing.T) {
	glog.Reset()
	ln, err := Listen(Config{Rank: 0, Size: 2, Session: 7, Group: "g", Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	port := ln.Port()
	var strangers []net.Conn
	for _, first := range [][]byte{nil, {100, 0, 0, 0, 1}, []byte("GET / HTTP/1.0\r\n\r\n")} {
		c, err := net.Dial("tcp", "127.0.0.1:"+itoa(port))
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(first)
		require.NoError(t, err)
		strangers = append(strangers, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		tr, err := ln.Connect(ctx, []Endpoint{{Addrs: []string{"127.0.0.1"}, Port: port}, {}})
		if tr != nil {
			t.Cleanup(func() { tr.Abort(transport.ErrClosed) })
		}
		done <- err
	}()
	c, err := dial(ctx, Config{Rank: 1, Size: 2, Session: 7, Group: "g"}, 0, Endpoint{Addrs: []string{"127.0.0.1"}, Port: port})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, <-done)
	// Not a handshake timeout (10 s) nor a redial (5 s).
	require.Less(t, time.Since(start), 3*time.Second)
	for i, s := range strangers {
		_ = s.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := s.Read(make([]byte, 1))
		require.Zero(t, n, "stranger %d", i)
		require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "stranger %d was not closed", i)
	}
	var refused int
	for _, r := range glog.Drain(0, func(glog.Record) bool { return true }) {
		if strings.Contains(r.Msg, "refused a connection") {
			refused++
		}
	}
	require.Equal(t, len(strangers), refused)
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
	putHeader(&b, header{kind: kindData, tag: transport.CollTag(7, 1), n: 4096, st: sampleStamp()})
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		var hb [headerSize]byte
		copy(hb[:], in)
		h, err := parseHeader(&hb)
		if err == nil && h.n > maxPayload {
			t.Fatalf("accepted oversized payload %d", h.n)
		}
		if err != nil {
			return
		}
		// What parses re-encodes to the same header.
		var again [headerSize]byte
		putHeader(&again, h)
		h2, err := parseHeader(&again)
		if err != nil || h2 != h {
			t.Fatalf("re-encoded %+v parses as %+v, %v", h, h2, err)
		}
	})
}

func sampleStamp() transport.Stamp {
	return transport.Stamp{Seq: 7, Op: transport.OpAllReduce, DType: 2, RedOp: 0, Root: -1, Count: 1024, Detail: 0xabcd}
}

// TestHeaderStamp: a collective's data frame carries its stamp; other
// frames carry none, whatever their reserved bytes hold.
func TestHeaderStamp(t *testing.T) {
	var b [headerSize]byte
	st := sampleStamp()
	st.Send, st.Recv = 3, math.MaxUint64
	for _, tag := range []transport.Tag{transport.CollTag(7, 3), transport.OffloadTag(9, 0)} {
		putHeader(&b, header{kind: kindData, tag: tag, n: 64, st: st})
		h, err := parseHeader(&b)
		require.NoError(t, err)
		require.Equal(t, header{kind: kindData, tag: tag, n: 64, st: st}, h)
	}
	putHeader(&b, header{kind: kindData, tag: transport.P2PTag(5), n: 8, st: st})
	h, err := parseHeader(&b)
	require.NoError(t, err)
	require.Equal(t, transport.Stamp{}, h.st, "a point-to-point frame has no stamp")
	putHeader(&b, header{kind: kindData, tag: transport.CollTag(7, 3), n: 8})
	require.Equal(t, make([]byte, 5), b[3:8])
	require.Equal(t, make([]byte, 40), b[24:])
}

// TestDesyncOverTCP: a rank that runs another collective than the sender
// of a message fails its receive with a DesyncError naming both calls,
// and hears of it through SetOnDesync.
func TestDesyncOverTCP(t *testing.T) {
	trs := connectLoopback(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mine := &transport.Call{Stamp: sampleStamp(), Rank: 1}
	theirs := &transport.Call{Stamp: sampleStamp(), Rank: 0}
	theirs.Op, theirs.Root, theirs.RedOp = transport.OpBroadcast, 0, transport.NoRedOp
	got := make(chan *transport.DesyncError, 1)
	trs[1].SetOnDesync(func(de *transport.DesyncError) { got <- de })
	require.Nil(t, trs[1].Track(mine))
	r := trs[1].PostRecv(0, transport.CollTag(7, 0), make([]byte, 4096))
	require.NoError(t, trs[0].Send(transport.WithCall(ctx, theirs), 1, transport.CollTag(7, 2), make([]byte, 4096)))
	err := r.Wait(ctx)
	var de *transport.DesyncError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "rank 1 called all_reduce(float32[1024], SUM) where rank 0 called broadcast(float32[1024], root=0)", de.Error())
	require.Equal(t, de, <-got)
	// Point-to-point traffic still flows.
	p := trs[1].PostRecv(0, transport.P2PTag(1), make([]byte, 8))
	require.NoError(t, trs[0].Send(ctx, 1, transport.P2PTag(1), make([]byte, 8)))
	require.NoError(t, p.Wait(ctx))
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestThirdPeerLossFailsWaiter: rank 1 waits for rank 0 (reading rank 0's
// socket itself) when rank 2 dies; the wait fails with rank 2's lost
// connection at once, not when rank 0 next does something.
func TestThirdPeerLossFailsWaiter(t *testing.T) {
	for _, spin := range []time.Duration{0, 200 * time.Microsecond} {
		trs := connectLoopback(t, 3)
		for _, tr := range trs {
			tr.SetSpin(spin)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// Rank 1 has read from rank 2 as a waiter before.
		for i := 0; i < 20; i++ {
			r := trs[1].PostRecv(2, transport.P2PTag(0), make([]byte, 8))
			require.NoError(t, trs[2].Send(ctx, 1, transport.P2PTag(0), make([]byte, 8)))
			require.NoError(t, r.Wait(ctx))
		}
		r := trs[1].PostRecv(0, transport.P2PTag(1), make([]byte, 8))
		errc := make(chan error, 1)
		go func() { errc <- r.Wait(ctx) }()
		testutil.Eventually(t, 10*time.Second, func() bool { return trs[1].peers[0].helpers.Load() > 0 },
			"rank 1 never read rank 0's socket itself")
		start := time.Now()
		trs[2].Abort(errors.New("killed"))
		err := <-errc
		require.ErrorIs(t, err, transport.ErrConnLost, "spin %v", spin)
		require.Less(t, time.Since(start), 5*time.Second, "spin %v", spin) // well before the 10 s deadline it would otherwise meet
		require.Contains(t, err.Error(), "rank 2")
		cancel()
	}
}

// TestExchangeWhileReadersRest: two ranks each send the other a message
// far larger than a socket holds before either posts its receive, while
// their reader goroutines rest (a linger of an hour): each send, waiting
// for room, must kick the reader of the socket the other's bytes fill, and
// a third rank's idle socket must not get in the way.
func TestExchangeWhileReadersRest(t *testing.T) {
	old := linger
	t.Cleanup(func() { linger = old }) // runs after the transports close
	linger = time.Hour
	trs := connectLoopback(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 32 << 20
	msg := func(r int) []byte {
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(r*77 + k/4096)
		}
		return b
	}
	for round := 0; round < 3; round++ {
		errs := make([]error, 2)
		got := make([][]byte, 2)
		var wg sync.WaitGroup
		for r := 0; r < 2; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if errs[r] = trs[r].Send(ctx, 1-r, transport.P2PTag(int64(round)), msg(r)); errs[r] != nil {
					return
				}
				got[r] = make([]byte, n)
				errs[r] = trs[r].PostRecv(1-r, transport.P2PTag(int64(round)), got[r]).Wait(ctx)
			}()
		}
		wg.Wait()
		for r := 0; r < 2; r++ {
			require.NoError(t, errs[r], "round %d rank %d", round, r)
			require.Equal(t, msg(1-r), got[r], "round %d rank %d", round, r)
		}
	}
}

// TestCancelMidFrameAfterSilence: a receive whose message stopped
// arriving halfway (a cut link: no reset, no more bytes) is canceled at
// its deadline; breaking the connection must fail the half-read delivery
// so that the cancel returns, whichever goroutine was reading.
func TestCancelMidFrameAfterSilence(t *testing.T) {
	trs := connectLoopback(t, 2)
	const n = 1 << 20
	r := trs[0].PostRecv(1, transport.P2PTag(0), make([]byte, n))
	var hdr [headerSize]byte
	putHeader(&hdr, header{kind: kindData, tag: transport.P2PTag(0), n: n})
	part := append(hdr[:], make([]byte, 4096)...)
	require.NoError(t, trs[1].peers[0].sk.write(part, time.Now().Add(5*time.Second), nil))
	rd := trs[0].peers[1].rd
	testutil.Eventually(t, 5*time.Second, func() bool {
		rd.role.Lock()
		defer rd.role.Unlock()
		return rd.inFrame
	}, "the receiver reading the frame")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Wait(ctx) }()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the canceled receive never returned")
	}
}
