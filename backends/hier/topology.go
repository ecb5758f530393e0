package hier

import (
	"fmt"
	"strings"

	"github.com/godist/godist/libgodist/backend"
)

// topology is where a group's ranks run, as every rank computes it from
// the rendezvous records.
type topology struct {
	hosts [][]int // group ranks by host (backend.Setup.Hosts)
	host  int     // this rank's host
	local int     // this rank's index among its host's ranks
	even  bool    // every host has the same number of ranks
}

func newTopology(s *backend.Setup) topology {
	t := topology{hosts: s.Hosts(), even: true}
	for h, ranks := range t.hosts {
		for i, r := range ranks {
			if r == s.Rank {
				t.host, t.local = h, i
			}
		}
		if len(ranks) != len(t.hosts[0]) {
			t.even = false
		}
	}
	return t
}

// worthwhile reports whether the hierarchy pays: several hosts, one of
// them with several ranks. Otherwise a group is all on one host (the
// host offload alone carries it) or has one rank per host (nothing to
// share).
func (t topology) worthwhile() bool {
	if len(t.hosts) < 2 {
		return false
	}
	for _, h := range t.hosts {
		if len(h) > 1 {
			return true
		}
	}
	return false
}

// mine is this rank's host's ranks.
func (t topology) mine() []int { return t.hosts[t.host] }

// column is the group ranks with local index l, one per host that has
// one, in host order.
func (t topology) column(l int) []int {
	var out []int
	for _, h := range t.hosts {
		if l < len(h) {
			out = append(out, h[l])
		}
	}
	return out
}

// leaders is every host's lowest rank, in host order.
func (t topology) leaders() []int { return t.column(0) }

func (t topology) String() string {
	parts := make([]string, len(t.hosts))
	for i, h := range t.hosts {
		parts[i] = fmt.Sprint(h)
	}
	return strings.Join(parts, " ")
}

// find returns the host of group rank r and its index there.
func (t topology) find(r int) (host, local int) {
	for h, ranks := range t.hosts {
		for i, q := range ranks {
			if q == r {
				return h, i
			}
		}
	}
	return -1, -1
}
