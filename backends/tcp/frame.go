package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/godist/godist/libgodist/transport"
)

// Every message on a godist TCP connection starts with a fixed 64-byte
// header (docs/wire.md):
//
//	offset size field
//	0      1    magic 'G' (0x47)
//	1      1    frame version (2)
//	2      1    kind: 1 data, 2 goodbye
//	3      5    stamp bytes 0 to 4 (op, dtype, reduce op, zero, zero)
//	8      8    tag, little endian
//	16     8    payload length in bytes, little endian
//	24     40   stamp bytes 8 to 47 (root, detail, count, seq, send, recv)
//
// followed by the payload and zero padding to a multiple of frameAlign. A
// goodbye frame has no payload; it tells the peer that this side is
// shutting the group down on purpose. The stamp (transport.Stamp, in its
// encoding, which has zeros at bytes 3 to 7) is the fingerprint of the
// collective that sent a data frame of a collective tag; it is zero on
// other frames (and was reserved, zero, before stamps: a reader that
// ignores it, or a writer that leaves it zero, still interoperates).
const (
	headerSize   = 64
	frameMagic   = 0x47
	frameVersion = 2

	kindData    = 1
	kindGoodbye = 2

	// maxPayload bounds a frame's length field; larger values mean a
	// corrupt stream.
	maxPayload = 1 << 46
)

// frameAlign: every frame takes a multiple of this many bytes on the
// wire (the payload is followed by zero padding to it), so that a sender
// whose writes are all multiples of it keeps its kernel copy buffers
// aligned, and the receiver's copy out of them runs with source and
// destination aligned alike.
const frameAlign = 64

// padding is the number of zero bytes after an n-byte payload.
func padding(n int) int { return -n & (frameAlign - 1) }

type header struct {
	kind byte
	tag  transport.Tag
	n    uint64
	st   transport.Stamp // data frames of collective tags; zero otherwise
}

func putHeader(b *[headerSize]byte, h header) {
	b[0], b[1], b[2] = frameMagic, frameVersion, h.kind
	if h.st.Op == transport.OpNone {
		b[3], b[4], b[5], b[6], b[7] = 0, 0, 0, 0, 0
		binary.LittleEndian.PutUint64(b[8:], uint64(h.tag))
		binary.LittleEndian.PutUint64(b[16:], h.n)
		clear(b[24:])
		return
	}
	// The stamp's encoding less its bytes 5 to 7 (zero), around tag and
	// length: bytes 0 to 4 at 3, bytes 8 to 47 at 24.
	h.st.Put(b[16:])
	b[3], b[4], b[5], b[6], b[7] = b[16], b[17], b[18], 0, 0
	binary.LittleEndian.PutUint64(b[8:], uint64(h.tag))
	binary.LittleEndian.PutUint64(b[16:], h.n)
}

// stampOf decodes the stamp of header b (transport.ParseStamp's fields,
// where putHeader puts them); any bytes are some stamp.
func stampOf(b *[headerSize]byte) transport.Stamp {
	return transport.Stamp{Op: transport.OpCode(b[3]), DType: b[4], RedOp: b[5],
		Root:   int32(binary.LittleEndian.Uint32(b[24:])),
		Detail: binary.LittleEndian.Uint32(b[28:]),
		Count:  binary.LittleEndian.Uint64(b[32:]),
		Seq:    binary.LittleEndian.Uint64(b[40:]),
		Send:   binary.LittleEndian.Uint64(b[48:]),
		Recv:   binary.LittleEndian.Uint64(b[56:])}
}

func parseHeader(b *[headerSize]byte) (header, error) {
	if b[0] != frameMagic {
		return header{}, fmt.Errorf("%w: bad magic byte %#x", errCorrupt, b[0])
	}
	if b[1] != frameVersion {
		return header{}, fmt.Errorf("%w: frame version %d, want %d", errCorrupt, b[1], frameVersion)
	}
	h := header{kind: b[2], tag: transport.Tag(binary.LittleEndian.Uint64(b[8:])), n: binary.LittleEndian.Uint64(b[16:])}
	switch h.kind {
	case kindData:
		if h.n > maxPayload {
			return header{}, fmt.Errorf("%w: payload length %d", errCorrupt, h.n)
		}
		if b[3] != 0 && h.tag.Collective() {
			h.st = stampOf(b)
		}
	case kindGoodbye:
		if h.n != 0 {
			return header{}, fmt.Errorf("%w: goodbye frame with payload", errCorrupt)
		}
	default:
		return header{}, fmt.Errorf("%w: unknown frame kind %d", errCorrupt, h.kind)
	}
	return h, nil
}
