// Package transporttest is the conformance suite every godist transport
// passes: message matching, ordering, sizes, any-source receives, deadlines
// and shutdown, exercised through the transport.Transport interface only.
package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/transport"
)

// Factory builds n connected transports (index = rank) and registers their
// cleanup with t.
type Factory func(t *testing.T, n int) []transport.Transport

// Run runs the suite.
func Run(t *testing.T, newGroup Factory) {
	t.Run("FIFOPerTag", func(t *testing.T) { fifoPerTag(t, newGroup) })
	t.Run("Sizes", func(t *testing.T) { sizes(t, newGroup) })
	t.Run("AnySource", func(t *testing.T) { anySource(t, newGroup) })
	t.Run("SizeMismatch", func(t *testing.T) { sizeMismatch(t, newGroup) })
	t.Run("RecvDeadline", func(t *testing.T) { recvDeadline(t, newGroup) })
	t.Run("AllPairsConcurrent", func(t *testing.T) { allPairs(t, newGroup) })
	t.Run("SelfSend", func(t *testing.T) { selfSend(t, newGroup) })
	t.Run("CloseFailsPeers", func(t *testing.T) { closeFailsPeers(t, newGroup) })
	t.Run("Fold", func(t *testing.T) { foldRecv(t, newGroup) })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func fifoPerTag(t *testing.T, newGroup Factory) {
	trs := newGroup(t, 2)
	c := ctx(t)
	// Interleave two tags; each tag's messages arrive in order, and a
	// receive posted late still gets its message (stored unexpected).
	for i := 0; i < 20; i++ {
		require.NoError(t, trs[0].Send(c, 1, transport.P2PTag(int64(i%2)), []byte{byte(i)}))
	}
	for _, tag := range []int64{1, 0} {
		for i := int(tag); i < 20; i += 2 {
			b := make([]byte, 1)
			require.NoError(t, trs[1].PostRecv(0, transport.P2PTag(tag), b).Wait(c))
			require.Equal(t, byte(i), b[0], "tag %d", tag)
		}
	}
}

func sizes(t *testing.T, newGroup Factory) {
	trs := newGroup(t, 2)
	c := ctx(t)
	for _, n := range []int{0, 1, 7, 4096, 1 << 20, 5<<20 + 3} {
		data := bytes.Repeat([]byte{byte(n), byte(n >> 8), 3}, n/3+1)[:n]
		buf := make([]byte, n)
		r := trs[1].PostRecv(0, transport.CollTag(uint64(n), 0), buf) // posted first: direct read
		require.NoError(t, trs[0].Send(c, 1, transport.CollTag(uint64(n), 0), data))
		require.NoError(t, r.Wait(c))
		require.Equal(t, data, buf, "size %d", n)
		require.Equal(t, 0, r.Source())
	}
}

func anySource(t *testing.T, newGroup Factory) {
	trs := newGroup(t, 4)
	c := ctx(t)
	for r := 1; r < 4; r++ {
		require.NoError(t, trs[r].Send(c, 0, transport.P2PTag(9), []byte{byte(r)}))
	}
	seen := map[int]bool{}
	for i := 0; i < 3; i++ {
		b := make([]byte, 1)
		rv := trs[0].PostRecv(transport.AnySource, transport.P2PTag(9), b)
		require.NoError(t, rv.Wait(c))
		require.Equal(t, byte(rv.Source()), b[0])
		seen[rv.Source()] = true
	}
	require.Len(t, seen, 3)
}

func sizeMismatch(t *testing.T, newGroup Factory) {
	trs := newGroup(t, 2)
	c := ctx(t)
	r := trs[1].PostRecv(0, transport.P2PTag(1), make([]byte, 4))
	require.NoError(t, trs[0].Send(c, 1, transport.P2PTag(1), make([]byte, 8)))
	err := r.Wait(c)
	require.ErrorIs(t, err, transport.ErrSizeMismatch)
	// the stream is still usable
	b := make([]byte, 2)
	r = trs[1].PostRecv(0, transport.P2PTag(2), b)
	require.NoError(t, trs[0].Send(c, 1, transport.P2PTag(2), []byte{5, 6}))
	require.NoError(t, r.Wait(c))
	require.Equal(t, []byte{5, 6}, b)
}

func recvDeadline(t *testing.T, newGroup Factory) {
	trs := newGroup(t, 2)
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := trs[1].PostRecv(0, transport.P2PTag(3), make([]byte, 4)).Wait(c)
	require.ErrorIs(t, err, transport.ErrTimeout)
	var pe *transport.PeerError
	require.True(t, errors.As(err, &pe))
	require.Equal(t, 0, pe.Peer)
	require.Less(t, time.Since(start), 2*time.Second)
	// A message for the canceled receive does not disturb later ones.
	c2 := ctx(t)
	require.NoError(t, trs[0].Send(c2, 1, transport.P2PTag(3), []byte{1, 2, 3, 4}))
	b := make([]byte, 4)
	require.NoError(t, trs[1].PostRecv(0, transport.P2PTag(3), b).Wait(c2))
	require.Equal(t, []byte{1, 2, 3, 4}, b)
}

func allPairs(t *testing.T, newGroup Factory) {
	const n = 5
	trs := newGroup(t, n)
	c := ctx(t)
	var wg sync.WaitGroup
	errs := make(chan error, n*n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			bufs := make([][]byte, n)
			rs := make([]*transport.Recv, n)
			for p := 0; p < n; p++ {
				if p != r {
					bufs[p] = make([]byte, 100_000)
					rs[p] = trs[r].PostRecv(p, transport.CollTag(1, 0), bufs[p])
				}
			}
			for p := 0; p < n; p++ {
				if p != r {
					if err := trs[r].Send(c, p, transport.CollTag(1, 0), bytes.Repeat([]byte{byte(r*10 + p)}, 100_000)); err != nil {
						errs <- err
						return
					}
				}
			}
			for p := 0; p < n; p++ {
				if p == r {
					continue
				}
				if err := rs[p].Wait(c); err != nil {
					errs <- err
					return
				}
				if bufs[p][99_999] != byte(p*10+r) {
					errs <- fmt.Errorf("rank %d got wrong data from %d", r, p)
				}
			}
		}(r)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func selfSend(t *testing.T, newGroup Factory) {
	trs := newGroup(t, 2)
	c := ctx(t)
	b := make([]byte, 3)
	r := trs[1].PostRecv(1, transport.P2PTag(0), b)
	require.NoError(t, trs[1].Send(c, 1, transport.P2PTag(0), []byte{7, 8, 9}))
	require.NoError(t, r.Wait(c))
	require.Equal(t, []byte{7, 8, 9}, b)
}

func closeFailsPeers(t *testing.T, newGroup Factory) {
	trs := newGroup(t, 3)
	c := ctx(t)
	r := trs[0].PostRecv(2, transport.P2PTag(0), make([]byte, 1))
	require.NoError(t, trs[2].Close())
	require.NoError(t, trs[2].Close()) // idempotent
	err := r.Wait(c)
	require.Error(t, err)
	require.ErrorIs(t, err, transport.ErrPeerGone)
	// ranks 0 and 1 still talk
	b := make([]byte, 1)
	rv := trs[1].PostRecv(0, transport.P2PTag(0), b)
	require.NoError(t, trs[0].Send(c, 1, transport.P2PTag(0), []byte{4}))
	require.NoError(t, rv.Wait(c))
}

// AddU32 is a Fold combine for tests: dst += src as little-endian
// uint32s.
func AddU32(dst, src []byte) error {
	for i := 0; i+4 <= len(dst); i += 4 {
		binary.LittleEndian.PutUint32(dst[i:], binary.LittleEndian.Uint32(dst[i:])+binary.LittleEndian.Uint32(src[i:]))
	}
	return nil
}

// U32s returns n bytes of little-endian uint32s seed, seed+7, seed+14, ...
func U32s(n int, seed uint32) []byte {
	b := make([]byte, n)
	for i := 0; i+4 <= n; i += 4 {
		binary.LittleEndian.PutUint32(b[i:], seed+uint32(i/4)*7)
	}
	return b
}

// foldRecv: a folding receive leaves buf + message in buf, whether it was
// posted before the message came (read through the fold window, several
// windows for the large sizes) or after (the kept message folded in); a
// message of another size fails it and leaves buf alone, and a combine
// error fails it without breaking the stream.
func foldRecv(t *testing.T, newGroup Factory) {
	trs := newGroup(t, 2)
	c := ctx(t)
	f := transport.Fold{Combine: AddU32, Elem: 4}
	for i, n := range []int{0, 4, 4096, 1 << 20, 5<<20 + 12} {
		for _, late := range []bool{false, true} {
			tag := transport.CollTag(uint64(i), map[bool]uint16{false: 0, true: 1}[late])
			data, buf := U32s(n, 1000), U32s(n, 5)
			want := append([]byte(nil), buf...)
			require.NoError(t, AddU32(want, data))
			var r *transport.Recv
			if !late {
				r = trs[1].PostFold(0, tag, buf, f)
			}
			require.NoError(t, trs[0].Send(c, 1, tag, data))
			if late {
				time.Sleep(20 * time.Millisecond) // let it arrive unexpected
				r = trs[1].PostFold(0, tag, buf, f)
			}
			require.NoError(t, r.Wait(c), "size %d late %v", n, late)
			require.True(t, bytes.Equal(want, buf), "size %d late %v", n, late)
		}
	}
	buf := U32s(64, 5)
	keep := append([]byte(nil), buf...)
	r := trs[1].PostFold(0, transport.P2PTag(7), buf, f)
	require.NoError(t, trs[0].Send(c, 1, transport.P2PTag(7), U32s(32, 1)))
	require.ErrorIs(t, r.Wait(c), transport.ErrSizeMismatch)
	require.Equal(t, keep, buf)

	bad := errors.New("no such op")
	r = trs[1].PostFold(0, transport.P2PTag(8), buf, transport.Fold{Combine: func(_, _ []byte) error { return bad }, Elem: 4})
	require.NoError(t, trs[0].Send(c, 1, transport.P2PTag(8), U32s(64, 1)))
	require.ErrorIs(t, r.Wait(c), bad)
	data := U32s(8, 9) // the stream goes on
	got := make([]byte, 8)
	require.NoError(t, trs[0].Send(c, 1, transport.P2PTag(9), data))
	require.NoError(t, trs[1].PostRecv(0, transport.P2PTag(9), got).Wait(c))
	require.Equal(t, data, got)

	for _, f := range []transport.Fold{{Elem: 4}, {Combine: AddU32, Elem: 3}, {Combine: AddU32, Elem: 128}, {Combine: AddU32, Elem: 8}} {
		err := trs[1].PostFold(0, transport.P2PTag(10), make([]byte, 12), f).Wait(c)
		require.ErrorIs(t, err, transport.ErrFold, "%+v", f.Elem)
	}
}
