package shm

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/reduce"
)

// testChunk is the shrunken chunk size the collective tests use, so that
// small counts already go through many chunks.
const testChunk = 1024

// groupConfigs are the layouts every collective is tested with.
var groupConfigs = []struct {
	name string
	mod  func(*Config)
	nt   bool // every copy into the arena non-temporal (publish.go)
}{
	{"default-oneshot", func(c *Config) { c.ChunkSize = testChunk; c.OneShotMax = 512 }, false},
	{"twoshot-only", func(c *Config) { c.ChunkSize = testChunk; c.OneShotMax = -1; c.DirectMin = -1 }, false},
	// Single copy from 2 KiB on (direct.go), with pieces of testChunk.
	{"direct", func(c *Config) { c.ChunkSize = testChunk; c.OneShotMax = 256; c.DirectMin = 2 * testChunk }, false},
	{"non-temporal", func(c *Config) { c.ChunkSize = testChunk; c.OneShotMax = 512; c.DirectMin = -1 }, true},
}

var worldSizes = []int{1, 2, 3, 4, 5, 8}

// counts returns the element counts to test for elements of es bytes:
// 0, 1, odd, around the inline limit, around the chunk, and several chunks.
func counts(es int) []int {
	c := testChunk / es
	in := InlineSize / es
	return []int{0, 1, 7, in - 1, in, in + 1, c - 1, c, c + 1, 3*c + 5}
}

func eachGroup(t *testing.T, f func(t *testing.T, arenas []*Arena)) {
	for _, gc := range groupConfigs {
		for _, p := range worldSizes {
			t.Run(fmt.Sprintf("%s/P%d", gc.name, p), func(t *testing.T) {
				forceNonTemporal.Store(gc.nt)
				defer forceNonTemporal.Store(false)
				f(t, openGroup(t, p, gc.mod))
			})
		}
	}
}

func TestAllReduce(t *testing.T) {
	eachGroup(t, func(t *testing.T, arenas []*Arena) {
		P := len(arenas)
		ctx := testCtx(t, 30*time.Second)
		for _, d := range dtypeCases {
			for _, n := range counts(d.dt.Size()) {
				ins := make([][]byte, P)
				bufs := make([][]byte, P)
				for r := range ins {
					ins[r] = fill(d.dt, n, uint64(r*1000+n))
					bufs[r] = append([]byte(nil), ins[r]...)
				}
				want := refReduce(t, d, ins)
				requireAllOK(t, onAll(arenas, func(r int, a *Arena) error {
					return a.AllReduce(ctx, bufs[r], d.dt.Size(), d.combine)
				}), fmt.Sprintf("%v n=%d", d, n))
				for r := range bufs {
					require.True(t, bytes.Equal(want, bufs[r]), "%v n=%d rank %d differs from the rank-order reference", d, n, r)
				}
			}
		}
	})
}

func TestBroadcast(t *testing.T) {
	eachGroup(t, func(t *testing.T, arenas []*Arena) {
		P := len(arenas)
		ctx := testCtx(t, 30*time.Second)
		for _, n := range counts(1) {
			for _, root := range []int{0, P - 1, P / 2} {
				data := randBytes(n, uint64(n*10+root))
				bufs := make([][]byte, P)
				for r := range bufs {
					bufs[r] = randBytes(n, uint64(r+99))
				}
				copy(bufs[root], data)
				requireAllOK(t, onAll(arenas, func(r int, a *Arena) error { return a.Broadcast(ctx, bufs[r], root) }),
					fmt.Sprintf("n=%d root=%d", n, root))
				for r := range bufs {
					require.True(t, bytes.Equal(data, bufs[r]), "n=%d root=%d rank %d", n, root, r)
				}
			}
		}
	})
}

