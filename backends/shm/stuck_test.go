//go:build !race

package shm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/transport"
)

// Not under -race: transport.Recv.Cancel reads Recv.src without the
// mailbox lock while the reader completes the receive (a bug in
// libgodist/transport/mailbox.go, which also passes its stuck handler an unset src;
// hence Arena.BreakStuck ignores the rank it is given).

// TestStuckReceiveBreaksChannel: a receive canceled while its message is
// half-way through the ring (the sender stalled) makes the mailbox call
// the stuck handler; the transport then cuts the channel so the read ends.
func TestStuckReceiveBreaksChannel(t *testing.T) {
	trs := newTransports(t, 2, nil)
	a := trs[0].Arena()
	// Forge the start of a 1000-byte message from rank 0 to rank 1.
	require.NoError(t, a.enter("test"))
	ch := a.lay.ch(0, 1)
	var h [msgHdr]byte
	h[0], h[8], h[9] = 9, 0xe8, 0x03 // tag 9, length 1000
	a.ringCopy(ch, 0, h[:], true)
	a.ringCopy(ch, msgHdr, make([]byte, 10), true)
	a.u64(ch + chHead).Store(msgHdr + 10)
	a.ring(1)
	a.exit()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := trs[1].PostRecv(0, transport.Tag(9), make([]byte, 1000)).Wait(ctx)
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	// The channel is cut: rank 0 is failed in rank 1's mailbox.
	err = trs[1].PostRecv(0, transport.Tag(10), make([]byte, 1)).Wait(testCtx(t, 5*time.Second))
	require.ErrorIs(t, err, transport.ErrConnLost)
}
