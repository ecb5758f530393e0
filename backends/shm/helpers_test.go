package shm

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/reduce"
)

var nameSeq atomic.Uint64

// uniqueName returns an arena name no other test (or test process) uses.
func uniqueName() string {
	return fmt.Sprintf("godist-shmtest-%d-%d", os.Getpid(), nameSeq.Add(1))
}

// openGroup opens one arena per local rank, each rank mapping the file
// independently (as separate processes would), and closes them at cleanup.
func openGroup(t testing.TB, size int, mod func(*Config)) []*Arena {
	t.Helper()
	name := uniqueName()
	arenas := make([]*Arena, size)
	errs := make([]error, size)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := 0; r < size; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Name: name, Rank: r, Size: size}
			if mod != nil {
				mod(&cfg)
			}
			arenas[r], errs[r] = Open(ctx, cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() { closeAll(arenas) })
	return arenas
}

func closeAll(arenas []*Arena) {
	var wg sync.WaitGroup
	for _, a := range arenas {
		if a != nil {
			wg.Add(1)
			go func() { defer wg.Done(); _ = a.Close() }()
		}
	}
	wg.Wait()
}

// onAll runs f on every rank concurrently and returns the errors by rank.
func onAll(arenas []*Arena, f func(r int, a *Arena) error) []error {
	errs := make([]error, len(arenas))
	var wg sync.WaitGroup
	for r, a := range arenas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r, a)
		}()
	}
	wg.Wait()
	return errs
}

func requireAllOK(t testing.TB, errs []error, what string) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "%s: rank %d", what, r)
	}
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dtypeCase is a dtype and op to reduce with.
type dtypeCase struct {
	dt reduce.DType
	op reduce.Op
}

func (d dtypeCase) combine(dst, a, b []byte) error { return reduce.Combine3(d.op, d.dt, dst, a, b) }

func (d dtypeCase) String() string { return fmt.Sprintf("%v-%v", d.dt, d.op) }

var dtypeCases = []dtypeCase{
	{reduce.Float32, reduce.Sum},
	{reduce.BFloat16, reduce.Sum},
	{reduce.Int64, reduce.Max},
	{reduce.Complex128, reduce.Sum},
}

// fill returns count elements of dt with values that depend on seed: small
// floats of mixed sign and magnitude (so summation order shows in the
// bits), or integers.
func fill(dt reduce.DType, count int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	es := dt.Size()
	b := make([]byte, count*es)
	for i := 0; i < count; i++ {
		e := b[i*es : (i+1)*es]
		f := (rng.Float64()*2 - 1) * math.Pow(10, float64(rng.IntN(6)-3))
		switch dt {
		case reduce.Float32:
			putU32(e, math.Float32bits(float32(f)))
		case reduce.BFloat16:
			v := reduce.Float32ToBFloat16(float32(f))
			e[0], e[1] = byte(v), byte(v>>8)
		case reduce.Complex128:
			putU64(e, math.Float64bits(f))
			putU64(e[8:], math.Float64bits(-f/3))
		default:
			for j := range e {
				e[j] = byte(rng.Uint32())
			}
		}
	}
	return b
}

func putU32(b []byte, v uint32) {
	for i := 0; i < 4; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

func putU64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

// refReduce folds bufs in rank order, the order the arena guarantees.
func refReduce(t testing.TB, d dtypeCase, bufs [][]byte) []byte {
	out := append([]byte(nil), bufs[0]...)
	for _, b := range bufs[1:] {
		require.NoError(t, d.combine(out, out, b))
	}
	return out
}

// requireNoLeak waits (briefly) for the goroutine count to fall back to base.
func requireNoLeak(t testing.TB, base int) {
	t.Helper()
	if !testutil.WaitUntil(5*time.Second, func() bool { return runtime.NumGoroutine() <= base }) {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines leaked: %d > %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
	}
}

// asleep counts the waits, by any rank of a's group, that are in the sleep
// phase of the wait policy (futex(2) on a word of some rank, registered in
// that rank's sleeper counts): collective waits on a rank's step blocks
// and counters, and waits on its doorbell. A rank that waits for a peer
// that never comes ends up there within a few hundred microseconds.
func asleep(a *Arena) int {
	n := 0
	for r := 0; r < a.size; r++ {
		for i := sleepBlk0; i <= sleepR; i++ {
			n += int(a.sleepers(r, i).Load())
		}
		n += int(a.u32(a.ctl(r) + ctlBell + 4).Load())
	}
	return n
}

func randBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// checkAllToAll runs AllToAll on every rank, block r->q holding size(r, q)
// random bytes, and requires every rank to receive every block intact.
func checkAllToAll(t testing.TB, ctx context.Context, arenas []*Arena, size func(r, q int) int, what string) {
	t.Helper()
	P := len(arenas)
	ins := make([][][]byte, P)
	outs := make([][][]byte, P)
	for r := range ins {
		ins[r] = make([][]byte, P)
		outs[r] = make([][]byte, P)
		for q := range ins[r] {
			ins[r][q] = randBytes(size(r, q), uint64(r*100+q))
			outs[r][q] = make([]byte, size(q, r))
		}
	}
	requireAllOK(t, onAll(arenas, func(r int, a *Arena) error { return a.AllToAll(ctx, ins[r], outs[r]) }), what)
	for r := range outs {
		for q := range outs[r] {
			require.True(t, bytes.Equal(ins[q][r], outs[r][q]), "%s: rank %d block from %d", what, r, q)
		}
	}
}
