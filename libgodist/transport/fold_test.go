package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func addU32(dst, src []byte) error {
	for i := 0; i+4 <= len(dst); i += 4 {
		binary.LittleEndian.PutUint32(dst[i:], binary.LittleEndian.Uint32(dst[i:])+binary.LittleEndian.Uint32(src[i:]))
	}
	return nil
}

func u32s(n int, seed uint32) []byte {
	b := make([]byte, n)
	for i := 0; i+4 <= n; i += 4 {
		binary.LittleEndian.PutUint32(b[i:], seed+uint32(i/4)*7)
	}
	return b
}

func sum(a, b []byte) []byte {
	out := append([]byte(nil), a...)
	_ = addU32(out, b)
	return out
}

// feed delivers data as a reader does, in pieces of the sizes in steps
// (cycling) and never past a window's end, so elements straddle pieces.
func feed(mb *Mailbox, src int, tag Tag, data []byte, steps []int) {
	var d Delivery
	mb.Begin(&d, src, tag, len(data))
	for got, i := 0, 0; got < len(data); i++ {
		w := d.Window(got)
		got += copy(w[:min(len(w), steps[i%len(steps)])], data[got:])
	}
	d.Finish()
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestFoldThroughWindows: a folding receive posted first gets its message
// through the fold window in reads of odd sizes (elements split across
// reads, several windows), and ends with buf + message.
func TestFoldThroughWindows(t *testing.T) {
	f := Fold{Combine: addU32, Elem: 4}
	for _, n := range []int{4, 12, foldWindow, 3*foldWindow + 20} {
		mb := NewMailbox(2)
		data, buf := u32s(n, 77), u32s(n, 3)
		want := sum(buf, data)
		r := mb.PostFold(1, P2PTag(0), buf, f)
		feed(mb, 1, P2PTag(0), data, []int{5, 1, 3, foldWindow/2 + 3, 7})
		require.NoError(t, r.Wait(testCtx(t)))
		require.Equal(t, want, buf, "n %d", n)
	}
}

// TestFoldInFlightNotAdopted: a large message being read when its folding
// receive is posted is not adopted (its bytes so far would have to be
// folded, not copied): it completes as kept and is folded in whole.
func TestFoldInFlightNotAdopted(t *testing.T) {
	n := 3*partSize + 8
	mb := NewMailbox(2)
	data, buf := u32s(n, 11), u32s(n, 2)
	want := sum(buf, data)
	var d Delivery
	mb.Begin(&d, 1, P2PTag(0), n)
	got := 0
	for got < n/2 {
		got += copy(d.Window(got), data[got:n/2])
	}
	r := mb.PostFold(1, P2PTag(0), buf, Fold{Combine: addU32, Elem: 4})
	select {
	case <-r.Done():
		t.Fatal("completed before the message did")
	default:
	}
	for got < n {
		got += copy(d.Window(got), data[got:])
	}
	d.Finish()
	require.NoError(t, r.Wait(testCtx(t)))
	require.Equal(t, want, buf)
}

// TestFoldBrokenStream: a stream that breaks while a folding receive is
// being read into fails it with ErrConnLost.
func TestFoldBrokenStream(t *testing.T) {
	mb := NewMailbox(2)
	n := 2 * foldWindow
	r := mb.PostFold(1, P2PTag(0), make([]byte, n), Fold{Combine: addU32, Elem: 4})
	var d Delivery
	mb.Begin(&d, 1, P2PTag(0), n)
	copy(d.Window(0), u32s(foldWindow, 1))
	d.Window(foldWindow)
	d.Fail(errors.New("reset"))
	require.ErrorIs(t, r.Wait(testCtx(t)), ErrConnLost)
}
