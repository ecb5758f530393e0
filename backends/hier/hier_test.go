package hier

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

// memHost is a fake host offload: the host's ranks reach each other over
// an in-memory transport of their own, through the cross-host steps.
type memHost struct {
	tr  transport.Transport
	seq uint64
}

func (m *memHost) x(ctx context.Context) *xfer {
	m.seq++
	members := make([]int, m.tr.Size())
	for i := range members {
		members[i] = i
	}
	table := algo.Default()
	return &xfer{ctx: ctx, tr: m.tr, seq: m.seq, members: members, me: m.tr.Rank(), table: &table}
}

func (m *memHost) Name() string { return "mem" }
func (m *memHost) AllReduce(ctx context.Context, buf []byte, elem int, c backend.Combine) error {
	return m.x(ctx).allReduce(buf, elem, c, 0)
}
func (m *memHost) Broadcast(ctx context.Context, buf []byte, root int) error {
	return m.x(ctx).broadcast(buf, root, 0)
}
func (m *memHost) AllGather(ctx context.Context, in []byte, outs [][]byte) error {
	return m.x(ctx).allGather(in, outs, 0)
}
func (m *memHost) ReduceScatter(ctx context.Context, ins [][]byte, out []byte, _ int, c backend.Combine) error {
	return m.x(ctx).reduceScatter(ins, out, c, 0)
}
func (m *memHost) AllToAll(context.Context, [][]byte, [][]byte) error { return backend.ErrDeclined }
func (m *memHost) Barrier(ctx context.Context) error                  { return m.x(ctx).barrier(0) }
func (m *memHost) Abort(err error)                                    { m.tr.Abort(err) }
func (m *memHost) Close() error                                       { return m.tr.Close() }

// world builds the Offload of every rank of a group whose rank r runs on
// host place[r].
func world(t *testing.T, place []int) []*Offload {
	t.Helper()
	P := len(place)
	recs := make([]wire.PeerRecord, P)
	for r, h := range place {
		recs[r] = wire.PeerRecord{Hostname: fmt.Sprintf("h%d", h), BootID: "b"}
	}
	global := transport.NewMemNetwork(P)
	hosts := (&backend.Setup{Records: recs}).Hosts()
	nets := make([]*transport.MemNetwork, len(hosts))
	for h, ranks := range hosts {
		nets[h] = transport.NewMemNetwork(len(ranks))
	}
	out := make([]*Offload, P)
	for r := range P {
		topo := newTopology(&backend.Setup{Rank: r, Size: P, Records: recs})
		var local backend.Offload
		if len(topo.mine()) > 1 {
			local = &memHost{tr: nets[topo.host].Transport(topo.local)}
		}
		out[r] = newOffload(topo, local, global.Transport(r), algo.Default())
	}
	t.Cleanup(func() {
		for _, o := range out {
			_ = o.Close()
		}
	})
	return out
}

// each runs f on every rank at once.
func each(t *testing.T, offs []*Offload, f func(ctx context.Context, r int, o *Offload) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, len(offs))
	var wg sync.WaitGroup
	for r, o := range offs {
		wg.Go(func() { errs[r] = f(ctx, r, o) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

func addF32(dst, a, b []byte) error {
	for i := 0; i+4 <= len(dst); i += 4 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(a[i:]))
		y := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(x+y))
	}
	return nil
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// data is rank r's input of n float32s: random, so that reduction order
// changes the low bits and ranks that reduce differently disagree.
func data(r, n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(rng.Float32()*2-1))
	}
	return b
}

var topologies = map[string][]int{
	"2x2":               {0, 0, 1, 1},
	"2x2 interleaved":   {0, 1, 0, 1},
	"3x1":               {0, 1, 2},
	"2x3":               {0, 0, 0, 1, 1, 1},
	"3x2 interleaved":   {2, 0, 1, 0, 1, 2},
	"uneven 2+1":        {0, 0, 1},
	"uneven 3+1+2":      {0, 1, 0, 2, 2, 0},
	"uneven 1+3":        {0, 1, 1, 1},
	"4 hosts x2 ring":   {0, 0, 1, 1, 2, 2, 3, 3},
	"3 hosts x2 (ring)": {0, 0, 1, 1, 2, 2},
}

// shardMin is the default table's smallest all-reduce split across a
// host's ranks.
var shardMin = algo.Default().HierShardMin

