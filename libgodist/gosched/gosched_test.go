package gosched

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTickRateLimited: back-to-back ticks pass through the scheduler once
// per Period, not once per call.
func TestTickRateLimited(t *testing.T) {
	time.Sleep(Period) // the package's clock starts at zero
	last.Store(0)
	Tick()
	first := last.Load()
	require.NotZero(t, first)
	for range 1000 {
		Tick()
	}
	require.Equal(t, first, last.Load(), "a tick within Period passed through the scheduler again")
	time.Sleep(Period + time.Millisecond)
	Tick()
	require.Greater(t, last.Load(), first)
}

// TestTicker: a Ticker's first pass comes Period after its first Tick,
// the next ones every Period.
func TestTicker(t *testing.T) {
	var k Ticker
	start := time.Now()
	k.Tick(start)
	first := k.next
	require.Equal(t, start.Add(Period), first)
	for i := range 1000 {
		k.Tick(start.Add(time.Duration(i) * time.Microsecond))
	}
	require.Equal(t, first, k.next, "a tick within Period passed through the scheduler")
	k.Tick(start.Add(Period))
	require.Equal(t, start.Add(2*Period), k.next)
}
