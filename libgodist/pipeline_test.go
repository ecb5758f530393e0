package libgodist

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/reduce"
)

func TestSegments(t *testing.T) {
	require.Empty(t, segments(nil, 8))
	b := make([]byte, 20)
	s := segments(b, 8)
	require.Len(t, s, 3)
	require.Equal(t, []int{8, 8, 4}, []int{len(s[0]), len(s[1]), len(s[2])})
}

// TestRingPipelineTCP runs the pipelined ring all-reduce over sockets with
// chunks cut into many segments (so segments of later steps arrive before
// their receives are posted), on float32 data whose sum depends on the
// order of additions: every rank must hold the same bits, and the values
// must match an exact integer sum.
//
// With segments of 4000 bytes the 5-element op takes the direct ring
// (allreduce_ring_direct.go) and the larger ones the pipelined ring; with
// segments of 4 MiB every op takes the direct ring (chunks of at most
// RingDirectMax).
func TestRingPipelineTCP(t *testing.T) {
	type mode struct {
		seg   int
		spare bool
	}
	for _, m := range []mode{{4000, false}, {4000, true}, {4 << 20, false}} {
		tune := algo.Default()
		tune.AllReduceRDMax, tune.RingSegment = 16, m.seg
		for _, n := range []int{2, 3, 4, 5} {
			t.Run(fmt.Sprintf("seg%d/n%d/spare=%v", m.seg, n, m.spare), func(t *testing.T) {
				pgs := connectGroup(t, n, assemble.TransportTCP, &tune)
				for _, pg := range pgs {
					pg.spare = m.spare
				}
				for _, count := range []int{5, 10_007, 100_003} {
					bufs := make([][]byte, n)
					want := make([]int64, count)
					for r := range bufs {
						in := input(r, count)
						bufs[r] = make([]byte, 4*count)
						for i, v := range in {
							binary.LittleEndian.PutUint32(bufs[r][4*i:], math.Float32bits(float32(v)))
							want[i] += v
						}
					}
					requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
						return pg.AllReduce(bufs[r], ReduceArgs{DType: reduce.Float32, Op: reduce.Sum}, Opts{})
					}))
					for r := range bufs {
						require.Equal(t, bufs[0], bufs[r], "rank %d differs from rank 0", r)
					}
					for i, w := range want {
						require.Equal(t, float32(w), math.Float32frombits(binary.LittleEndian.Uint32(bufs[0][4*i:])), "element %d", i)
					}
				}
			})
		}
	}
}

// TestBroadcastPipelined runs the broadcast tree with concurrent children
// in memory and over sockets, from every root, with a buffer of exactly
// the threshold (the one-child-at-a-time tree), just above it and well
// above it; in segments of 1000 bytes (one, two with a short last one, and
// many) and whole (seg 0). Two broadcasts run back to back so the second's
// data can arrive while the first's is still being forwarded.
func TestBroadcastPipelined(t *testing.T) {
	for _, kind := range []string{"mem", assemble.TransportTCP} {
		for _, n := range []int{3, 4, 5, 8} {
			if kind == assemble.TransportTCP && n == 8 {
				continue
			}
			for _, seg := range []int{1000, 0} {
				// Segments come from BroadcastSpareSegment, used when every
				// rank has a core (comm.allSpare); whole otherwise.
				tune := algo.Default()
				tune.BroadcastTreeMin, tune.BroadcastSegment, tune.BroadcastSpareSegment = 1000, 0, seg
				t.Run(fmt.Sprintf("%s/n%d/seg%d", kind, n, seg), func(t *testing.T) {
					var pgs []*ProcessGroup
					if kind == "mem" {
						pgs, _ = groupTuned(t, n, 10*time.Second, &tune)
					} else {
						pgs = connectGroup(t, n, assemble.TransportTCP, &tune)
					}
					for _, pg := range pgs {
						pg.allSpare = seg != 0
					}
					for root := 0; root < n; root++ {
						for _, count := range []int{125, 126, 7_001} {
							a, b := make([][]byte, n), make([][]byte, n)
							for r := range a {
								a[r] = i64s(input(r, count)...)
								b[r] = i64s(input(r+n, count)...)
							}
							requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
								w1, err := pg.Broadcast(a[r], root, Opts{})
								if err != nil {
									return nil, err
								}
								w2, err := pg.Broadcast(b[r], (root+1)%n, Opts{})
								if err != nil {
									return nil, err
								}
								if err := w1.Err(); err != nil {
									return nil, err
								}
								return w2, nil
							}))
							for r := range a {
								require.Equal(t, input(root, count), toI64(a[r]), "first broadcast, rank %d, root %d", r, root)
								require.Equal(t, input((root+1)%n+n, count), toI64(b[r]), "second broadcast, rank %d, root %d", r, (root+1)%n)
							}
						}
					}
				})
			}
		}
	}
}

// TestBroadcastPipelinedMissingRank: an inner rank of the tree (rank 2,
// the root's first child with 4 ranks) never comes. The root, whose sender
// to it waits for its go-ahead, and rank 3, which waits for its segments,
// time out naming it; rank 1, fed by the root directly, completes (its
// sender does not wait for rank 2's).
func TestBroadcastPipelinedMissingRank(t *testing.T) {
	tune := algo.Default()
	tune.BroadcastTreeMin, tune.BroadcastSegment = 1000, 1000
	pgs, _ := groupTuned(t, 4, 300*time.Millisecond, &tune)
	want := input(0, 700)
	bufs := make([][]byte, 4)
	for r := range bufs {
		bufs[r] = make([]byte, 8*len(want))
	}
	copy(bufs[0], i64s(want...))
	start := time.Now()
	present := []*ProcessGroup{pgs[0], pgs[1], pgs[3]}
	errs := onAll(t, present, func(i int, pg *ProcessGroup) (*Work, error) {
		return pg.Broadcast(bufs[[]int{0, 1, 3}[i]], 0, Opts{})
	})
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, errs[1], "rank 1")
	require.Equal(t, want, toI64(bufs[1]))
	for _, i := range []int{0, 2} {
		var oe *OpError
		require.ErrorAs(t, errs[i], &oe, "rank %d", []int{0, 1, 3}[i])
		require.True(t, oe.Timeout())
		require.Equal(t, []int{2}, oe.Missing, "rank %d: %v", []int{0, 1, 3}[i], errs[i])
	}
}