func TestAllGather(t *testing.T) {
	eachGroup(t, func(t *testing.T, arenas []*Arena) {
		P := len(arenas)
		ctx := testCtx(t, 30*time.Second)
		for _, n := range counts(1) {
			for _, inPlace := range []bool{false, true} {
				ins := make([][]byte, P)
				outs := make([][][]byte, P)
				for r := range ins {
					ins[r] = randBytes(n, uint64(r*77+n))
					flat := make([]byte, P*n)
					outs[r] = make([][]byte, P)
					for q := range outs[r] {
						outs[r][q] = flat[q*n : (q+1)*n]
					}
				}
				requireAllOK(t, onAll(arenas, func(r int, a *Arena) error {
					in := ins[r]
					if inPlace {
						in = outs[r][r]
						copy(in, ins[r])
					}
					return a.AllGather(ctx, in, outs[r])
				}), fmt.Sprintf("n=%d", n))
				for r := range outs {
					for q := range outs[r] {
						require.True(t, bytes.Equal(ins[q], outs[r][q]), "n=%d in-place=%v rank %d block %d", n, inPlace, r, q)
					}
				}
			}
		}
	})
}

func TestReduceScatter(t *testing.T) {
	eachGroup(t, func(t *testing.T, arenas []*Arena) {
		P := len(arenas)
		ctx := testCtx(t, 30*time.Second)
		for _, d := range dtypeCases[:3] {
			for _, n := range counts(d.dt.Size()) {
				for _, inPlace := range []bool{false, true} {
					nb := n * d.dt.Size()
					ins := make([][][]byte, P) // ins[r][q]: rank r's block for rank q
					for r := range ins {
						ins[r] = make([][]byte, P)
						flat := fill(d.dt, n*P, uint64(r*31+n))
						for q := range ins[r] {
							ins[r][q] = flat[q*nb : (q+1)*nb]
						}
					}
					want := make([][]byte, P)
					for q := range want {
						col := make([][]byte, P)
						for r := range col {
							col[r] = ins[r][q]
						}
						want[q] = refReduce(t, d, col)
					}
					outs := make([][]byte, P)
					requireAllOK(t, onAll(arenas, func(r int, a *Arena) error {
						if inPlace {
							outs[r] = ins[r][r]
						} else {
							outs[r] = make([]byte, nb)
						}
						return a.ReduceScatter(ctx, ins[r], outs[r], d.dt.Size(), d.combine)
					}), fmt.Sprintf("%v n=%d", d, n))
					for r := range outs {
						require.True(t, bytes.Equal(want[r], outs[r]), "%v n=%d in-place=%v rank %d", d, n, inPlace, r)
					}
				}
			}
		}
	})
}

func TestAllToAll(t *testing.T) {
	eachGroup(t, func(t *testing.T, arenas []*Arena) {
		ctx := testCtx(t, 30*time.Second)
		for _, unit := range []int{0, 1, 13, testChunk / 8, testChunk + 1} {
			// Block r->q has a size that depends on both ends (some empty).
			size := func(r, q int) int { return unit * ((r*3 + q*5) % 4) }
			checkAllToAll(t, ctx, arenas, size, fmt.Sprintf("unit=%d", unit))
		}
	})
}

func TestBarrier(t *testing.T) {
	for _, P := range worldSizes {
		t.Run(fmt.Sprintf("P%d", P), func(t *testing.T) {
			arenas := openGroup(t, P, nil)
			ctx := testCtx(t, 30*time.Second)
			var arrived atomic.Int64
			const rounds = 50
			requireAllOK(t, onAll(arenas, func(r int, a *Arena) error {
				for i := 1; i <= rounds; i++ {
					arrived.Add(1)
					if err := a.Barrier(ctx); err != nil {
						return err
					}
					if got := arrived.Load(); got < int64(i*P) {
						return fmt.Errorf("round %d: left the barrier with %d arrivals", i, got)
					}
					if err := a.Barrier(ctx); err != nil { // nobody starts round i+1 before all checked
						return err
					}
				}
				return nil
			}), "barrier")
		})
	}
}

