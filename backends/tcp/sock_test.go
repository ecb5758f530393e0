package tcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/transport"
)

// sockPair is two connected socks (a Unix stream socket pair).
func sockPair(t *testing.T) (*sock, *sock) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	a, err := sockFromFD(fds[0])
	require.NoError(t, err)
	b, err := sockFromFD(fds[1])
	require.NoError(t, err)
	t.Cleanup(func() { a.release(); b.release() })
	return a, b
}

// readN reads exactly n bytes from s, sleeping in poll while it is empty.
func readN(t *testing.T, s *sock, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	deadline := time.Now().Add(10 * time.Second)
	for got := 0; got < n; {
		k, err := s.read(out[got:])
		require.NoError(t, err)
		got += k
		if k == 0 {
			ok, err := s.waitReadable(deadline)
			require.NoError(t, err)
			require.True(t, ok, "timed out with %d of %d bytes", got, n)
		}
	}
	return out
}

// TestFramesPaddedTo64: every frame takes a multiple of 64 bytes on the
// wire: the header, the payload, then zeros (docs/wire.md), also when it
// is written in pieces smaller than its header, its padding or its payload
// (each sendmsg then gathers a piece that spans the parts' borders).
func TestFramesPaddedTo64(t *testing.T) {
	var cases [][2]int // payload bytes, piece size
	for _, n := range []int{0, 1, 24, 63, 64, 65, 16<<10 - 1, 16<<10 + 1, 3*writeChunk + 7} {
		cases = append(cases, [2]int{n, writeChunk})
	}
	for _, chunk := range []int{1, 7, 64, 100, 4096} {
		for _, n := range []int{0, 1, 63, 65, 5000} {
			cases = append(cases, [2]int{n, chunk})
		}
	}
	for _, c := range cases {
		n, chunk := c[0], c[1]
		t.Run(fmt.Sprintf("n=%d/chunk=%d", n, chunk), func(t *testing.T) {
			a, b := sockPair(t)
			var hdr [headerSize]byte
			putHeader(&hdr, header{kind: kindData, tag: 7, n: uint64(n)})
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i*7 + 1)
			}
			errc := make(chan error, 1)
			go func() { errc <- a.writeFrame(hdr[:], payload, chunk, time.Now().Add(10*time.Second), nil) }()
			wire := n + padding(n)
			require.Zero(t, wire%frameAlign)
			got := readN(t, b, headerSize+wire)
			require.NoError(t, <-errc)
			var hb [headerSize]byte
			copy(hb[:], got)
			h, err := parseHeader(&hb)
			require.NoError(t, err)
			require.Equal(t, uint64(n), h.n)
			require.True(t, bytes.Equal(payload, got[headerSize:headerSize+n]), "payload differs")
			require.Equal(t, make([]byte, wire-n), got[headerSize+n:], "padding is not zero")
			k, err := b.read(make([]byte, 1))
			require.NoError(t, err)
			require.Zero(t, k, "bytes after the padding")
		})
	}
}

