package backend

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/wire"
)

func rec(host string, cpus int32) wire.PeerRecord {
	return wire.PeerRecord{Hostname: host, BootID: "boot-" + host, CPUs: cpus}
}

func TestEveryHostFits(t *testing.T) {
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
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, (&Setup{Records: tc.recs}).EveryHostFits()) })
	}
}

func TestLocalRanks(t *testing.T) {
	recs := []wire.PeerRecord{rec("a", 2), rec("b", 2), rec("a", 2), {Hostname: "a", BootID: "other", CPUs: 2}, rec("a", 2)}
	s := &Setup{Rank: 0, Records: recs}
	require.Equal(t, 3, s.LocalRanks())
	require.True(t, s.SameHost(2))
	require.False(t, s.SameHost(1))
	require.False(t, s.SameHost(3), "same hostname, another boot")
	require.False(t, s.HostFits(), "three ranks on two cpus")
	s = &Setup{Rank: 1, Records: recs}
	require.Equal(t, 1, s.LocalRanks())
	require.True(t, s.HostFits())
	noBoot := &Setup{Rank: 0, Records: []wire.PeerRecord{{Hostname: "a", CPUs: 1}, {Hostname: "a", CPUs: 1}}}
	require.Equal(t, 1, noBoot.LocalRanks(), "a record without a boot id shares no host")
}

func TestHosts(t *testing.T) {
	recs := []wire.PeerRecord{rec("a", 2), rec("b", 2), rec("a", 2), {Hostname: "a", BootID: "other"}, rec("b", 2),
		{Hostname: "c"}, {Hostname: "c"}}
	s := &Setup{Records: recs}
	require.Equal(t, [][]int{{0, 2}, {1, 4}, {3}, {5}, {6}}, s.Hosts(), "records without a boot id share no host")
	require.Nil(t, (&Setup{}).Hosts())
}
