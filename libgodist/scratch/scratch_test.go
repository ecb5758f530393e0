package scratch

import (
	"testing"

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
