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
	defer stores.nt.Store(false)
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
		{"publish/ordinary", func(dst, src []byte) int { stores.nt.Store(false); return publish(dst, src) }},
		{"publish/non-temporal", func(dst, src []byte) int { stores.nt.Store(true); return publish(dst, src) }},
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
// copies in a row switch to non-temporal, fewer do not, and a fast one in
// between starts the count again; in non-temporal mode every
// probeEvery-th large copy is a timed ordinary one, and a fast one
// switches back.
func TestStoreChooser(t *testing.T) {
	if !haveCopyNT {
		t.Skip("no non-temporal copy on this architecture")
	}
	var sc storeChooser
	slow := time.Duration(probeMin/slowRate) + time.Microsecond
	fast := time.Duration(probeMin/slowRate) - time.Microsecond

	nt, timed := sc.pick(publishMin - 1)
	require.False(t, nt || timed, "below publishMin: plain copy")
	nt, timed = sc.pick(publishMin)
	require.False(t, nt || timed, "ordinary mode, below probeMin: untimed ordinary copy")
	nt, timed = sc.pick(probeMin)
	require.True(t, !nt && timed, "ordinary mode, probeMin: timed ordinary copy")

	for i := 0; i < slowRun-1; i++ {
		sc.observe(probeMin, slow)
	}
	sc.observe(probeMin, fast)
	require.False(t, sc.nt.Load(), "a fast copy restarts the count")
	for i := 0; i < slowRun-1; i++ {
		sc.observe(probeMin, slow)
		require.False(t, sc.nt.Load(), "after %d slow copies", i+1)
	}
	sc.observe(probeMin, slow)
	require.True(t, sc.nt.Load(), "after slowRun slow copies")

	nt, timed = sc.pick(publishMin)
	require.True(t, nt && !timed, "non-temporal mode, below probeMin: never a probe")
	probes := 0
	for i := 0; i < 4*probeEvery; i++ {
		nt, timed = sc.pick(probeMin)
		require.True(t, nt != timed, "either non-temporal or a timed probe")
		if timed {
			probes++
			sc.observe(probeMin, slow)
		}
	}
	require.InDelta(t, 4, probes, 1, "one probe in probeEvery large copies")
	require.True(t, sc.nt.Load(), "slow probes keep non-temporal mode")
	for {
		if _, timed = sc.pick(probeMin); timed {
			break
		}
	}
	sc.observe(probeMin, fast)
	require.False(t, sc.nt.Load(), "a fast probe switches back")
}
