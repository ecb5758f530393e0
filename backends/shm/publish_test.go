package shm

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCopyNonTemporalCopiesLikeCopy checks the non-temporal copy and
// publish (in both of its modes) against copy, for lengths around the
// thresholds and the 64-byte body, every destination alignment within a
// line, and sources longer than the destination; bytes outside the copied
// range stay untouched.
func TestCopyNonTemporalCopiesLikeCopy(t *testing.T) {
	src := make([]byte, 3*probeMin+200)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	defer forceNonTemporal.Store(false)
	defer func() { stores = storeChooser{} }()
	lens := []int{0, 1, 63, 64, 65, 127, publishMin - 1, publishMin, publishMin + 1, publishMin + 63, probeMin, 2*probeMin + 129}
	type copier struct {
		name string
		run  func(dst, src []byte) int
	}
	copiers := []copier{
		{"copyNonTemporal", func(dst, src []byte) int {
			n := min(len(dst), len(src))
			copyNonTemporal(dst, src, n)
			return n
		}},
		{"publish/ordinary", func(dst, src []byte) int {
			forceNonTemporal.Store(false)
			stores = storeChooser{}
			return publish(dst, src)
		}},
		// Non-temporal mode with probes: every copy of publishMin bytes or
		// more is non-temporal or a probe.
		{"publish/non-temporal-mode", func(dst, src []byte) int {
			forceNonTemporal.Store(false)
			stores = storeChooser{mode: modeNonTemporal}
			return publish(dst, src)
		}},
		{"publish/forced", func(dst, src []byte) int { forceNonTemporal.Store(true); return publish(dst, src) }},
	}
	for _, c := range copiers {
		for _, n := range lens {
			for off := 0; off < 64; off++ {
				for _, extra := range []int{0, 5} {
					got := bytes.Repeat([]byte{0xEE}, n+off+64)
					want := bytes.Repeat([]byte{0xEE}, n+off+64)
					k := c.run(got[off:off+n], src[1:1+n+extra])
					copy(want[off:off+n], src[1:1+n+extra])
					require.Equal(t, n, k, "%s n=%d off=%d", c.name, n, off)
					require.True(t, bytes.Equal(got, want), "%s n=%d off=%d extra=%d: result differs from copy", c.name, n, off, extra)
				}
			}
		}
	}
}

// TestStoreChooser walks the choice between ordinary and non-temporal
// stores: copies below probeMin are not timed in ordinary mode; slowRun
// slow ordinary copies in a row (fewer do not; a fast one, or a gap of
// more than staleAfter, starts the count again) start a trial of trialLen
// timed non-temporal copies; a trial that is fast enough switches to
// non-temporal stores, one that is not goes back to ordinary stores,
// untimed for backoff copies, and one interrupted for more than
// staleAfter goes back at once; in non-temporal mode every probeEvery-th
// copy of publishMin bytes or more is a timed ordinary one, and a fast one
// switches back; copies picked in an earlier epoch are ignored.
func TestStoreChooser(t *testing.T) {
	if !haveCopyNT {
		t.Skip("no non-temporal copy on this architecture")
	}
	const n = probeMin
	at := func(rate float64) time.Duration { return time.Duration(float64(n) / rate) }
	slow, fast := at(slowRate/2), at(slowRate*2) // 3 and 12 GB/s
	var sc storeChooser
	clock := time.Unix(1000, 0)
	tick := func() time.Time { clock = clock.Add(time.Millisecond); return clock }
	timed := func(kind copyKind, d time.Duration) {
		k, e := sc.pick(n)
		require.Equal(t, kind, k)
		sc.observe(k, e, n, d, tick())
	}
	slowCopies := func(k int) {
		for i := 0; i < k; i++ {
			timed(kindTimed, slow)
		}
	}

	k, _ := sc.pick(publishMin)
	require.Equal(t, kindPlain, k, "ordinary mode, below probeMin: untimed")
	slowCopies(slowRun - 1)
	timed(kindTimed, fast)
	require.Equal(t, modeOrdinary, sc.mode, "a fast copy restarts the count")
	slowCopies(slowRun - 1)
	clock = clock.Add(2 * staleAfter)
	slowCopies(slowRun - 1)
	require.Equal(t, modeOrdinary, sc.mode, "a gap restarts the count")
	slowCopies(1)
	require.Equal(t, modeTrial, sc.mode, "after slowRun slow copies")

	// A trial whose copies are not ntGain times faster fails.
	for i := 0; i < trialLen; i++ {
		k, _ := sc.pick(publishMin)
		require.Equal(t, kindPlain, k, "trial: copies below probeMin stay ordinary")
		timed(kindTimedNT, at(slowRate/2*ntGain*0.9))
	}
	require.Equal(t, modeOrdinary, sc.mode, "a slow trial goes back")
	for i := 0; i < backoff; i++ {
		k, _ := sc.pick(n)
		require.Equal(t, kindPlain, k, "untimed during the back-off")
	}
	k, _ = sc.pick(n)
	require.Equal(t, kindTimed, k, "timed again after the back-off")

	// A trial interrupted for longer than staleAfter goes back.
	slowCopies(slowRun)
	require.Equal(t, modeTrial, sc.mode)
	clock = clock.Add(2 * staleAfter)
	timed(kindTimedNT, fast)
	require.Equal(t, modeOrdinary, sc.mode, "a stale trial goes back")

	// A fast trial (only its best copy counts) switches; an ordinary copy
	// picked before the trial began is ignored.
	kOld, eOld := sc.pick(n)
	require.Equal(t, kindTimed, kOld)
	slowCopies(slowRun)
	require.Equal(t, modeTrial, sc.mode)
	sc.observe(kOld, eOld, n, fast, tick())
	require.Equal(t, modeTrial, sc.mode, "a copy from an earlier epoch is ignored")
	for i := 0; i < trialLen; i++ {
		d := slow
		if i == 1 {
			d = at(slowRate / 2 * ntGain * 1.1)
		}
		timed(kindTimedNT, d)
	}
	require.Equal(t, modeNonTemporal, sc.mode, "a fast trial switches")

	probes := 0
	for i := 0; i < 4*probeEvery; i++ {
		k, e := sc.pick(publishMin) // probes come from copies below probeMin too
		require.Contains(t, []copyKind{kindNT, kindTimed}, k)
		if k == kindTimed {
			probes++
			sc.observe(k, e, publishMin, 2*time.Duration(publishMin/int(slowRate)), tick())
		}
	}
	require.Equal(t, 4, probes, "one probe in probeEvery copies")
	require.Equal(t, modeNonTemporal, sc.mode, "slow probes keep non-temporal mode")
	for {
		k, e := sc.pick(n)
		if k == kindTimed {
			sc.observe(k, e, n, fast, tick())
			break
		}
	}
	require.Equal(t, modeOrdinary, sc.mode, "a fast probe switches back")
}
