package libgodist

import (
	"fmt"
	"testing"
	"time"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/libgodist/reduce"
)

// TestInlineAllReduceAllocs: a synchronous all-reduce allocates its task
// (with its Work, context and comm) and its closure, nothing more; an
// offload's combine function is a shared one (reduce.Combiner).
func TestInlineAllReduceAllocs(t *testing.T) {
	pgs, _ := group(t, 1, time.Minute)
	buf := make([]byte, 8)
	a := ReduceArgs{DType: reduce.Float32, Op: reduce.Sum}
	allocs := testing.AllocsPerRun(1000, func() {
		w, err := pgs[0].AllReduce(buf, a, Opts{Inline: true})
		if err != nil || w.Err() != nil {
			t.Fatal(err, w.Err())
		}
	})
	if allocs > 2 {
		t.Fatalf("%v allocations per all-reduce, want at most 2", allocs)
	}
	s := reduceSpec{dt: reduce.BFloat16, op: reduce.Max}
	if n := testing.AllocsPerRun(100, func() { _ = s.combiner() }); n != 0 {
		t.Fatalf("combiner allocates %v times", n)
	}
}

// BenchmarkInlineAllReduce measures the engine's cost of one synchronous
// all-reduce on a group of one (no communication): argument checks, the
// executor, the deadline and the Work; with the flight recorder (the
// default) and without it.
func BenchmarkInlineAllReduce(b *testing.B) {
	for _, entries := range []int{DefaultFlightEntries, 0} {
		b.Run(fmt.Sprintf("flight=%d", entries), func(b *testing.B) {
			pgs, _ := group(b, 1, time.Minute)
			pgs[0].SetFlightEntries(entries)
			buf := make([]byte, 8)
			a := ReduceArgs{DType: reduce.Float32, Op: reduce.Sum}
			b.ReportAllocs()
			for b.Loop() {
				w, err := pgs[0].AllReduce(buf, a, Opts{Inline: true})
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInlineAllReduceShm measures a synchronous 8-byte all-reduce
// through the whole engine on two ranks (goroutines) sharing an arena.
func BenchmarkInlineAllReduceShm(b *testing.B) {
	pgs := connectGroup(b, 2, "", nil)
	a := ReduceArgs{DType: reduce.Float32, Op: reduce.Sum}
	b.ReportAllocs()
	done := make(chan error, 1)
	n := b.N
	go func() { done <- allReduceN(pgs[1], make([]byte, 8), a, n) }()
	if err := allReduceN(pgs[0], make([]byte, 8), a, n); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTCPAllReduceSmall measures a synchronous 8-byte all-reduce
// through the whole engine on two ranks (goroutines) over loopback TCP:
// the latency path (recursive doubling, one exchange).
func BenchmarkTCPAllReduceSmall(b *testing.B) {
	pgs := connectGroup(b, 2, assemble.TransportTCP, nil)
	a := ReduceArgs{DType: reduce.Float32, Op: reduce.Sum}
	b.ReportAllocs()
	done := make(chan error, 1)
	n := b.N
	go func() { done <- allReduceN(pgs[1], make([]byte, 8), a, n) }()
	if err := allReduceN(pgs[0], make([]byte, 8), a, n); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTCPAllReduce measures a synchronous float32 all-reduce over the
// TCP transport (loopback) with the ranks as goroutines of this process:
// the ring's pipelining and the transport's sends and reads, without
// Python. Sub-benchmarks by world size and bytes; SetBytes is the buffer
// size, so MB/s is algbw.
func BenchmarkTCPAllReduce(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		for _, size := range []int{2 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("P%d/%dMiB", n, size>>20), func(b *testing.B) {
				pgs := connectGroup(b, n, assemble.TransportTCP, nil)
				a := ReduceArgs{DType: reduce.Float32, Op: reduce.Sum}
				bufs := make([][]byte, n)
				for r := range bufs {
					bufs[r] = make([]byte, size)
				}
				b.SetBytes(int64(size))
				iters := b.N
				errs := make(chan error, n)
				b.ResetTimer()
				for r := range pgs {
					go func() { errs <- allReduceN(pgs[r], bufs[r], a, iters) }()
				}
				for range pgs {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// allReduceN runs n synchronous all-reduces of buf on pg.
func allReduceN(pg *ProcessGroup, buf []byte, a ReduceArgs, n int) error {
	for range n {
		w, err := pg.AllReduce(buf, a, Opts{Inline: true})
		if err == nil {
			err = w.Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}
