package libgodist

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/wire"
)

func TestEveryHostSpare(t *testing.T) {
	rec := func(host string, cpus int32) wire.PeerRecord {
		return wire.PeerRecord{Hostname: host, BootID: "boot-" + host, CPUs: cpus}
	}
	for _, tc := range []struct {
		name string
		recs []wire.PeerRecord
		want bool
	}{
		{"none", nil, false},
		{"one rank, one cpu", []wire.PeerRecord{rec("a", 1)}, true},
		{"two ranks, two cpus", []wire.PeerRecord{rec("a", 2), rec("a", 2)}, true},
		{"three ranks, two cpus", []wire.PeerRecord{rec("a", 2), rec("a", 2), rec("a", 2)}, false},
		{"two hosts, both fit", []wire.PeerRecord{rec("a", 2), rec("b", 16), rec("a", 2), rec("b", 16)}, true},
		{"two hosts, one crowded", []wire.PeerRecord{rec("a", 1), rec("b", 16), rec("a", 1), rec("b", 16)}, false},
		{"older writer names no cpus", []wire.PeerRecord{rec("a", 16), rec("a", 0)}, false},
		{"the smaller count of a host counts", []wire.PeerRecord{rec("a", 16), rec("a", 1)}, false},
		{"same name, other boot", []wire.PeerRecord{rec("a", 1), {Hostname: "a", BootID: "other", CPUs: 1}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, everyHostSpare(tc.recs)) })
	}
}

func TestBroadcastSeg(t *testing.T) {
	defer func(a, b int) { broadcastSegment, broadcastSpareSegment = a, b }(broadcastSegment, broadcastSpareSegment)
	broadcastSegment, broadcastSpareSegment = 0, 4<<20
	crowded, spare := &comm{}, &comm{allSpare: true}
	require.Equal(t, 64<<20, broadcastSeg(crowded, 64<<20), "whole buffer when ranks outnumber cores")
	require.Equal(t, 4<<20, broadcastSeg(spare, 64<<20), "segments with a core per rank")
	require.Equal(t, 3<<20, broadcastSeg(spare, 3<<20), "never more than the buffer")
	require.Equal(t, 1, broadcastSeg(crowded, 0))
	broadcastSegment = 1000
	require.Equal(t, 1000, broadcastSeg(crowded, 64<<20))
	// spare follows allSpare only: this rank's own spare cores change nothing on the wire
	require.Equal(t, 1000, broadcastSeg(&comm{spare: true}, 64<<20))
}