// sizes in float32 elements: tiny, odd, small, and past shardMin (padded
// and not, in one segment and in several) so that every path runs.
var sizes = []int{1, 7, 1000, shardMin/4 + 3, 3 * shardMin / 4 * 2, 5<<18 + 1}

// bigTopologies are the topologies that also run buffers of several
// pipeline segments (sizes past segMin per rank).
var bigTopologies = map[string]bool{"2x2 interleaved": true, "3 hosts x2 (ring)": true}

// skipBig reports whether a case of n bytes per rank is left out: large
// buffers run on bigTopologies only, and not under the race detector.
func skipBig(name string, n int) bool { return n > 2*shardMin && (raceEnabled || !bigTopologies[name]) }

func TestAllReduce(t *testing.T) {
	for name, place := range topologies {
		for _, n := range sizes {
			if skipBig(name, 4*n) {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				offs := world(t, place)
				P := len(place)
				bufs := make([][]byte, P)
				want := make([]float64, n)
				for r := range P {
					bufs[r] = data(r, n, uint64(n))
					for i, v := range f32s(bufs[r]) {
						want[i] += float64(v)
					}
				}
				each(t, offs, func(ctx context.Context, r int, o *Offload) error { return o.AllReduce(ctx, bufs[r], 4, addF32) })
				for r := 1; r < P; r++ {
					require.Equal(t, bufs[0], bufs[r], "rank %d differs from rank 0", r)
				}
				for i, v := range f32s(bufs[0]) {
					require.InDelta(t, want[i], float64(v), 1e-4, "element %d", i)
				}
			})
		}
	}
}

func even(place []int) bool {
	count := map[int]int{}
	for _, h := range place {
		count[h]++
	}
	for _, c := range count {
		if c != count[place[0]] {
			return false
		}
	}
	return true
}

func TestBroadcast(t *testing.T) {
	for name, place := range topologies {
		for _, n := range []int{1, 1001, shardMin + 5} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				offs := world(t, place)
				P := len(place)
				for root := range P {
					want := data(root, n/4+1, uint64(root))[:n]
					bufs := make([][]byte, P)
					for r := range P {
						bufs[r] = make([]byte, n)
						if r == root {
							copy(bufs[r], want)
						}
					}
					each(t, offs, func(ctx context.Context, r int, o *Offload) error { return o.Broadcast(ctx, bufs[r], root) })
					for r := range P {
						require.Equal(t, want, bufs[r], "root %d rank %d", root, r)
					}
				}
			})
		}
	}
}

func TestAllGather(t *testing.T) {
	for name, place := range topologies {
		for _, n := range []int{1, 4096, shardMin, 5<<19 + 3} {
			if skipBig(name, n) {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				offs := world(t, place)
				P := len(place)
				ins := make([][]byte, P)
				outs := make([][][]byte, P)
				for r := range P {
					ins[r] = data(r, n/4+1, 7)[:n]
					outs[r] = make([][]byte, P)
					for q := range outs[r] {
						outs[r][q] = make([]byte, n)
					}
				}
				if !even(place) {
					require.ErrorIs(t, offs[0].AllGather(context.Background(), ins[0], outs[0]), backend.ErrDeclined)
					return
				}
				each(t, offs, func(ctx context.Context, r int, o *Offload) error { return o.AllGather(ctx, ins[r], outs[r]) })
				for r := range P {
					require.Equal(t, ins, outs[r], "rank %d", r)
				}
			})
		}
	}
}

func TestReduceScatter(t *testing.T) {
	for name, place := range topologies {
		for _, n := range []int{1, 999, shardMin / 4, 5<<17 + 1} {
			if skipBig(name, 4*n) {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				offs := world(t, place)
				P := len(place)
				ins := make([][][]byte, P)
				outs := make([][]byte, P)
				for r := range P {
					ins[r] = make([][]byte, P)
					for q := range P {
						ins[r][q] = data(r*P+q, n, 3)
					}
					outs[r] = make([]byte, 4*n)
				}
				if !even(place) {
					require.ErrorIs(t, offs[0].ReduceScatter(context.Background(), ins[0], outs[0], 4, addF32), backend.ErrDeclined)
					return
				}
				each(t, offs, func(ctx context.Context, r int, o *Offload) error {
					return o.ReduceScatter(ctx, ins[r], outs[r], 4, addF32)
				})
				for r := range P {
					want := make([]float64, n)
					for q := range P {
						for i, v := range f32s(ins[q][r]) {
							want[i] += float64(v)
						}
					}
					for i, v := range f32s(outs[r]) {
						require.InDelta(t, want[i], float64(v), 1e-4, "rank %d element %d", r, i)
					}
				}
			})
		}
	}
}

