package shm

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Keeping co-located ranks on different CPUs.
//
// When a host has a core for every local rank, the scheduler can still put
// two ranks on one CPU and leave another idle: a wake-up lands on the
// waker's CPU (a vCPU the host has preempted does not count as idle), and
// the load balancer then leaves both there, because each ran a moment ago
// and counts as cache-hot. Two ranks that share a CPU take turns instead
// of overlapping: a loop of 64 MiB all_reduces at two ranks on two cores
// ran at 14-18 ms per op with the ranks pinned to different CPUs, and
// switched between that and 32-60 ms unpinned, for seconds at a time.
//
// So a rank about to wait publishes the CPU it runs on (ctlCPU), and if a
// lower local rank last published the same one, it moves its own thread
// to a CPU no other local rank published (setting its affinity to those,
// then back to what it was: the thread stays where the kernel moved it,
// and the affinity that threads started later inherit is unchanged). At
// most once per spreadEvery, and only when every local rank can have a
// CPU of this thread's affinity.

// spreadEvery is the shortest time between two checks by one rank.
const spreadEvery = 2 * time.Millisecond

type spreadState struct {
	on   bool         // the policy asks for it and the ranks fit the CPUs
	next atomic.Int64 // UnixNano of the next check
	n    atomic.Int64 // moves made (tests, stats)
}

// spread runs the check described above if one is due at now.
func (a *Arena) spread(now time.Time) {
	if !a.spr.on {
		return
	}
	t := now.UnixNano()
	next := a.spr.next.Load()
	if t < next || !a.spr.next.CompareAndSwap(next, t+int64(spreadEvery)) {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu, ok := currentCPU()
	if !ok {
		return
	}
	a.publishCPU(cpu)
	clash := false
	for q := 0; q < a.size; q++ {
		if q != a.rank && a.loadCPU(q) == uint32(cpu+1) && q < a.rank {
			clash = true
			break
		}
	}
	if !clash {
		return
	}
	var mask cpuMask
	if !getAffinity(&mask) || mask.count() < a.size {
		return
	}
	free := mask
	for q := 0; q < a.size; q++ {
		if c := a.loadCPU(q); q != a.rank && c > 0 {
			free.clear(int(c - 1))
		}
	}
	free.clear(cpu)
	if free.count() == 0 {
		return
	}
	if !setAffinity(&free) {
		return
	}
	setAffinity(&mask)
	if c, ok := currentCPU(); ok {
		a.publishCPU(c)
	}
	a.spr.n.Add(1)
}

// publishCPU records the CPU this rank's waiting thread runs on (+1; zero
// means unknown).
func (a *Arena) publishCPU(cpu int) {
	atomic.StoreUint32((*uint32)(a.ptr(a.ctl(a.rank)+ctlCPU)), uint32(cpu+1))
}

func (a *Arena) loadCPU(q int) uint32 {
	return atomic.LoadUint32((*uint32)(a.ptr(a.ctl(q) + ctlCPU)))
}

// cpuMask is a CPU set as sched_getaffinity(2) fills it.
type cpuMask [16]uint64 // 1024 CPUs

func (m *cpuMask) clear(cpu int) {
	if cpu >= 0 && cpu < len(m)*64 {
		m[cpu/64] &^= 1 << (cpu % 64)
	}
}

func (m *cpuMask) count() int {
	n := 0
	for _, w := range m {
		for ; w != 0; w &= w - 1 {
			n++
		}
	}
	return n
}
