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
	defer func() { forceNonTemporal = false }()
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
		{"publish", func(dst, src []byte) int { forceNonTemporal = false; return publish(dst, src) }},
		{"publish/non-temporal", func(dst, src []byte) int { forceNonTemporal = true; return publish(dst, src) }},
	}
	for _, c := range copiers {
		for _, n := range lens {
			for off := 0; off < 64; off += 7 {
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
// stores: small copies are never timed or non-temporal; slowRun slow
// ordinary copies in a row (fewer do not; a fast one starts the count
// again) start a trial of trialLen timed non-temporal copies; a trial that
// is fast enough switches to non-temporal stores, one that is not goes
// back to ordinary stores, untimed for backoff copies; in non-temporal
// mode every probeEvery-th large copy is a timed ordinary one, and a fast
// one switches back.
func TestStoreChooser(t *testing.T) {
	if !haveCopyNT {
		t.Skip("no non-temporal copy on this architecture")
	}
	const n = probeMin
	at := func(rate float64) time.Duration { return time.Duration(float64(n) / rate) }
	slow, fast := at(slowRate/2), at(slowRate*2) // 3 and 12 GB/s
	var sc storeChooser
	slowCopies := func(k int) {
		for i := 0; i < k; i++ {
			require.Equal(t, kindTimed, sc.pick(n))
			sc.observe(kindTimed, n, slow)
		}
	}

	require.Equal(t, kindPlain, sc.pick(publishMin-1), "below publishMin")
	require.Equal(t, kindPlain, sc.pick(publishMin), "ordinary mode, below probeMin: untimed")
	slowCopies(slowRun - 1)
	sc.observe(kindTimed, n, fast)
	require.Equal(t, modeOrdinary, sc.mode, "a fast copy restarts the count")
	slowCopies(slowRun - 1)
	require.Equal(t, modeOrdinary, sc.mode)
	slowCopies(1)
	require.Equal(t, modeTrial, sc.mode, "after slowRun slow copies")

	// A trial whose copies are not ntGain times faster fails.
	for i := 0; i < trialLen; i++ {
		require.Equal(t, kindTimedNT, sc.pick(n))
		require.Equal(t, kindPlain, sc.pick(publishMin), "trial: small copies stay ordinary")
		sc.observe(kindTimedNT, n, at(slowRate/2*ntGain*0.9))
	}
	require.Equal(t, modeOrdinary, sc.mode, "a slow trial goes back")
	for i := 0; i < backoff; i++ {
		require.Equal(t, kindPlain, sc.pick(n), "untimed during the back-off")
	}
	require.Equal(t, kindTimed, sc.pick(n), "timed again after the back-off")

	// A fast trial (only its best copy counts) switches.
	slowCopies(slowRun)
	require.Equal(t, modeTrial, sc.mode)
	sc.observe(kindTimed, n, fast) // a stale ordinary copy: ignored
	require.Equal(t, modeTrial, sc.mode)
	for i := 0; i < trialLen; i++ {
		d := slow
		if i == 1 {
			d = at(slowRate / 2 * ntGain * 1.1)
		}
		sc.observe(kindTimedNT, n, d)
	}
	require.Equal(t, modeNonTemporal, sc.mode, "a fast trial switches")

	require.Equal(t, kindNT, sc.pick(publishMin), "non-temporal mode, below probeMin: never a probe")
	probes := 0
	for i := 0; i < 4*probeEvery; i++ {
		k := sc.pick(n)
		require.Contains(t, []copyKind{kindNT, kindTimed}, k)
		if k == kindTimed {
			probes++
			sc.observe(kindTimed, n, slow)
		}
	}
	require.Equal(t, 4, probes, "one probe in probeEvery large copies")
	require.Equal(t, modeNonTemporal, sc.mode, "slow probes keep non-temporal mode")
	sc.observe(kindTimed, n, fast)
	require.Equal(t, modeOrdinary, sc.mode, "a fast probe switches back")
}
