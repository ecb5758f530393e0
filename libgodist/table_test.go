package libgodist

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/libgodist/algo"
	"github.com/godist/godist/libgodist/reduce"
)

// TestGroupTableReachesOffloads: the group's algo.Table (Config.Tuning)
// is the one the shared-memory arena chooses by, also when rank 0 created
// the arena with the default table before the group's table was known,
// and the group names its choices (State.Algos, the INFO line).
func TestGroupTableReachesOffloads(t *testing.T) {
	def := algo.Default()
	for _, c := range []struct {
		name      string
		transport string
		tune      *algo.Table
		want      string
	}{
		{"shm/default", assemble.TransportAuto, nil, "all_reduce: one-shot up to 64 KiB, two-shot above;"},
		{"shm/two-shot", assemble.TransportAuto, &algo.Table{ShmOneShotMax: -1, ShmDirectMin: def.ShmDirectMin,
			ShmSharedBroadcastMin: def.ShmSharedBroadcastMin}, "all_reduce: two-shot;"},
		{"shm/one-shot-1KiB", assemble.TransportAuto, &algo.Table{ShmOneShotMax: 1 << 10}, "all_reduce: one-shot up to 1 KiB, two-shot above; broadcast: chunked copy; all_to_all: chunked copy"},
		{"tcp", assemble.TransportTCP, nil, def.DescribeEngine(2, true)[:40]},
	} {
		t.Run(c.name, func(t *testing.T) {
			pgs := connectGroup(t, 2, c.transport, c.tune)
			for _, pg := range pgs {
				require.True(t, strings.HasPrefix(pg.Algorithms(), c.want), "%q", pg.Algorithms())
				require.Equal(t, pg.Algorithms(), pg.State().Algos)
			}
			for _, count := range []int{1, 100, 1000, 20_000} {
				bufs := [][]byte{i64s(input(0, count)...), i64s(input(1, count)...)}
				want := make([]int64, count)
				for r := range bufs {
					for i, v := range input(r, count) {
						want[i] += v
					}
				}
				requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
					return pg.AllReduce(bufs[r], ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
				}))
				for r := range bufs {
					require.Equal(t, want, toI64(bufs[r]), fmt.Sprintf("rank %d, %d elements", r, count))
				}
			}
		})
	}
}

func TestGroupOfOneNamesNoAlgorithms(t *testing.T) {
	pgs := connectGroup(t, 1, assemble.TransportAuto, nil)
	require.Equal(t, "", pgs[0].Algorithms())
}
