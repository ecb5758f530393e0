package shm

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Keeping co-located ranks spread evenly over the CPUs.
//
// When a host has a core for every local rank, the scheduler can still put
// two ranks on one CPU and leave another idle: a wake-up lands on the
// waker's CPU (a vCPU the host has preempted does not count as idle), and
// the load balancer then leaves both there, because each ran a moment ago
// and counts as cache-hot. Two ranks that share a CPU take turns instead
// of overlapping, for seconds at a time.
//
// With more ranks than CPUs the same happens one level up: 4 ranks on 2
// CPUs settle 3 and 1 for stretches, and the lone rank's yield-polls
// return at once while its peers queue on the other CPU.
//
// So a rank about to wait publishes the CPU it runs on (ctlCPU), and if
// its CPU's share (ceil(ranks / CPUs of this thread's affinity); 1 when
// the ranks fit) of lower local ranks last published the same one, it
// moves its own thread to the CPUs of its affinity with the fewest other
// ranks, if they hold fewer than that share (setting its affinity to
// those, then back to what it was: the thread stays where the kernel moved
// it, and the affinity that threads started later inherit is unchanged).
// At most once per spreadEvery.

// spreadEvery is the shortest time between two checks by one rank.
const spreadEvery = 2 * time.Millisecond

type spreadState struct {
	on   bool         // the policy asks for it (and the ranks are processes)
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
	var mask cpuMask
	if !getAffinity(&mask) {
		return
	}
	ncpu := mask.count()
	if ncpu < 2 {
		return
	}
	// quota: the most ranks a CPU needs to hold. A rank moves when at
	// least quota lower ranks last ran on its CPU.
	quota := (a.size + ncpu - 1) / ncpu
	var counts [len(cpuMask{}) * 64]uint16
	lower := 0
	for q := 0; q < a.size; q++ {
		c := a.loadCPU(q)
		if q == a.rank || c == 0 || int(c) > len(counts) {
			continue
		}
		counts[c-1]++
		if int(c-1) == cpu && q < a.rank {
			lower++
		}
	}
	if lower < quota {
		return
	}
	// Move to the CPUs holding the fewest other ranks, if below quota.
	var free cpuMask
	best := quota
	for c := 0; c < len(counts); c++ {
		if c == cpu || mask[c/64]&(1<<(c%64)) == 0 {
			continue
		}
		switch n := int(counts[c]); {
		case n < best:
			best = n
			free = cpuMask{}
			free[c/64] |= 1 << (c % 64)
		case n == best && n < quota:
			free[c/64] |= 1 << (c % 64)
		}
	}
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
