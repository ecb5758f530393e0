package libgodist

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/glog"
)

// What a group tells people about itself: the line logged when it
// connects, the warnings about choices that cost performance, the per-op
// traces at debug level, and the snapshot godist.dump_state prints.

// State is a snapshot of a group on this rank, for debugging a hang: the
// last collective that completed here, the one running and those queued
// behind it. Comparing the ranks' snapshots shows which rank is behind.
type State struct {
	Group   string    `json:"group"`
	Rank    int       `json:"rank"`
	Size    int       `json:"size"`
	Offload string    `json:"offload"`
	Hosts   [][]int   `json:"hosts"`      // the group's ranks by host
	Via     []string  `json:"via"`        // how this rank reaches each rank: "self", "shm", "tcp", ...
	Algos   string    `json:"algorithms"` // what its collectives take (ProcessGroup.Algorithms)
	Issued  uint64    `json:"issued"`     // sequence number of the last collective issued
	Last    *OpState  `json:"last_completed"`
	Running *OpState  `json:"running"`
	Queued  []OpState `json:"queued"`
	Broken  string    `json:"broken,omitempty"`
	Closed  bool      `json:"closed"`
}

// OpState describes one collective.
type OpState struct {
	Seq   uint64  `json:"seq"`
	Op    string  `json:"op"`
	ForMs float64 `json:"for_ms,omitempty"` // running or queued for this long
	Err   string  `json:"error,omitempty"`
}

