package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/godist/godist/libgodist/reduce"
)

// A collective's fingerprint travels with every message it sends, so that
// ranks running different collectives at the same point learn it from the
// first message instead of hanging or mixing their data. The engine puts a
// Call in each collective's context (CallOf); a transport stamps the
// messages of collective tags with the Call's Stamp (Call.To), and the
// Mailbox compares each stamped arrival with the collective this rank runs
// (Mailbox.Track, desync.go).

// OpCode names a collective in a Stamp. The values are part of the wire
// format; never renumber them.
type OpCode uint8

// Collectives.
const (
	OpNone OpCode = iota // no stamp
	OpAllReduce
	OpBroadcast
	OpReduce
	OpAllGather
	OpGather
	OpScatter
	OpReduceScatter
	OpAllToAll
	OpBarrier
	OpMonitoredBarrier
)

var opNames = [...]string{"", "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter",
	"reduce_scatter", "all_to_all", "barrier", "monitored_barrier"}

func (o OpCode) String() string {
	if int(o) < len(opNames) && o != OpNone {
		return opNames[o]
	}
	return "op#" + strconv.Itoa(int(o))
}

const (
	// NoDType is a Stamp's DType when the call's buffers are plain bytes
	// (Count then counts bytes).
	NoDType = 0xff
	// NoRedOp is a Stamp's RedOp for collectives that do not reduce.
	NoRedOp = 0xff
)

// Stamp is one rank's collective call in the fixed-size form its messages
// carry. All ranks of a correct program stamp the same values for the same
// collective; Send and Recv (all_to_all only) are the stamping rank's side
// of one pair of ranks. Any bytes decode to some Stamp (ParseStamp); an
// unknown code is described by its number.
type Stamp struct {
	Seq    uint64 // the collective's sequence number in its group
	Op     OpCode
	DType  uint8  // element type (libgodist/reduce), NoDType for bytes
	RedOp  uint8  // reduction (libgodist/reduce), NoRedOp if none
	Root   int32  // root rank, -1 if none
	Count  uint64 // elements per rank (bytes with NoDType); 0 for all_to_all
	Detail uint32 // hash of the caller's description of its tensors; 0 if none
	Send   uint64 // all_to_all: elements the stamping rank sends the other rank of the pair
	Recv   uint64 // all_to_all: elements it receives from it
}

// StampSize is the length of a Stamp's encoding (Put):
//
//	offset size field
//	0      1    op (0: no stamp)
//	1      1    dtype
//	2      1    reduce op
//	3      5    zero
//	8      4    root, little endian
//	12     4    detail
//	16     8    count
//	24     8    seq
//	32     8    send
//	40     8    recv
const StampSize = 48

// Put encodes s into b[:StampSize].
func (s *Stamp) Put(b []byte) {
	_ = b[StampSize-1]
	b[0], b[1], b[2] = byte(s.Op), s.DType, s.RedOp
	b[3], b[4], b[5], b[6], b[7] = 0, 0, 0, 0, 0
	binary.LittleEndian.PutUint32(b[8:], uint32(s.Root))
	binary.LittleEndian.PutUint32(b[12:], s.Detail)
	binary.LittleEndian.PutUint64(b[16:], s.Count)
	binary.LittleEndian.PutUint64(b[24:], s.Seq)
	binary.LittleEndian.PutUint64(b[32:], s.Send)
	binary.LittleEndian.PutUint64(b[40:], s.Recv)
}

// ParseStamp decodes b[:StampSize] (bytes 3 to 7 are ignored).
func ParseStamp(b []byte) Stamp {
	_ = b[StampSize-1]
	return Stamp{
		Op: OpCode(b[0]), DType: b[1], RedOp: b[2],
		Root:   int32(binary.LittleEndian.Uint32(b[8:])),
		Detail: binary.LittleEndian.Uint32(b[12:]),
		Count:  binary.LittleEndian.Uint64(b[16:]),
		Seq:    binary.LittleEndian.Uint64(b[24:]),
		Send:   binary.LittleEndian.Uint64(b[32:]),
		Recv:   binary.LittleEndian.Uint64(b[40:]),
	}
}

