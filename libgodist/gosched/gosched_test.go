package gosched

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// advance moves the package's clock (time since epoch) forward by d
// without waiting for it.
func advance(d time.Duration) { epoch = epoch.Add(-d) }

// TestTickRateLimited: back-to-back ticks pass through the scheduler once
// per Period, not once per call.
func TestTickRateLimited(t *testing.T) {
	advance(Period) // the package's clock starts at zero
	last.Store(0)
	Tick()
	first := last.Load()
	require.NotZero(t, first)
	// Each pass records its time in last: however slowly the loop runs,
	// two passes are never less than Period apart.
	for range 1000 {
		prev := last.Load()
		Tick()
		if cur := last.Load(); cur != prev {
			require.GreaterOrEqual(t, cur-prev, int64(Period), "a tick within Period passed through the scheduler again")
		}
	}
	prev := last.Load()
	advance(Period)
	Tick()
	require.GreaterOrEqual(t, last.Load()-prev, int64(Period), "a tick Period after the last pass did not pass")
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