// State returns the group's snapshot.
func (pg *ProcessGroup) State() State {
	s := State{Group: pg.cfg.Group, Rank: pg.cfg.Rank, Size: pg.cfg.Size, Offload: pg.Offload(), Issued: pg.seq.Load(),
		Queued: []OpState{}}
	pg.mu.Lock()
	s.Hosts, s.Via = pg.hosts, pg.via
	pg.mu.Unlock()
	s.Algos = pg.Algorithms()
	if s.Hosts == nil && s.Size == 1 {
		s.Hosts, s.Via = [][]int{{0}}, []string{"self"}
	}
	now := time.Now()
	if t := pg.lastDone.Load(); t != nil {
		s.Last = &OpState{Seq: t.w.Seq, Op: t.w.Op}
		if err := t.w.Err(); err != nil {
			s.Last.Err = err.Error()
		}
	}
	if t := pg.running.Load(); t != nil {
		s.Running = &OpState{Seq: t.w.Seq, Op: t.w.Op, ForMs: ms(now.Sub(t.started))}
	}
	e := &pg.exec
	e.mu.Lock()
	for _, t := range e.queue {
		o := OpState{Seq: t.w.Seq, Op: t.w.Op}
		if !t.at.IsZero() {
			o.ForMs = ms(now.Sub(t.at))
		}
		s.Queued = append(s.Queued, o)
	}
	e.mu.Unlock()
	pg.mu.Lock()
	if pg.broken != nil {
		s.Broken = pg.broken.Error()
	}
	s.Closed = pg.closed
	pg.mu.Unlock()
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// traceStart and traceEnd log a collective at debug level.
func (pg *ProcessGroup) traceStart(t *task) {
	glog.Debugf("godist: group %q rank %d: %s seq %d started", pg.cfg.Group, pg.cfg.Rank, t.w.Op, t.w.Seq)
}

func (pg *ProcessGroup) traceEnd(t *task, err error) {
	d := time.Since(t.started)
	if err != nil {
		glog.Debugf("godist: group %q rank %d: %s seq %d failed after %v: %v", pg.cfg.Group, pg.cfg.Rank, t.w.Op, t.w.Seq, d, err)
		return
	}
	glog.Debugf("godist: group %q rank %d: %s seq %d done in %v", pg.cfg.Group, pg.cfg.Rank, t.w.Op, t.w.Seq, d)
}

// announce logs, once the group is connected, where its ranks run, how
// each peer is reached, the algorithms its collectives take and how long
// the rendezvous took; and warns, once per process, about choices that
// cost performance.
func (pg *ProcessGroup) announce(s *backend.Setup, fabric string, off backend.Offload, offloaders int) {
	local := s.LocalRanks()
	cpus := int(s.Me().CPUs)
	if local > cpus {
		glog.Once("oversubscribed", glog.Warning, "godist: %d ranks of group %q run on this host, which has %s: "+
			"ranks wait for each other's cores (expect slower collectives; run fewer ranks per host)", local, pg.cfg.Group, plural(cpus, "CPU"))
	}
	if off == nil && local > 1 {
		// Asked for (GODIST_TRANSPORT=tcp): said at INFO, not warned about.
		level, why := glog.Info, "GODIST_TRANSPORT=tcp"
		switch {
		case offloaders == 0:
		case local < s.Size:
			level, why = glog.Warning, "the group spans hosts, and shared memory carries only groups whose ranks all share one host"
		default:
			level, why = glog.Warning, "shared memory is not usable here; see `python -m godist info`"
		}
		glog.Once("tcp-on-host", level, "godist: ranks of group %q on one host talk over TCP (%s): "+
			"slower than shared memory", pg.cfg.Group, why)
	}
	if !glog.Enabled(glog.Info) {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "godist: group %q rank %d of %d: %s; ", pg.cfg.Group, pg.cfg.Rank, pg.cfg.Size, hosts(s))
	var near, far []int
	for r := range s.Records {
		if r == s.Rank {
			continue
		}
		if s.SameHost(r) {
			near = append(near, r)
		} else {
			far = append(far, r)
		}
	}
	switch {
	case off != nil:
		fmt.Fprintf(&b, "collectives over %s", off.Name())
		if len(far) > 0 {
			fmt.Fprintf(&b, " (peers %s) and %s (peers %s)", ranges(near), fabric, ranges(far))
		}
	case pg.cfg.Size > 1:
		fmt.Fprintf(&b, "peers %s over %s", ranges(append(near, far...)), fabric)
	}
	if a := pg.Algorithms(); a != "" {
		fmt.Fprintf(&b, "; %s", a)
	}
	fmt.Fprintf(&b, "; rendezvous %v", time.Since(pg.created).Round(time.Millisecond))
	glog.Infof("%s", b.String())
}

// hosts describes where the group's ranks run: "4 ranks on 1 host" or
// "8 ranks on 2 hosts (a: 0-3, b: 4-7)".
func hosts(s *backend.Setup) string {
	byHost := map[string][]int{}
	for r, rec := range s.Records {
		h := rec.Hostname
		if h == "" {
			h = "?"
		}
		byHost[h] = append(byHost[h], r)
	}
	names := make([]string, 0, len(byHost))
	for h := range byHost {
		names = append(names, h)
	}
	sort.Strings(names)
	if len(names) == 1 {
		return fmt.Sprintf("%d ranks on 1 host (%s)", len(s.Records), names[0])
	}
	parts := make([]string, len(names))
	for i, h := range names {
		parts[i] = fmt.Sprintf("%s: %s", h, ranges(byHost[h]))
	}
	return fmt.Sprintf("%d ranks on %d hosts (%s)", len(s.Records), len(names), strings.Join(parts, ", "))
}

// ranges writes sorted ranks as "0-3,6".
func ranges(rs []int) string {
	rs = append([]int(nil), rs...)
	sort.Ints(rs)
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", rs[i], rs[j]))
		} else {
			parts = append(parts, fmt.Sprint(rs[i]))
		}
		i = j + 1
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// plural writes n things: "1 CPU", "2 CPUs".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// String writes the snapshot on one line.
func (s State) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "godist: group %q rank %d of %d", s.Group, s.Rank, s.Size)
	if s.Offload != "" {
		fmt.Fprintf(&b, " (%s)", s.Offload)
	}
	fmt.Fprintf(&b, ": issued up to seq %d; last completed: ", s.Issued)
	if s.Last == nil {
		b.WriteString("none")
	} else {
		fmt.Fprintf(&b, "%s seq %d", s.Last.Op, s.Last.Seq)
		if s.Last.Err != "" {
			fmt.Fprintf(&b, " (failed: %s)", s.Last.Err)
		}
	}
	b.WriteString("; running: ")
	if s.Running == nil {
		b.WriteString("none")
	} else {
		fmt.Fprintf(&b, "%s seq %d for %.1f ms", s.Running.Op, s.Running.Seq, s.Running.ForMs)
	}
	if len(s.Queued) > 0 {
		b.WriteString("; queued:")
		for i, q := range s.Queued {
			if i == 8 {
				fmt.Fprintf(&b, " and %d more", len(s.Queued)-i)
				break
			}
			fmt.Fprintf(&b, " %s seq %d", q.Op, q.Seq)
		}
	}
	if s.Broken != "" {
		fmt.Fprintf(&b, "; broken: %s", s.Broken)
	}
	if s.Closed {
		b.WriteString("; closed")
	}
	return b.String()
}

// announceChild logs a split child's line, as announce does for a group
// that made a rendezvous, once its offload (off, nil for none) is settled.
func (pg *ProcessGroup) announceChild(parent string, off backend.Offload) {
	if !glog.Enabled(glog.Info) {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "godist: group %q rank %d of %d: %s on %s; ", pg.cfg.Group, pg.cfg.Rank, pg.cfg.Size,
		plural(pg.cfg.Size, "rank"), plural(max(len(pg.hosts), 1), "host"))
	if off != nil {
		fmt.Fprintf(&b, "collectives over %s", off.Name())
	} else {
		b.WriteString("collectives over the parent's connections")
	}
	if a := pg.Algorithms(); a != "" {
		fmt.Fprintf(&b, "; %s", a)
	}
	fmt.Fprintf(&b, "; split from group %q in %v, no rendezvous", parent, time.Since(pg.created).Round(10*time.Microsecond))
	glog.Infof("%s", b.String())
}
