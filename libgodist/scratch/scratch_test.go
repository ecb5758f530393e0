package scratch

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func TestGetPut(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 4097, 1 << 20, 3<<20 + 5} {
		b := Get(n)
		require.Len(t, b, n)
		for i := range b {
			b[i] = 0xAB
		}
		Put(b)
		c := Get(n)
		require.Len(t, c, n)
		if n >= 4096 {
			require.Equal(t, 0, cap(c)&(cap(c)-1), "capacity %d is a power of two", cap(c))
			require.GreaterOrEqual(t, cap(c), n)
		}
		Put(c)
	}
}

func TestPutForeign(t *testing.T) {
	Put(make([]byte, 5000))         // not a power of two: dropped
	Put(make([]byte, 10, 8192))     // a power of two: kept, handed out whole
	require.Len(t, Get(8000), 8000) // whatever comes back has the asked length
	Put(nil)
}

func TestClass(t *testing.T) {
	require.Equal(t, -1, class(100))
	require.Equal(t, 12, class(4096))
	require.Equal(t, 13, class(4097))
	require.Equal(t, 30, class(1<<30))
	require.Equal(t, -1, class(1<<30+1))
}

func BenchmarkGetPut1MiB(b *testing.B) {
	for i := 0; i < b.N; i++ {
		Put(Get(1 << 20))
	}
}

// Buffers given back on several Ps at once are all handed out again on
// one (a sync.Pool keeps each in the private slot of the P it was put on,
// out of the others' reach).
func TestReuseAcrossPs(t *testing.T) {
	const k = 4
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(k))
	drain(t)
	var running atomic.Int32
	put := make(chan uintptr, k)
	var wg sync.WaitGroup
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := Get(3 << 20)
			running.Add(1)
			for running.Load() < k { // all k at once: each on a P of its own
			}
			put <- uintptr(unsafe.Pointer(&b[0]))
			Put(b)
		}()
	}
	wg.Wait()
	close(put)
	want := map[uintptr]bool{}
	for p := range put {
		want[p] = true
	}
	for range k {
		b := Get(3 << 20)
		require.True(t, want[uintptr(unsafe.Pointer(&b[0]))], "a buffer given back was not reused")
	}
	drain(t)
}

func TestKeptIsBounded(t *testing.T) {
	drain(t)
	k := class(1 << 20)
	var bs [][]byte
	for range perClass(k) + 10 {
		bs = append(bs, Get(1<<20))
	}
	for _, b := range bs {
		Put(b)
	}
	require.Equal(t, perClass(k)<<20, keptBytes())
	require.Equal(t, 256, perClass(class(1<<20)))
	require.Equal(t, 4, perClass(class(1<<30)))
	require.Equal(t, 256, perClass(class(4096)))
	drain(t)
}

func TestIdleBuffersAreDropped(t *testing.T) {
	drain(t)
	base := time.Now()
	clock := base
	now = func() time.Time { return clock }
	defer func() { now = time.Now }()

	Put(make([]byte, 8192))
	clock = base.Add(idleDrop / 2)
	Put(make([]byte, 1<<16))
	require.Equal(t, 8192+1<<16, keptBytes())
	clock = base.Add(idleDrop + time.Second) // the first is idle long enough
	b := Get(100 << 10)                      // another class: nothing kept there
	require.Equal(t, 1<<16, keptBytes())
	Put(b)
	clock = base.Add(3 * idleDrop)
	Get(4096)
	require.Equal(t, 0, keptBytes())
}

// drain empties the free lists.
func drain(t *testing.T) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	for k := range classes {
		classes[k] = nil
	}
	kept = 0
	trimmed = time.Time{}
}
