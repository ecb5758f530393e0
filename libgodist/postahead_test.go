package libgodist

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// aheadProbe wraps a rank's transport: its sends to slowTo wait for gate
// (or, should it never open, gateWait), and it records how many collective
// receives from watch were outstanding at once (posted, not yet
// complete), opening reached once that count is want.
type aheadProbe struct {
	transport.Transport
	slowTo, watch int
	gate          <-chan struct{}
	gateOnce      sync.Once

	mu      sync.Mutex
	pending []*transport.Recv
	most    int
	want    int
	reached chan struct{}
}

// gateWait bounds the hold on a send whose gate never opens (a ring that
// does not post ahead): the op then completes and the count is checked.
const gateWait = 3 * time.Second

func (p *aheadProbe) Send(ctx context.Context, peer int, tag transport.Tag, data []byte) error {
	if peer == p.slowTo {
		p.gateOnce.Do(func() {
			select {
			case <-p.gate:
			case <-time.After(gateWait):
			}
		})
	}
	return p.Transport.Send(ctx, peer, tag, data)
}

func (p *aheadProbe) PostRecv(peer int, tag transport.Tag, buf []byte) *transport.Recv {
	return p.track(peer, tag, p.Transport.PostRecv(peer, tag, buf))
}

func (p *aheadProbe) PostFold(peer int, tag transport.Tag, buf []byte, f transport.Fold) *transport.Recv {
	return p.track(peer, tag, p.Transport.PostFold(peer, tag, buf, f))
}

func (p *aheadProbe) track(peer int, tag transport.Tag, rv *transport.Recv) *transport.Recv {
	if peer != p.watch || tag>>60 != transport.CollTag(0, 0)>>60 {
		return rv
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := p.pending[:0]
	for _, q := range p.pending {
		select {
		case <-q.Done():
		default:
			keep = append(keep, q)
		}
	}
	p.pending = append(keep, rv)
	if len(p.pending) > p.most {
		p.most = len(p.pending)
		if p.most == p.want {
			close(p.reached)
		}
	}
	return rv
}

func (p *aheadProbe) mostPending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.most
}

// TestRingsPostReceivesAhead: the TCP rings (the direct and the pipelined
// all-reduce ring, reduce_scatter, all_gather) post a step's receive before
// the previous step's data has arrived, so a left neighbour that runs ahead
// sends into place instead of into an unexpected-message buffer (a copy
// more, and memory for it). Rank 0 sends to rank 1 slowly: a ring that
// posted step k+1 only after step k completed never has two receives
// outstanding. The pipelined ring posts every step's receive at the start.
//
// Rank 0's first send to rank 1 is held until rank 1 has the expected
// number of receives from it outstanding: they must all be posted before
// any of rank 0's data arrives.
func TestRingsPostReceivesAhead(t *testing.T) {
	const n, count = 3, 3000
	in := func(r int) []byte {
		b := make([]byte, 4*count)
		for i := range count {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(r*count+i))
		}
		return b
	}
	sum := func(bs ...[]byte) []byte {
		out := make([]byte, len(bs[0]))
		for i := 0; i < len(out); i += 4 {
			var s uint32
			for _, b := range bs {
				s += binary.LittleEndian.Uint32(b[i:])
			}
			binary.LittleEndian.PutUint32(out[i:], s)
		}
		return out
	}
	args := ReduceArgs{DType: reduce.Int32, Op: reduce.Sum}
	allReduce := func(r int, pg *ProcessGroup) (*Work, func() []byte, error) {
		buf := in(r)
		w, err := pg.AllReduce(buf, args, Opts{})
		return w, func() []byte { return buf }, err
	}
	for _, tc := range []struct {
		name      string
		run       func(r int, pg *ProcessGroup) (*Work, func() []byte, error)
		want      []byte
		pipelined bool // the pipelined all-reduce ring, not the direct one
		ahead     int  // receives from the left neighbour outstanding at once, at least
	}{
		{"all_reduce", allReduce, sum(in(0), in(1), in(2)), false, 2},
		{"all_reduce_pipelined", allReduce, sum(in(0), in(1), in(2)), true, 2 * (n - 1) * 4}, // four segments a step
		{"reduce_scatter", func(r int, pg *ProcessGroup) (*Work, func() []byte, error) {
			ins := [][]byte{in(3 * r), in(3*r + 1), in(3*r + 2)}
			out := make([]byte, 4*count)
			w, err := pg.ReduceScatter(ins, out, args, Opts{})
			return w, func() []byte { return out }, err
		}, nil, false, 2},
		{"all_gather", func(r int, pg *ProcessGroup) (*Work, func() []byte, error) {
			outs := [][]byte{make([]byte, 4*count), make([]byte, 4*count), make([]byte, 4*count)}
			w, err := pg.AllGather(in(r), outs, Opts{})
			return w, func() []byte { return append(append(append([]byte(nil), outs[0]...), outs[1]...), outs[2]...) }, err
		}, append(append(in(0), in(1)...), in(2)...), false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tune := algo.Default()
			tune.AllReduceRDMax = 16
			if tc.pipelined {
				tune.RingSegment = 1000 // 4000-byte chunks: four segments a step
			}
			net := transport.NewMemNetwork(n)
			probes := make([]*aheadProbe, n)
			pgs := make([]*ProcessGroup, n)
			reached := make(chan struct{})
			for r := range pgs {
				probes[r] = &aheadProbe{Transport: net.Transport(r), slowTo: -1, watch: -1, want: -1, reached: reached}
				if r == 0 {
					probes[r].slowTo = 1
					probes[r].gate = reached
				}
				if r == 1 {
					probes[r].watch = 0
					probes[r].want = tc.ahead
				}
				pg, err := NewWithTransport(Config{Rank: r, Size: n, Group: "test", Timeout: 10 * time.Second, Tuning: &tune}, probes[r])
				require.NoError(t, err)
				pgs[r] = pg
			}
			defer func() {
				for _, pg := range pgs {
					pg.Close()
				}
			}()
			got := make([]func() []byte, n)
			requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
				w, res, err := tc.run(r, pg)
				got[r] = res
				return w, err
			}))
			for r := range n {
				want := tc.want
				if want == nil { // reduce_scatter: rank r gets block r summed over ranks
					want = sum(in(r), in(3+r), in(6+r))
				}
				require.Equal(t, want, got[r](), "rank %d", r)
			}
			require.GreaterOrEqual(t, probes[1].mostPending(), tc.ahead,
				"rank 1 had too few receives posted ahead of the one it waited for")
		})
	}
}
