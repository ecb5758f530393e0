package backend

import (
	"context"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/wire"
)

// Setup is what a group's backends are built from once the rendezvous has
// gathered every rank's record.
type Setup struct {
	Rank, Size int
	Group      string
	Session    uint64            // rank 0's random token, the same on every rank
	Records    []wire.PeerRecord // every rank's record, index = rank
	// Agree returns true on every rank only if every rank passed ok ==
	// true. Every rank must call it the same number of times, in the same
	// order. Set by the engine once the fabric is connected.
	Agree func(ctx context.Context, ok bool) (bool, error)
	// Table is the group's algorithm sizes (libgodist/algo), the same on
	// every rank; an offload chooses its algorithms by it. Nil means
	// algo.Default().
	Table *algo.Table
}

// Algorithms is the group's algo.Table (algo.Default() when none is set).
func (s *Setup) Algorithms() algo.Table {
	if s.Table == nil {
		return algo.Default()
	}
	return *s.Table
}

// Me is this rank's record.
func (s *Setup) Me() wire.PeerRecord { return s.Records[s.Rank] }

// SameHost reports whether rank r runs on this rank's host (same hostname
// and boot id). A record without a boot id shares no host.
func (s *Setup) SameHost(r int) bool {
	me, p := s.Me(), s.Records[r]
	return me.BootID != "" && p.Hostname == me.Hostname && p.BootID == me.BootID
}

// Hosts groups the group's ranks by host (same hostname and boot id; a
// record without a boot id is a host of its own): hosts in the order of
// their lowest rank, ranks ascending within each. Every rank computes the
// same answer from the same records.
func (s *Setup) Hosts() [][]int {
	type host struct{ name, boot string }
	index := map[host]int{}
	var out [][]int
	for r, rec := range s.Records {
		h := host{rec.Hostname, rec.BootID}
		i, ok := index[h]
		if !ok || rec.BootID == "" {
			i = len(out)
			out = append(out, nil)
			if rec.BootID != "" {
				index[h] = i
			}
		}
		out[i] = append(out[i], r)
	}
	return out
}

// LocalRanks counts the ranks on this rank's host, this one included.
func (s *Setup) LocalRanks() int {
	n := 0
	for r := range s.Records {
		if r == s.Rank || s.SameHost(r) {
			n++
		}
	}
	return n
}

// HostFits reports whether this host's ranks of the group fit the CPUs
// this rank may run on: each can have a core.
func (s *Setup) HostFits() bool { return s.LocalRanks() <= int(s.Me().CPUs) }

// EveryHostFits reports whether on every host the group's ranks there fit
// the fewest CPUs any of them may run on. Every rank computes the same
// answer from the same records, so it may choose what goes on the wire; a
// record that names no CPUs makes it false.
func (s *Setup) EveryHostFits() bool {
	type host struct{ name, boot string }
	ranks, cpus := map[host]int{}, map[host]int32{}
	for _, r := range s.Records {
		h := host{r.Hostname, r.BootID}
		ranks[h]++
		if c, ok := cpus[h]; !ok || r.CPUs < c {
			cpus[h] = r.CPUs
		}
	}
	for h, n := range ranks {
		if int(cpus[h]) < n {
			return false
		}
	}
	return len(s.Records) > 0
}

// ChildSetup is what an offload needs to serve a group split from its
// group (Splitter): the child's name, its ranks (the parent's ranks, in
// the child's order), this rank's place among them, its table, and Key:
// a number the child's rank 0 chose, unique among the children it is in,
// that names what it prepares.
type ChildSetup struct {
	Name  string
	Key   uint64
	Rank  int
	Ranks []int
	Table *algo.Table
}
