package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func waitRecv(t *testing.T, r *Recv) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.Wait(ctx)
}

func pending(r *Recv) bool {
	select {
	case <-r.Done():
		return false
	default:
		return true
	}
}

// fill writes b into d's windows from payload offset off.
func fill(d *Delivery, off int, b []byte) {
	for len(b) > 0 {
		k := copy(d.Window(off), b)
		b = b[k:]
		off += k
	}
}

// A receive posted while an unexpected large message is being read adopts
// it: the bytes read before the post are copied, the rest land in place.
func TestDeliveryAdoptedMidway(t *testing.T) {
	for _, syncBeforeFinish := range []bool{true, false} {
		mb := NewMailbox(2)
		n := adoptMin * 2
		want := pattern(n, 3)
		var d Delivery
		mb.Begin(&d, 1, 5, n)
		fill(&d, 0, want[:n/3])
		early := d.Window(n / 3)
		r := mb.Post(1, 5, make([]byte, n))
		require.True(t, pending(r), "adopted receive completed before the payload")
		if syncBeforeFinish {
			dst := d.Window(n / 3)
			require.Equal(t, &r.Buf[n/3], &dst[0], "the rest must go into the receive's buffer")
			copy(dst, want[n/3:])
		} else {
			copy(early, want[n/3:]) // the reader never looked again
		}
		d.Finish()
		require.NoError(t, waitRecv(t, r))
		require.Equal(t, want, r.Buf)
		require.Equal(t, 1, r.Source())
		require.Empty(t, mb.inflight)
	}
}

func TestDeliveryAdoptedAnySource(t *testing.T) {
	mb := NewMailbox(3)
	n := adoptMin
	want := pattern(n, 9)
	var d Delivery
	mb.Begin(&d, 2, 7, n)
	r := mb.Post(AnySource, 7, make([]byte, n))
	fill(&d, 0, want)
	d.Finish()
	require.NoError(t, waitRecv(t, r))
	require.Equal(t, want, r.Buf)
	require.Equal(t, 2, r.Source())
}

// Small messages, other tags and other sizes are not adopted; an earlier
// receive of the wrong size keeps its turn (and fails on the mismatch).
func TestDeliveryNotAdopted(t *testing.T) {
	mb := NewMailbox(2)
	var d Delivery
	mb.Begin(&d, 1, 1, adoptMin-1)
	small := mb.Post(1, 1, make([]byte, adoptMin-1))
	require.Nil(t, d.pending, "a small message is copied once, not adopted")
	fill(&d, 0, pattern(adoptMin-1, 1))
	d.Finish()
	require.NoError(t, waitRecv(t, small))
	require.Equal(t, pattern(adoptMin-1, 1), small.Buf)

	n := adoptMin
	mb.Begin(&d, 1, 2, n)
	otherTag := mb.Post(1, 3, make([]byte, n))
	wrongSize := mb.Post(1, 2, make([]byte, n+1))
	later := mb.Post(1, 2, make([]byte, n))
	require.Nil(t, d.pending)
	fill(&d, 0, pattern(n, 2))
	d.Finish()
	err := waitRecv(t, wrongSize)
	require.ErrorIs(t, err, ErrSizeMismatch)
	require.True(t, pending(later), "the later receive waits for the next message")
	require.True(t, pending(otherTag))

	mb.Begin(&d, 1, 2, n)
	fill(&d, 0, pattern(n, 4))
	d.Finish()
	require.NoError(t, waitRecv(t, later))
	require.Equal(t, pattern(n, 4), later.Buf)
	otherTag.Cancel(ErrTimeout)
}

// A stream that breaks fails the adopting receive, whether or not the
// reader saw the adoption.
func TestDeliveryAdoptedThenFailed(t *testing.T) {
	for _, synced := range []bool{true, false} {
		mb := NewMailbox(2)
		var d Delivery
		mb.Begin(&d, 1, 0, adoptMin)
		r := mb.Post(1, 0, make([]byte, adoptMin))
		if synced {
			d.Window(10)
		}
		d.Fail(errors.New("reset by peer"))
		err := waitRecv(t, r)
		require.ErrorIs(t, err, ErrConnLost)
		require.Empty(t, mb.inflight)
	}
}