// TestMixedSequence interleaves every collective on one arena, so that steps
// of one operation reuse the slots of the previous ones in every pattern.
func TestMixedSequence(t *testing.T) {
	arenas := openGroup(t, 4, func(c *Config) { c.ChunkSize = testChunk; c.OneShotMax = 256 })
	ctx := testCtx(t, 30*time.Second)
	d := dtypeCases[0]
	requireAllOK(t, onAll(arenas, func(r int, a *Arena) error {
		for i := 0; i < 40; i++ {
			n := []int{1, 100, 700, 3000}[i%4]
			buf := fill(reduce.Float32, n, uint64(i))
			if err := a.AllReduce(ctx, buf, 4, d.combine); err != nil {
				return err
			}
			bb := make([]byte, n*3)
			if r == i%4 {
				copy(bb, randBytes(n*3, uint64(i)))
			}
			if err := a.Broadcast(ctx, bb, i%4); err != nil {
				return err
			}
			if !bytes.Equal(bb, randBytes(n*3, uint64(i))) {
				return fmt.Errorf("op %d: broadcast data wrong", i)
			}
			outs := [][]byte{make([]byte, n), make([]byte, n), make([]byte, n), make([]byte, n)}
			if err := a.AllGather(ctx, randBytes(n, uint64(r)), outs); err != nil {
				return err
			}
			if i%7 == 0 {
				if err := a.Barrier(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}), "mixed")
}

func TestInvalidArguments(t *testing.T) {
	a := openGroup(t, 2, nil)[0]
	ctx := context.Background()
	c := dtypeCases[0].combine
	require.ErrorIs(t, a.AllReduce(ctx, make([]byte, 6), 4, c), ErrInvalid)
	require.ErrorIs(t, a.AllReduce(ctx, make([]byte, 8), 0, c), ErrInvalid)
	require.ErrorIs(t, a.AllReduce(ctx, make([]byte, 8), 4, nil), ErrInvalid)
	require.ErrorIs(t, a.Broadcast(ctx, nil, 2), ErrInvalid)
	require.ErrorIs(t, a.AllGather(ctx, make([]byte, 4), [][]byte{make([]byte, 4)}), ErrInvalid)
	require.ErrorIs(t, a.AllGather(ctx, make([]byte, 4), [][]byte{make([]byte, 4), make([]byte, 3)}), ErrInvalid)
	buf := make([]byte, 8)
	require.ErrorIs(t, a.AllGather(ctx, buf[:4], [][]byte{buf[4:], buf[:4]}), ErrInvalid) // output 1 is the input of rank 0
	require.ErrorIs(t, a.ReduceScatter(ctx, [][]byte{buf[:4], buf[4:]}, buf[4:], 4, c), ErrInvalid)
	require.ErrorIs(t, a.ReduceScatter(ctx, [][]byte{buf[:4], buf[4:]}, make([]byte, 8), 4, c), ErrInvalid)
	require.ErrorIs(t, a.AllToAll(ctx, [][]byte{buf[:4], buf[4:]}, [][]byte{make([]byte, 4), buf[:4]}), ErrInvalid)
	require.ErrorIs(t, a.AllToAll(ctx, [][]byte{buf[:4]}, [][]byte{buf[:4]}), ErrInvalid)
}

// TestCombineError: an error from the combine function reaches every rank
// (wrapped), and the arena stays usable.
func TestCombineError(t *testing.T) {
	for _, n := range []int{8, 600, 5000} {
		arenas := openGroup(t, 3, func(c *Config) { c.ChunkSize = testChunk; c.OneShotMax = 512 })
		ctx := testCtx(t, 10*time.Second)
		boom := fmt.Errorf("boom")
		bad := func(dst, x, y []byte) error { return boom }
		errs := onAll(arenas, func(r int, a *Arena) error { return a.AllReduce(ctx, make([]byte, n), 4, bad) })
		for r, err := range errs {
			require.ErrorIs(t, err, boom, "n=%d rank %d", n, r)
		}
		errs = onAll(arenas, func(r int, a *Arena) error {
			ins := [][]byte{make([]byte, n), make([]byte, n), make([]byte, n)}
			return a.ReduceScatter(ctx, ins, make([]byte, n), 4, bad)
		})
		for r, err := range errs {
			require.ErrorIs(t, err, boom, "n=%d rank %d", n, r)
		}
		requireAllOK(t, onAll(arenas, func(r int, a *Arena) error {
			return a.AllReduce(ctx, make([]byte, n), 4, dtypeCases[0].combine)
		}), "after combine error")
	}
}
