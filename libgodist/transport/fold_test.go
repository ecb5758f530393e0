package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/transport/transporttest"
)

var (
	addU32 = transporttest.AddU32
	u32s   = transporttest.U32s
)

func sum(a, b []byte) []byte {
	out := append([]byte(nil), a...)
	_ = addU32(out, b)
	return out
}

// feed delivers data as a reader does, in pieces of the sizes in steps
// (cycling) and never past a window's end, so elements straddle pieces.
func feed(mb *transport.Mailbox, src int, tag transport.Tag, data []byte, steps []int) {
	var d transport.Delivery
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
	f := transport.Fold{Combine: addU32, Elem: 4}
	for _, n := range []int{4, 12, transport.FoldWindow, 3*transport.FoldWindow + 20} {
		mb := transport.NewMailbox(2)
		data, buf := u32s(n, 77), u32s(n, 3)
		want := sum(buf, data)
		r := mb.PostFold(1, transport.P2PTag(0), buf, f)
		feed(mb, 1, transport.P2PTag(0), data, []int{5, 1, 3, transport.FoldWindow/2 + 3, 7})
		require.NoError(t, r.Wait(testCtx(t)))
		require.Equal(t, want, buf, "n %d", n)
	}
}

// TestFoldInFlightNotAdopted: a large message being read when its folding
// receive is posted is not adopted (its bytes so far would have to be
// folded, not copied): it completes as kept and is folded in whole.
func TestFoldInFlightNotAdopted(t *testing.T) {
	n := 3*transport.PartSize + 8
	mb := transport.NewMailbox(2)
	data, buf := u32s(n, 11), u32s(n, 2)
	want := sum(buf, data)
	var d transport.Delivery
	mb.Begin(&d, 1, transport.P2PTag(0), n)
	got := 0
	for got < n/2 {
		got += copy(d.Window(got), data[got:n/2])
	}
	r := mb.PostFold(1, transport.P2PTag(0), buf, transport.Fold{Combine: addU32, Elem: 4})
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
// being read into fails it with transport.ErrConnLost.
func TestFoldBrokenStream(t *testing.T) {
	mb := transport.NewMailbox(2)
	n := 2 * transport.FoldWindow
	r := mb.PostFold(1, transport.P2PTag(0), make([]byte, n), transport.Fold{Combine: addU32, Elem: 4})
	var d transport.Delivery
	mb.Begin(&d, 1, transport.P2PTag(0), n)
	copy(d.Window(0), u32s(transport.FoldWindow, 1))
	d.Window(transport.FoldWindow)
	d.Fail(errors.New("reset"))
	require.ErrorIs(t, r.Wait(testCtx(t)), transport.ErrConnLost)
}