// A broken stream's cause that already names the peer and the lost
// connection is the receive's error as it is; another cause is wrapped.
func TestDeliveryFailCause(t *testing.T) {
	lost := &PeerError{Op: "recv", Peer: 1, Err: fmt.Errorf("%w: reading local rank 1's memory: no such process", ErrConnLost)}
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{lost, "recv from rank 1: connection lost (peer process died or network failed): reading local rank 1's memory: no such process"},
		{errors.New("reset by peer"), "recv from rank 1: connection lost (peer process died or network failed): reset by peer"},
		{&PeerError{Op: "recv", Peer: 0, Err: ErrConnLost}, "recv from rank 1: connection lost (peer process died or network failed): recv from rank 0: connection lost (peer process died or network failed)"},
	} {
		mb := NewMailbox(2)
		var d Delivery
		mb.Begin(&d, 1, 0, adoptMin)
		r := mb.Post(1, 0, make([]byte, adoptMin))
		d.Fail(tc.cause)
		err := waitRecv(t, r)
		require.ErrorIs(t, err, ErrConnLost)
		require.EqualError(t, err, tc.want)
	}
}

// A reader filling a large message in pieces while receives are posted at
// random moments: every message reaches the right receive intact, in
// order (run with -race).
func TestDeliveryAdoptionRace(t *testing.T) {
	const msgs = 40
	mb := NewMailbox(2)
	n := adoptMin + 4096
	rng := rand.New(rand.NewSource(1))
	delays := make([]time.Duration, msgs)
	for i := range delays {
		delays[i] = time.Duration(rng.Intn(300)) * time.Microsecond
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the reader
		defer wg.Done()
		var d Delivery
		for m := 0; m < msgs; m++ {
			src := pattern(n, byte(m))
			mb.Begin(&d, 1, 4, n)
			for got := 0; got < n; {
				k := min(n-got, 8192)
				fill(&d, got, src[got:got+k])
				got += k
				if got%(64<<10) == 0 {
					// Jitter, not ordering: receives land mid-message.
					time.Sleep(20 * time.Microsecond)
				}
			}
			d.Finish()
		}
	}()
	for m := 0; m < msgs; m++ {
		time.Sleep(delays[m])
		r := mb.Post(1, 4, make([]byte, n))
		require.NoError(t, waitRecv(t, r))
		require.Equal(t, pattern(n, byte(m)), r.Buf, "message %d", m)
	}
	wg.Wait()
	require.Empty(t, mb.inflight)
}

// A large message with no receive is kept in parts taken as its bytes
// come; a receive posted after it arrived whole gets it intact, and one of
// another size fails.
func TestDeliveryKeptInParts(t *testing.T) {
	mb := NewMailbox(2)
	n := 2*partSize + 12345
	want := pattern(n, 5)
	var d Delivery
	mb.Begin(&d, 1, 3, n)
	fill(&d, 0, want[:100<<10])
	require.Len(t, d.parts, 1, "parts are taken as bytes come")
	fill(&d, 100<<10, want[100<<10:])
	require.Len(t, d.parts, 3)
	d.Finish()
	r := mb.Post(1, 3, make([]byte, n))
	require.NoError(t, waitRecv(t, r))
	require.Equal(t, want, r.Buf)

	mb.Begin(&d, 1, 3, n)
	fill(&d, 0, want)
	d.Finish()
	require.ErrorIs(t, waitRecv(t, mb.Post(1, 3, make([]byte, n-1))), ErrSizeMismatch)

	// Adopted after two parts were read: they are copied, the rest lands
	// in place.
	mb.Begin(&d, 1, 3, n)
	fill(&d, 0, want[:partSize+7])
	r = mb.Post(1, 3, make([]byte, n))
	dst := d.Window(partSize + 7)
	require.Equal(t, &r.Buf[partSize+7], &dst[0])
	require.Nil(t, d.parts, "the parts went back once adopted")
	copy(dst, want[partSize+7:])
	d.Finish()
	require.NoError(t, waitRecv(t, r))
	require.Equal(t, want, r.Buf)
}