// Matches reports whether o stamps the same call as s. The detail hashes
// count only when both calls have one (a rank without
// TORCH_DISTRIBUTED_DEBUG=DETAIL describes nothing).
func (s Stamp) Matches(o Stamp) bool {
	if s.Detail == 0 || o.Detail == 0 {
		s.Detail, o.Detail = 0, 0
	}
	return s == o
}

// describe writes s as a call, e.g. "all_reduce(float32[1024], SUM)";
// other is the rank at the other end of an all_to_all pair.
func (s Stamp) describe(b *strings.Builder, other int) {
	b.WriteString(s.Op.String())
	b.WriteByte('(')
	var args []string
	data := func() string {
		if s.DType == NoDType {
			return fmt.Sprintf("%d bytes", s.Count)
		}
		return fmt.Sprintf("%s[%d]", reduce.DType(s.DType), s.Count)
	}
	switch s.Op {
	case OpBarrier, OpMonitoredBarrier:
	case OpAllToAll:
		if s.DType != NoDType {
			args = append(args, reduce.DType(s.DType).String())
		}
		unit := "elements"
		if s.DType == NoDType {
			unit = "bytes"
		}
		args = append(args, fmt.Sprintf("%d %s to rank %d, %d from it", s.Send, unit, other, s.Recv))
	case OpAllGather, OpGather, OpScatter, OpReduceScatter:
		args = append(args, data()+" per rank")
	default:
		args = append(args, data())
	}
	if s.RedOp != NoRedOp {
		args = append(args, reduce.Op(s.RedOp).String())
	}
	if s.Root >= 0 {
		args = append(args, "root="+strconv.Itoa(int(s.Root)))
	}
	b.WriteString(strings.Join(args, ", "))
	b.WriteByte(')')
}

// String describes s as a call.
func (s Stamp) String() string {
	var b strings.Builder
	s.describe(&b, -1)
	return b.String()
}

// Collective reports whether t is the tag of a collective's message (of
// the engine's algorithms or of an offload), which carries its Stamp.
func (t Tag) Collective() bool {
	k := t >> 60
	if k == kindGroup {
		k = t >> 40 & 0xf
	}
	return k == kindColl || k == kindOffload
}

// group is the id of the child group whose tag t is (GroupTag), 0 for the
// transport's own group.
func (t Tag) group() uint16 {
	if t>>60 != kindGroup {
		return 0
	}
	return uint16(t >> 44)
}

// Call is what a collective tells the transport about itself: its Stamp
// and, for all_to_all, its blocks, which give each pair of ranks its own
// Send and Recv. The engine puts one in each collective's context
// (CallOf); a Call is never changed once there.
type Call struct {
	Stamp
	Rank   int     // the calling rank
	Blocks *Blocks // all_to_all's blocks; nil for other collectives
}

// Blocks are an all_to_all's blocks to and from each rank.
type Blocks struct {
	Ins, Outs [][]byte
	Elem      int // bytes per element (1 for bytes)
}

// To is the stamp of this call's messages to peer.
func (c *Call) To(peer int) Stamp {
	s := c.Stamp
	if b := c.Blocks; b != nil && peer >= 0 && peer < len(b.Ins) && peer < len(b.Outs) {
		e := max(b.Elem, 1)
		s.Send, s.Recv = uint64(len(b.Ins[peer])/e), uint64(len(b.Outs[peer])/e)
	}
	return s
}

// From is the stamp this call expects on messages from peer: peer's
// stamp for this rank if both called the same.
func (c *Call) From(peer int) Stamp {
	s := c.To(peer)
	s.Send, s.Recv = s.Recv, s.Send
	return s
}

// CallKey is the context key of a collective's *Call.
type CallKey struct{}

// CallOf returns the Call in ctx, or nil.
func CallOf(ctx context.Context) *Call {
	c, _ := ctx.Value(CallKey{}).(*Call)
	return c
}

// WithCall returns a context that carries c (the engine's op contexts
// answer CallKey themselves).
func WithCall(ctx context.Context, c *Call) context.Context {
	return context.WithValue(ctx, CallKey{}, c)
}

// StampFor is the stamp of a message to peer under tag sent within ctx:
// the Call's for a collective tag, else none (the zero Stamp).
func StampFor(ctx context.Context, peer int, tag Tag) Stamp {
	if !tag.Collective() {
		return Stamp{}
	}
	if c := CallOf(ctx); c != nil {
		return c.To(peer)
	}
	return Stamp{}
}
