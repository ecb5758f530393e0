package shm

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/libgodist/reduce"
)

// benchSizes are the all-reduce sizes of the benchmarks.
var benchSizes = func() []benchSize {
	all := []benchSize{{"8B", 8}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20}, {"64MiB", 64 << 20}}
	extra := []benchSize{{"1KiB", 1 << 10}, {"16KiB", 16 << 10}, {"32KiB", 32 << 10}, {"64KiB", 64 << 10},
		{"256KiB", 256 << 10}, {"4MiB", 4 << 20}, {"16MiB", 16 << 20}}
	if only := os.Getenv("GODIST_SHM_BENCH_SIZES"); only != "" {
		var sel []benchSize
		for _, s := range append(all, extra...) {
			if strings.Contains(","+only+",", ","+s.name+",") {
				sel = append(sel, s)
			}
		}
		return sel
	}
	return all
}()

type benchSize struct {
	name string
	n    int
}

// BenchmarkAllReduce runs float32 SUM all-reduces with ranks as goroutines,
// each mapping the arena itself. GOMAXPROCS is raised to the rank count so
// that every rank has an OS thread, as it would as a process; the kernel
// then shares the real cores between them. b.SetBytes is the buffer size
// (algbw); busbw = algbw * 2(P-1)/P.
func BenchmarkAllReduce(b *testing.B) {
	d := dtypeCase{reduce.Float32, reduce.Sum}
	for _, P := range []int{2, 4, 8} {
		for _, sz := range benchSizes {
			b.Run(fmt.Sprintf("%dranks/%s", P, sz.name), func(b *testing.B) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(P, runtime.NumCPU())))
				arenas := openGroup(b, P, nil)
				bufs := make([][]byte, P)
				for r := range bufs {
					bufs[r] = fill(d.dt, sz.n/4, uint64(r))
				}
				ctx := context.Background()
				b.SetBytes(int64(sz.n))
				b.ResetTimer()
				var wg sync.WaitGroup
				for r, a := range arenas {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < b.N; i++ {
							if err := a.AllReduce(ctx, bufs[r], 4, d.combine); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}

// benchRow is one cell of the cross-process benchmark.
type benchRow struct {
	Size  string
	Bytes int
	Iters int
	Time  time.Duration // per op, this rank
	CPU   time.Duration // user+system CPU per op, this process
}

// procBench times all-reduces in a child process: a warm-up, then about
// 0.3 s per size (agreed through a MAX all-reduce of the iteration count).
func procBench(ctx context.Context, a *Arena) ([]benchRow, error) {
	d := dtypeCase{reduce.Float32, reduce.Sum}
	var rows []benchRow
	for _, sz := range benchSizes {
		buf := fill(d.dt, sz.n/4, uint64(a.Rank()))
		for i := 0; i < 3; i++ {
			if err := a.AllReduce(ctx, buf, 4, d.combine); err != nil {
				return rows, err
			}
		}
		start := time.Now()
		if err := a.AllReduce(ctx, buf, 4, d.combine); err != nil {
			return rows, err
		}
		one := time.Since(start)
		iters := int64(min(max(300*time.Millisecond/max(one, time.Microsecond), 3), 20000))
		it := make([]byte, 8)
		for i := 0; i < 8; i++ {
			it[i] = byte(iters >> (8 * i))
		}
		if err := a.AllReduce(ctx, it, 8, func(dst, x, y []byte) error { return reduce.Combine3(reduce.Max, reduce.Int64, dst, x, y) }); err != nil {
			return rows, err
		}
		iters = 0
		for i := 7; i >= 0; i-- {
			iters = iters<<8 | int64(it[i])
		}
		if err := a.Barrier(ctx); err != nil {
			return rows, err
		}
		cpu0 := cpuTime()
		start = time.Now()
		for i := int64(0); i < iters; i++ {
			if err := a.AllReduce(ctx, buf, 4, d.combine); err != nil {
				return rows, err
			}
		}
		el := time.Since(start)
		rows = append(rows, benchRow{Size: sz.name, Bytes: sz.n, Iters: int(iters), Time: el / time.Duration(iters),
			CPU: (cpuTime() - cpu0) / time.Duration(iters)})
	}
	return rows, nil
}

// TestProcessBenchmark runs the all-reduce benchmark with real processes
// (GODIST_SHM_BENCH=1 to enable; GODIST_SHM_BENCH_RANKS picks the rank
// counts, default "2,4,8") and logs a table of time, algbw and busbw.
func TestProcessBenchmark(t *testing.T) {
	if os.Getenv("GODIST_SHM_BENCH") == "" {
		t.Skip("set GODIST_SHM_BENCH=1 to run")
	}
	ranks := os.Getenv("GODIST_SHM_BENCH_RANKS")
	if ranks == "" {
		ranks = "2,4,8"
	}
	for _, s := range strings.Split(ranks, ",") {
		P, _ := strconv.Atoi(s)
		results, exits := runChildren(t, "bench", P)
		for r := range results {
			if exits[r] != nil || results[r].Err != "" {
				t.Fatalf("child %d: %v %s", r, exits[r], results[r].Err)
			}
		}
		for i, row := range results[0].Bench {
			var sum, cpu time.Duration
			for r := range results {
				sum += results[r].Bench[i].Time
				cpu += results[r].Bench[i].CPU
			}
			avg := sum / time.Duration(P)
			alg := float64(row.Bytes) / avg.Seconds() / 1e9
			t.Logf("P=%d %6s  %10.2f µs  algbw %6.2f GB/s  busbw %6.2f GB/s  cpu/op/rank %8.2f µs  (%d iters)",
				P, row.Size, float64(avg.Nanoseconds())/1e3, alg, alg*2*float64(P-1)/float64(P),
				float64(cpu.Nanoseconds())/1e3/float64(P), row.Iters)
		}
	}
}

// BenchmarkCollectives times the other collectives with goroutine ranks
// (as BenchmarkAllReduce). n is the per-rank block; b.SetBytes follows
// nccl-tests: the buffer for broadcast, the total P*n for the others.
func BenchmarkCollectives(b *testing.B) {
	d := dtypeCase{reduce.Float32, reduce.Sum}
	type op struct {
		name  string
		total bool
		run   func(ctx context.Context, a *Arena, bufs [][]byte, out []byte) error
	}
	ops := []op{
		{"broadcast", false, func(ctx context.Context, a *Arena, bufs [][]byte, out []byte) error {
			return a.Broadcast(ctx, out, 0)
		}},
		{"allgather", true, func(ctx context.Context, a *Arena, bufs [][]byte, out []byte) error {
			return a.AllGather(ctx, out, bufs[:a.Size()])
		}},
		{"reduce_scatter", true, func(ctx context.Context, a *Arena, bufs [][]byte, out []byte) error {
			return a.ReduceScatter(ctx, bufs[:a.Size()], out, 4, d.combine)
		}},
		{"alltoall", true, func(ctx context.Context, a *Arena, bufs [][]byte, out []byte) error {
			return a.AllToAll(ctx, bufs[:a.Size()], bufs[a.Size():])
		}},
		{"barrier", false, func(ctx context.Context, a *Arena, bufs [][]byte, out []byte) error {
			return a.Barrier(ctx)
		}},
	}
	for _, P := range []int{2, 8} {
		for _, n := range []int{4 << 10, 1 << 20} {
			for _, o := range ops {
				b.Run(fmt.Sprintf("%dranks/%s/%dKiB", P, o.name, n>>10), func(b *testing.B) {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(P, runtime.NumCPU())))
					arenas := openGroup(b, P, nil)
					bufs := make([][][]byte, P)
					outs := make([][]byte, P)
					for r := range bufs {
						bufs[r] = make([][]byte, 2*P)
						for i := range bufs[r] {
							bufs[r][i] = make([]byte, n)
						}
						outs[r] = make([]byte, n)
					}
					if o.total {
						b.SetBytes(int64(P * n))
					} else if o.name != "barrier" {
						b.SetBytes(int64(n))
					}
					ctx := context.Background()
					b.ResetTimer()
					var wg sync.WaitGroup
					for r, a := range arenas {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := 0; i < b.N; i++ {
								if err := o.run(ctx, a, bufs[r], outs[r]); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
				})
			}
		}
	}
}