func TestBarrier(t *testing.T) {
	for name, place := range topologies {
		t.Run(name, func(t *testing.T) {
			offs := world(t, place)
			var mu sync.Mutex
			arrived := 0
			each(t, offs, func(ctx context.Context, r int, o *Offload) error {
				if r == 0 { // the last in: the others must wait for it
					if !testutil.WaitUntil(5*time.Second, func() bool {
						mu.Lock()
						defer mu.Unlock()
						return arrived == len(place)-1
					}) {
						return fmt.Errorf("rank 0: the other %d ranks did not arrive", len(place)-1)
					}
				}
				mu.Lock()
				arrived++
				mu.Unlock()
				if err := o.Barrier(ctx); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if arrived != len(place) {
					return fmt.Errorf("rank %d left the barrier with %d of %d ranks in", r, arrived, len(place))
				}
				return nil
			})
		})
	}
}

// A rank that dies mid-call fails its peers' call with an error, within
// the deadline.
func TestLostPeer(t *testing.T) {
	place := []int{0, 0, 1, 1}
	P := len(place)
	recs := make([]wire.PeerRecord, P)
	for r, h := range place {
		recs[r] = wire.PeerRecord{Hostname: fmt.Sprintf("h%d", h), BootID: "b"}
	}
	global := transport.NewMemNetwork(P)
	nets := []*transport.MemNetwork{transport.NewMemNetwork(2), transport.NewMemNetwork(2)}
	offs := make([]*Offload, P)
	for r := range P {
		topo := newTopology(&backend.Setup{Rank: r, Size: P, Records: recs})
		offs[r] = newOffload(topo, &memHost{tr: nets[topo.host].Transport(topo.local)}, global.Transport(r), algo.Default())
	}
	global.Kill(3)
	// Rank 3 dies on its host too once rank 2, its host peer, is in the
	// call: at rank 2's first send on the host.
	inCall := make(chan struct{})
	var once sync.Once
	nets[1].Hook = func(from, _ int, _ transport.Tag, _ int) error {
		if from == 0 {
			once.Do(func() { close(inCall) })
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, P)
	for r := range 3 {
		buf := data(r, shardMin, 1)
		wg.Go(func() { errs[r] = offs[r].AllReduce(ctx, buf, 4, addF32) })
	}
	go func() {
		select {
		case <-inCall:
			nets[1].Kill(1)
		case <-ctx.Done():
		}
	}()
	wg.Wait()
	for r := range 3 {
		require.Error(t, errs[r], "rank %d", r)
	}
}

func TestEmpty(t *testing.T) {
	offs := world(t, []int{0, 0, 1})
	each(t, offs, func(ctx context.Context, r int, o *Offload) error {
		if err := o.AllReduce(ctx, nil, 4, addF32); err != nil {
			return err
		}
		if err := o.Broadcast(ctx, []byte{}, 2); err != nil {
			return err
		}
		return o.Barrier(ctx)
	})
	offs = world(t, []int{0, 0, 1, 1})
	each(t, offs, func(ctx context.Context, r int, o *Offload) error {
		outs := [][]byte{{}, {}, {}, {}}
		if err := o.AllGather(ctx, nil, outs); err != nil {
			return err
		}
		return o.ReduceScatter(ctx, outs, nil, 4, addF32)
	})
}

func TestTopology(t *testing.T) {
	recs := []wire.PeerRecord{{Hostname: "a", BootID: "b"}, {Hostname: "b", BootID: "b"}, {Hostname: "a", BootID: "b"}}
	topo := newTopology(&backend.Setup{Rank: 2, Size: 3, Records: recs})
	require.Equal(t, [][]int{{0, 2}, {1}}, topo.hosts)
	require.Equal(t, 0, topo.host)
	require.Equal(t, 1, topo.local)
	require.False(t, topo.even)
	require.True(t, topo.worthwhile())
	require.Equal(t, []int{0, 1}, topo.leaders())
	require.Equal(t, []int{2}, topo.column(1))
	one := newTopology(&backend.Setup{Rank: 0, Size: 2, Records: recs[:1:1]})
	require.False(t, one.worthwhile(), "one host")
	spread := newTopology(&backend.Setup{Rank: 0, Size: 2, Records: recs[:2]})
	require.False(t, spread.worthwhile(), "one rank per host")
}
