package transport

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStampRoundTrip(t *testing.T) {
	for _, st := range []Stamp{
		{},
		{Seq: 9, Op: OpAllReduce, DType: 2, RedOp: 4, Root: -1, Count: 1024, Detail: 77},
		{Seq: math.MaxUint64, Op: OpAllToAll, DType: NoDType, RedOp: NoRedOp, Root: math.MinInt32, Send: 3, Recv: math.MaxUint64},
	} {
		var b [StampSize]byte
		st.Put(b[:])
		require.Equal(t, st, ParseStamp(b[:]))
		require.Equal(t, make([]byte, 5), b[3:8])
	}
}

func TestStampDescribe(t *testing.T) {
	cases := map[string]Stamp{
		"all_reduce(float32[1024], SUM)":                        {Op: OpAllReduce, DType: 2, RedOp: 0, Root: -1, Count: 1024},
		"broadcast(4096 bytes, root=3)":                         {Op: OpBroadcast, DType: NoDType, RedOp: NoRedOp, Root: 3, Count: 4096},
		"reduce(int64[8], MAX, root=0)":                         {Op: OpReduce, DType: 10, RedOp: 4, Root: 0, Count: 8},
		"all_gather(bfloat16[5] per rank)":                      {Op: OpAllGather, DType: 1, RedOp: NoRedOp, Root: -1, Count: 5},
		"barrier()":                                             {Op: OpBarrier, DType: NoDType, RedOp: NoRedOp, Root: -1},
		"op#200(dtype(77)[1], op(99))":                          {Op: 200, DType: 77, RedOp: 99, Root: -1, Count: 1},
		"all_to_all(float32, 2 elements to rank -1, 3 from it)": {Op: OpAllToAll, DType: 2, RedOp: NoRedOp, Root: -1, Send: 2, Recv: 3},
	}
	for want, st := range cases {
		require.Equal(t, want, st.String())
	}
}

func TestStampMatches(t *testing.T) {
	a := Stamp{Seq: 1, Op: OpAllReduce, DType: 2, Root: -1, Count: 8, Detail: 5}
	b := a
	b.Detail = 0
	require.True(t, a.Matches(b), "a call without a description matches any")
	b.Detail = 6
	require.False(t, a.Matches(b))
	b = a
	b.Count = 9
	require.False(t, a.Matches(b))
}

// FuzzParseStamp: any bytes are some stamp, which describes itself without
// panicking and encodes back to the same stamp.
func FuzzParseStamp(f *testing.F) {
	var b [StampSize]byte
	st := Stamp{Seq: 9, Op: OpAllToAll, DType: 2, RedOp: NoRedOp, Root: -1, Send: 1, Recv: 2}
	st.Put(b[:])
	f.Add(b[:])
	f.Add(make([]byte, StampSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		var b [StampSize]byte
		copy(b[:], in)
		st := ParseStamp(b[:])
		de := &DesyncError{Rank: 0, Peer: 1, Mine: st, Theirs: st}
		if !strings.Contains(de.Error(), "called") {
			t.Fatal(de.Error())
		}
		var again [StampSize]byte
		st.Put(again[:])
		if ParseStamp(again[:]) != st {
			t.Fatalf("%+v does not round-trip", st)
		}
	})
}