// TestMixedSizesInOrder: frames of every padding length and of both write
// paths, back to back, reach their receives intact, whether the receives
// wait (read straight in) or come late (stored, then copied), with
// waiters that spin and waiters that sleep at once.
func TestMixedSizesInOrder(t *testing.T) {
	// Small and empty frames after large ones too: the reader then reads
	// the next header alone (reader.lean), padding first.
	sizes := []int{0, 1, 5, 63, 64, 65, 100, 16<<10 - 1, 16<<10 + 1, 256<<10 + 3, 1<<20 + 64, 2<<20 + 1,
		7, 64 << 10, 0, 3, 70<<10 + 5, 1, 64<<10 - 1, 64<<10 + 1, 64 << 10}
	for _, spin := range []time.Duration{0, 200 * time.Microsecond} {
		for _, late := range []bool{false, true} {
			t.Run(fmt.Sprintf("spin=%v/late=%v", spin, late), func(t *testing.T) {
				trs := connectLoopback(t, 2)
				for _, tr := range trs {
					tr.SetSpin(spin)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				bufs := make([][]byte, len(sizes))
				rs := make([]*transport.Recv, len(sizes))
				if !late {
					for i, n := range sizes {
						bufs[i] = make([]byte, n)
						rs[i] = trs[1].PostRecv(0, transport.P2PTag(int64(i)), bufs[i])
					}
				}
				for i, n := range sizes {
					msg := make([]byte, n)
					for j := range msg {
						msg[j] = byte(i + j*3)
					}
					require.NoError(t, trs[0].Send(ctx, 1, transport.P2PTag(int64(i)), msg))
				}
				if late {
					// A last message, received first: frames are read in
					// order, so every one before it has arrived, with no
					// receive, by the time it has.
					marker := transport.P2PTag(int64(len(sizes)))
					require.NoError(t, trs[0].Send(ctx, 1, marker, []byte{1}))
					require.NoError(t, trs[1].PostRecv(0, marker, make([]byte, 1)).Wait(ctx))
					for i := len(sizes) - 1; i >= 0; i-- {
						bufs[i] = make([]byte, sizes[i])
						rs[i] = trs[1].PostRecv(0, transport.P2PTag(int64(i)), bufs[i])
						select {
						case <-rs[i].Done(): // stored: copied out at once
						default:
							t.Fatalf("size %d: not stored before its receive was posted", sizes[i])
						}
					}
				}
				for i, n := range sizes {
					require.NoError(t, rs[i].Wait(ctx), "size %d", n)
					for j := range bufs[i] {
						if bufs[i][j] != byte(i+j*3) {
							t.Fatalf("size %d: byte %d is %d, want %d", n, j, bufs[i][j], byte(i+j*3))
						}
					}
				}
			})
		}
	}
}

// TestSleepingWaiterWakesOnBreak: a waiter asleep in poll(2) on its socket
// (no spin) wakes with an error when the connection is broken locally,
// and one asleep when the peer goes away wakes too.
func TestSleepingWaiterWakesOnBreak(t *testing.T) {
	for _, how := range []string{"break", "peer-abort"} {
		t.Run(how, func(t *testing.T) {
			trs := connectLoopback(t, 2)
			trs[1].SetSpin(0)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r := trs[1].PostRecv(0, transport.P2PTag(1), make([]byte, 8))
			errc := make(chan error, 1)
			go func() { errc <- r.Wait(ctx) }()
			testutil.Eventually(t, 10*time.Second, func() bool {
				return goroutineIn("syscall", "tcp.pollUntil(", "tcp.TestSleepingWaiterWakesOnBreak")
			}, "the waiter never slept in poll(2)")
			start := time.Now()
			if how == "break" {
				trs[1].BreakPeer(0)
			} else {
				trs[0].Abort(transport.ErrClosed)
			}
			select {
			case err := <-errc:
				require.ErrorIs(t, err, transport.ErrConnLost)
				require.Less(t, time.Since(start), 2*time.Second)
			case <-time.After(10 * time.Second):
				t.Fatal("the sleeping waiter did not wake")
			}
		})
	}
}

// TestSockAfterRelease: calls on a released sock fail with net.ErrClosed,
// and release and shut are idempotent.
func TestSockAfterRelease(t *testing.T) {
	a, b := sockPair(t)
	a.shut()
	a.shut()
	_, err := a.read(make([]byte, 4))
	require.ErrorIs(t, err, net.ErrClosed)
	require.ErrorIs(t, a.write([]byte{1}, time.Time{}, nil), net.ErrClosed)
	a.release()
	a.release()
	_, err = a.waitReadable(time.Time{})
	require.ErrorIs(t, err, net.ErrClosed)
	// The other side sees the end of the stream.
	ok, err := b.waitReadable(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.True(t, ok)
	_, err = b.read(make([]byte, 4))
	require.ErrorIs(t, err, io.EOF)
}

// TestWriteDeadline: a write into a full socket that no one reads ends
// with a deadline error at its deadline.
func TestWriteDeadline(t *testing.T) {
	a, _ := sockPair(t)
	start := time.Now()
	err := a.write(make([]byte, 64<<20), time.Now().Add(200*time.Millisecond), nil)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second)
	require.ErrorIs(t, describe(err), transport.ErrTimeout)
}

// TestWaitAllOverTCP: transport.WaitAll on receives from several peers
// reads all their sockets on the waiting goroutine (HelpGroup), with and
// without spinning, for small and large messages sent late; a peer that
// dies meanwhile fails the wait instead of hanging it.
func TestWaitAllOverTCP(t *testing.T) {
	for _, spin := range []time.Duration{0, 200 * time.Microsecond} {
		t.Run(fmt.Sprint(spin), func(t *testing.T) {
			trs := connectLoopback(t, 4)
			for _, tr := range trs {
				tr.SetSpin(spin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for round, n := range []int{8, 3 << 20} {
				bufs := make([][]byte, 4)
				var rs []*transport.Recv
				for p := 1; p < 4; p++ {
					bufs[p] = make([]byte, n+p)
					rs = append(rs, trs[0].PostRecv(p, transport.P2PTag(int64(round)), bufs[p]))
				}
				for p := 1; p < 4; p++ {
					go func(p int) {
						// Late, one at a time: once rank 0 waits for this
						// peer in WaitAll, reading its socket itself, and
						// has the previous peer's message.
						if !testutil.WaitUntil(10*time.Second, func() bool {
							if p > 1 {
								select {
								case <-rs[p-2].Done():
								default:
									return false
								}
							}
							return trs[0].peers[p].helpers.Load() > 0
						}) {
							t.Errorf("round %d: rank 0 never waited for peer %d", round, p)
						}
						msg := bytes.Repeat([]byte{byte(p + round)}, n+p)
						_ = trs[p].Send(ctx, 0, transport.P2PTag(int64(round)), msg)
					}(p)
				}
				require.NoError(t, transport.WaitAll(ctx, rs))
				for p := 1; p < 4; p++ {
					require.True(t, bytes.Equal(bytes.Repeat([]byte{byte(p + round)}, n+p), bufs[p]), "peer %d", p)
				}
			}
			// Peer 3 dies while rank 0 waits for 1, 2 and 3.
			var rs []*transport.Recv
			for p := 1; p < 4; p++ {
				rs = append(rs, trs[0].PostRecv(p, transport.P2PTag(9), make([]byte, 4)))
			}
			go func() {
				if !testutil.WaitUntil(10*time.Second, func() bool { return trs[0].peers[3].helpers.Load() > 0 }) {
					t.Error("rank 0 never waited for peer 3")
				}
				trs[3].Abort(transport.ErrClosed)
			}()
			start := time.Now()
			err := transport.WaitAll(ctx, rs)
			require.ErrorIs(t, err, transport.ErrConnLost)
			require.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

// TestParkWakesOnDataAndBreak: a goroutine parked in the network poller
// (park) wakes when bytes arrive, when the peer hangs up and when the
// socket is shut locally, leaves the bytes in the socket, and can park
// again (the descriptor it registers is its own).
func TestParkWakesOnDataAndBreak(t *testing.T) {
	park := func(s *sock) <-chan error {
		c := make(chan error, 1)
		go func() { c <- s.park() }()
		return c
	}
	wait := func(c <-chan error) error {
		select {
		case err := <-c:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("park did not return")
			return nil
		}
	}
	a, b := sockPair(t)
	for i := 0; i < 3; i++ {
		c := park(b)
		select {
		case err := <-c:
			t.Fatalf("park returned (%v) with nothing to read", err)
		case <-time.After(20 * time.Millisecond):
		}
		require.NoError(t, a.write([]byte{byte(i)}, time.Time{}, nil))
		require.NoError(t, wait(c))
		require.NoError(t, wait(park(b)), "bytes still unread: park returns at once")
		require.Equal(t, []byte{byte(i)}, readN(t, b, 1))
	}
	// The peer hangs up: readable (end of stream).
	c := park(b)
	a.release()
	require.NoError(t, wait(c))
	_, err := b.read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	// Shut locally while parked.
	x, y := sockPair(t)
	_ = x
	c = park(y)
	testutil.Eventually(t, 10*time.Second, func() bool {
		return goroutineIn("IO wait", "tcp.(*sock).park(", "tcp.TestParkWakesOnDataAndBreak")
	}, "park never waited in the poller")
	y.shut()
	require.ErrorIs(t, wait(c), net.ErrClosed)
	require.ErrorIs(t, y.park(), net.ErrClosed)
}

// rcvLowat reads a socket's SO_RCVLOWAT.
func rcvLowat(t *testing.T, s *sock) int {
	t.Helper()
	v, err := syscall.GetsockoptInt(s.fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	require.NoError(t, err)
	return v
}

// TestLowWaterMark: while a large payload is partly read, the socket's
// receive low-water mark is raised to what is left of it (at most
// rcvLowatMax), so a sleeping reader wakes for large pieces; once the
// frame is complete the mark is back to 1 byte, and a small message after
// it still wakes a waiter asleep in poll(2).
func TestLowWaterMark(t *testing.T) {
	trs := connectLoopback(t, 2) // no spin: waiters sleep in poll(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 3 << 20
	msg := make([]byte, n)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	buf := make([]byte, n)
	r := trs[1].PostRecv(0, transport.P2PTag(1), buf)
	done := make(chan error, 1)
	go func() { done <- r.Wait(ctx) }()

	// The frame by hand: header and the first 512 KiB, then a pause.
	tx, rx := trs[0].peers[1].sk, trs[1].peers[0].sk
	var hdr [headerSize]byte
	putHeader(&hdr, header{kind: kindData, tag: transport.P2PTag(1), n: n})
	first := 512 << 10
	require.NoError(t, tx.writeParts([][]byte{hdr[:], msg[:first]}, n, time.Time{}, nil))
	want := min(n-first, rcvLowatMax)
	testutil.Eventually(t, 10*time.Second, func() bool { return rcvLowat(t, rx) == want }, fmt.Sprintf("low-water mark not raised to %d", want))
	require.NoError(t, tx.writeParts([][]byte{msg[first:], zeroPad[:padding(n)]}, n, time.Time{}, nil))
	require.NoError(t, <-done)
	require.Equal(t, msg, buf)
	require.Equal(t, 1, rcvLowat(t, rx), "mark left raised after the frame")

	// A small message is not held back by a stale mark.
	small := make([]byte, 8)
	r2 := trs[1].PostRecv(0, transport.P2PTag(2), small)
	go func() { done <- r2.Wait(ctx) }()
	testutil.Eventually(t, 10*time.Second, func() bool {
		return goroutineIn("syscall", "tcp.pollUntil(", "tcp.TestLowWaterMark")
	}, "the waiter never slept in poll(2)")
	start := time.Now()
	require.NoError(t, trs[0].Send(ctx, 1, transport.P2PTag(2), []byte("12345678")))
	require.NoError(t, <-done)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, []byte("12345678"), small)
}
