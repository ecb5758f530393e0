package libgodist

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/reduce"
)

func TestFlightRecordsEveryOpAndItsOutcome(t *testing.T) {
	const n, count = 3, 5
	pgs, _ := group(t, n, 300*time.Millisecond)
	requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
		return pg.AllReduce(i64s(input(r, count)...), ReduceArgs{DType: reduce.Int64, Op: reduce.Sum}, Opts{})
	}))
	requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
		outs := [][]byte{make([]byte, 8*count), make([]byte, 8*count), make([]byte, 8*count)}
		return pg.AllGather(i64s(input(r, count)...), outs, Opts{DType: reduce.Int64, Typed: true})
	}))
	// Rank 2 skips the barrier: ranks 0 and 1 time out in it.
	errs := onAll(t, pgs[:2], func(r int, pg *ProcessGroup) (*Work, error) { return pg.Barrier(Opts{}) })
	require.Error(t, errs[0])
	require.Error(t, errs[1])

	for r, pg := range pgs {
		f := pg.Flight()
		want := 3
		if r == 2 {
			want = 2
		}
		require.Len(t, f, want, "rank %d", r)
		for i, e := range f {
			require.Equal(t, uint64(i), e.ID)
			require.Equal(t, uint64(i+1), e.Seq)
			require.NotZero(t, e.Created)
			require.GreaterOrEqual(t, e.Started, e.Created)
			require.GreaterOrEqual(t, e.Completed, e.Started)
			require.Equal(t, int64(300), e.TimeoutMs)
			require.Equal(t, -1, e.Peer)
		}
		require.Equal(t, FlightEntry{ID: 0, Seq: 1, Op: "allreduce", Peer: -1, DType: int(reduce.Int64), In: count, Out: count},
			strip(f[0]))
		require.Equal(t, FlightEntry{ID: 1, Seq: 2, Op: "allgather", Peer: -1, DType: int(reduce.Int64), In: count, Out: n * count},
			strip(f[1]))
		if r < 2 {
			require.Equal(t, "barrier", f[2].Op)
			require.Equal(t, -1, f[2].DType)
			require.NotEmpty(t, f[2].Error)
		}
	}
}

// strip leaves out an entry's times and error.
func strip(e FlightEntry) FlightEntry {
	e.Created, e.Started, e.Completed, e.TimeoutMs, e.Error = 0, 0, 0, 0, ""
	return e
}

func TestFlightKeepsTheLastEntriesAndCountsPointToPoint(t *testing.T) {
	pgs, _ := group(t, 2, 5*time.Second)
	for _, pg := range pgs {
		pg.SetFlightEntries(3)
	}
	for i := 0; i < 5; i++ {
		requireAllOK(t, onAll(t, pgs, func(r int, pg *ProcessGroup) (*Work, error) {
			if r == 0 {
				return pg.Send(make([]byte, 16+i), 1, 7, Opts{})
			}
			return pg.Recv(make([]byte, 16+i), 0, 7, Opts{})
		}))
	}
	for r, pg := range pgs {
		f := pg.Flight()
		require.Len(t, f, 3)
		for i, e := range f {
			require.Equal(t, uint64(i+2), e.ID)
			require.Equal(t, uint64(i+3), e.P2PSeq)
			require.Zero(t, e.Seq)
			require.NotZero(t, e.Completed)
			if r == 0 {
				require.Equal(t, "send", e.Op)
				require.Equal(t, 1, e.Peer)
				require.Equal(t, uint64(18+i), e.In)
			} else {
				require.Equal(t, "recv", e.Op)
				require.Equal(t, 0, e.Peer)
				require.Equal(t, uint64(18+i), e.Out)
			}
		}
	}
	pgs[0].SetFlightEntries(0)
	w, err := pgs[0].Barrier(Opts{Timeout: 10 * time.Millisecond})
	require.NoError(t, err)
	<-w.Done()
	require.Empty(t, pgs[0].Flight())
}

func TestFlightRecordsDeviceOpsApart(t *testing.T) {
	acc := &fakeAcc{}
	pg, _ := devGroup(t, 1, 3, acc)
	require.NoError(t, pg.DeviceOpen(0, GroupComm, []byte("id")))
	c := acc.opened()[0]
	w1, err := pg.DeviceRun("allreduce", allReduceOp(0))
	require.NoError(t, err)
	w2, err := pg.DeviceSubmit(DeviceArgs{Op: "allgather", Buf: DeviceBuf{Addr: 1, Bytes: 8},
		Out: DeviceBuf{Addr: 2, Bytes: 24}, Stream: 7})
	require.NoError(t, err)
	f := pg.Flight()
	require.Len(t, f, 2)
	require.Zero(t, f[1].Completed, "launched, not completed")
	launches, _, _, _, _ := c.get()
	for _, l := range launches {
		c.complete(l.ev)
	}
	require.NoError(t, waitWork(t, w1, 5*time.Second))
	require.NoError(t, waitWork(t, w2, 5*time.Second))
	f = pg.Flight()
	require.Equal(t, FlightEntry{ID: 0, Seq: 1, Op: "allreduce", Peer: -1, DType: int(reduce.Float32), In: 4, Out: 4,
		Device: true}, strip(f[0]))
	require.Equal(t, FlightEntry{ID: 1, Seq: 2, Op: "allgather", Peer: -1, DType: -1, In: 8, Out: 24, Device: true},
		strip(f[1]))
	for _, e := range f {
		require.NotZero(t, e.Completed)
		require.Empty(t, e.Error)
	}
}
