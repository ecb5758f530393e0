package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"unicode/utf8"

	flatbuffers "github.com/google/flatbuffers/go"
)

// Version is the wire version spoken by this build. PeerRecord and Handshake
// carry it and Unmarshal rejects any other value.
const Version = 1

// Magic is the value of Handshake.Magic: "GDST" read as a big-endian uint32.
const Magic uint32 = 0x47445354

// Limits enforced by Unmarshal and Validate.
const (
	// MaxStringLen is the largest accepted string field, in bytes.
	MaxStringLen = 4096
	// MaxListLen is the largest accepted number of entries in
	// PeerRecord.Addresses and in PeerRecord.Transports.
	MaxListLen = 64
	// MaxRecordSize bounds an encoded record (FlatBuffer plus checksum
	// trailer). Every record that passes Validate encodes to less than this.
	MaxRecordSize = 1 << 20
)

// ErrMalformed is wrapped by every error the Unmarshal functions return.
var ErrMalformed = errors.New("wire: malformed record")

// ErrVersionMismatch is wrapped (together with ErrMalformed) by the error
// returned for a well-formed record that carries a Version other than
// wire.Version. Use errors.As with *VersionError to read both versions.
var ErrVersionMismatch = errors.New("wire: version mismatch")

// VersionError reports a record whose Version differs from wire.Version.
// errors.Is matches it against both ErrMalformed and ErrVersionMismatch.
type VersionError struct {
	Record string // "PeerRecord" or "Handshake"
	Got    uint16 // version in the record
	Want   uint16 // wire.Version of this build
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("wire: %s has wire version %d, this build speaks wire version %d", e.Record, e.Got, e.Want)
}

// Is reports whether target is ErrMalformed or ErrVersionMismatch.
func (e *VersionError) Is(target error) bool {
	return target == ErrMalformed || target == ErrVersionMismatch
}

func checkVersion(record string, got uint16) error {
	if got != Version {
		return &VersionError{Record: record, Got: got, Want: Version}
	}
	return nil
}

// malformed returns an error wrapping ErrMalformed.
func malformed(record, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, record, fmt.Sprintf(format, args...))
}

// errDecoderPanic marks an error recovered from a decoder panic; the
// fuzz tests treat it as a verifier bug.
var errDecoderPanic = errors.New("decoder panic")

// recoverMalformed turns a panic in a decoder into an error wrapping
// ErrMalformed. The structural verifier should make this unreachable; it is
// the last line of defence against the FlatBuffers runtime, which panics on
// out-of-range offsets.
func recoverMalformed(record string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: %w: %v", ErrMalformed, record, errDecoderPanic, r)
	}
}

// Envelope: a FlatBuffer finished with a 4-byte file identifier, followed
// by a little-endian CRC-32C (Castagnoli) of the FlatBuffer bytes. The
// FlatBuffer starts at offset 0, so any FlatBuffers reader can decode the
// record directly and ignore the trailer.
const (
	identPeerRecord = "GDPE"
	identHandshake  = "GDHS"

	identLen   = 4 // FlatBuffers file identifier length
	trailerLen = 4
	// minimal FlatBuffer: root offset, identifier, 4-byte vtable, soffset.
	minBodyLen = 4 + identLen + 4 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seal finishes b with ident and appends the checksum trailer.
func seal(b *flatbuffers.Builder, root flatbuffers.UOffsetT, ident string) []byte {
	b.FinishWithFileIdentifier(root, []byte(ident))
	body := b.FinishedBytes()
	out := make([]byte, len(body)+trailerLen)
	copy(out, body)
	binary.LittleEndian.PutUint32(out[len(body):], crc32.Checksum(body, castagnoli))
	return out
}

// open checks size, checksum and identifier and returns the FlatBuffer.
func open(b []byte, record, ident string) ([]byte, error) {
	if len(b) > MaxRecordSize {
		return nil, malformed(record, "%d bytes exceeds the %d-byte limit", len(b), MaxRecordSize)
	}
	if len(b) < minBodyLen+trailerLen {
		return nil, malformed(record, "%d bytes is too short", len(b))
	}
	body := b[:len(b)-trailerLen]
	want := binary.LittleEndian.Uint32(b[len(body):])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, malformed(record, "checksum mismatch (computed %#08x, trailer %#08x)", got, want)
	}
	if id := string(body[4 : 4+identLen]); id != ident {
		if other := identName(id); other != "" {
			return nil, malformed(record, "buffer holds a %s record", other)
		}
		return nil, malformed(record, "file identifier %q, want %q", id, ident)
	}
	return body, nil
}

func identName(id string) string {
	switch id {
	case identPeerRecord:
		return "PeerRecord"
	case identHandshake:
		return "Handshake"
	}
	return ""
}

// fieldKind describes one table field for the structural verifier.
type fieldKind uint8

const (
	fU8        fieldKind = 1 // ubyte
	fU16       fieldKind = 2 // ushort
	fU32       fieldKind = 4 // int, uint
	fU64       fieldKind = 8 // long, ulong
	fString    fieldKind = 16
	fStringVec fieldKind = 17 // [string]
)

// verifyTable checks that the root table of body, with the given fields in
// schema order (field i uses vtable slot 4+2i), lies entirely inside body:
// root offset, vtable, every present field, and every string and vector
// they reference, including string terminators. Fields beyond the known
// schema (a newer writer) are ignored, as FlatBuffers intends. After it
// returns nil, the generated accessors for these fields cannot index out of
// range. All arithmetic is done in uint64 so hostile offsets cannot wrap.
func verifyTable(body []byte, record string, fields []fieldKind) error {
	n := uint64(len(body))
	u16 := func(p uint64) uint64 { return uint64(binary.LittleEndian.Uint16(body[p:])) }
	u32 := func(p uint64) uint64 { return uint64(binary.LittleEndian.Uint32(body[p:])) }

	// Callers guarantee n >= minBodyLen and n <= MaxRecordSize < 1<<31.
	pos := u32(0)
	if pos < 8 || pos%4 != 0 || pos+4 > n {
		return malformed(record, "root table offset %d out of range", pos)
	}
	soff := int64(int32(binary.LittleEndian.Uint32(body[pos:])))
	vt := int64(pos) - soff
	if vt < 0 || vt%2 != 0 || uint64(vt)+4 > n {
		return malformed(record, "vtable offset %d out of range", vt)
	}
	vtab := uint64(vt)
	vtSize := u16(vtab)
	tblSize := u16(vtab + 2)
	if vtSize < 4 || vtSize%2 != 0 || vtab+vtSize > n {
		return malformed(record, "vtable size %d out of range", vtSize)
	}
	if tblSize < 4 || pos+tblSize > n {
		return malformed(record, "table size %d out of range", tblSize)
	}

	// verifyString checks the string whose uoffset is stored at p.
	verifyString := func(p uint64, what string) error {
		if p%4 != 0 {
			return malformed(record, "%s: misaligned offset", what)
		}
		off := u32(p)
		if off == 0 || off >= 1<<31 {
			return malformed(record, "%s: bad offset %d", what, off)
		}
		s := p + off
		if s%4 != 0 || s+4 > n {
			return malformed(record, "%s: string header out of range", what)
		}
		l := u32(s)
		if s+4+l+1 > n {
			return malformed(record, "%s: string of %d bytes out of range", what, l)
		}
		if body[s+4+l] != 0 {
			return malformed(record, "%s: string not NUL-terminated", what)
		}
		return nil
	}

	for i, kind := range fields {
		slot := uint64(4 + 2*i)
		if slot+2 > vtSize {
			break // older writer: this and later fields are absent
		}
		fo := u16(vtab + slot)
		if fo == 0 {
			continue // absent: accessor returns the default
		}
		size := uint64(4)
		if kind < fString {
			size = uint64(kind)
		}
		if fo < 4 || fo+size > tblSize {
			return malformed(record, "field %d at offset %d outside table of %d bytes", i, fo, tblSize)
		}
		p := pos + fo
		switch kind {
		case fString:
			if err := verifyString(p, fmt.Sprintf("field %d", i)); err != nil {
				return err
			}
		case fStringVec:
			if p%4 != 0 {
				return malformed(record, "field %d: misaligned offset", i)
			}
			off := u32(p)
			if off == 0 || off >= 1<<31 {
				return malformed(record, "field %d: bad vector offset %d", i, off)
			}
			v := p + off
			if v%4 != 0 || v+4 > n {
				return malformed(record, "field %d: vector header out of range", i)
			}
			cnt := u32(v)
			if v+4+4*cnt > n {
				return malformed(record, "field %d: vector of %d entries out of range", i, cnt)
			}
			for j := uint64(0); j < cnt; j++ {
				if err := verifyString(v+4+4*j, fmt.Sprintf("field %d[%d]", i, j)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkString enforces the string limits shared by all records.
func checkString(record, field, s string) error {
	if len(s) > MaxStringLen {
		return malformed(record, "%s is %d bytes, limit %d", field, len(s), MaxStringLen)
	}
	if !utf8.ValidString(s) {
		return malformed(record, "%s is not valid UTF-8", field)
	}
	return nil
}

func checkList(record, field string, l []string) error {
	if len(l) > MaxListLen {
		return malformed(record, "%s has %d entries, limit %d", field, len(l), MaxListLen)
	}
	for i, s := range l {
		if err := checkString(record, fmt.Sprintf("%s[%d]", field, i), s); err != nil {
			return err
		}
	}
	return nil
}

// checkRank enforces 0 <= rank < worldSize.
func checkRank(record, field string, rank, worldSize int32) error {
	if worldSize <= 0 {
		return malformed(record, "world size %d is not positive", worldSize)
	}
	if rank < 0 || rank >= worldSize {
		return malformed(record, "%s %d out of range [0, %d)", field, rank, worldSize)
	}
	return nil
}

// createString writes s unless it is empty (an absent string reads as "").
func createString(b *flatbuffers.Builder, s string) flatbuffers.UOffsetT {
	if s == "" {
		return 0
	}
	return b.CreateString(s)
}

// createStringVector writes l unless it is empty (absent reads as nil).
func createStringVector(b *flatbuffers.Builder, l []string) flatbuffers.UOffsetT {
	if len(l) == 0 {
		return 0
	}
	offs := make([]flatbuffers.UOffsetT, len(l))
	for i, s := range l {
		offs[i] = b.CreateString(s)
	}
	b.StartVector(4, len(l), 4)
	for i := len(offs) - 1; i >= 0; i-- {
		b.PrependUOffsetT(offs[i])
	}
	return b.EndVector(len(l))
}

// readList copies a string vector out of the buffer; nil when empty.
func readList(n int, at func(int) []byte) []string {
	if n == 0 {
		return nil
	}
	l := make([]string, n)
	for i := range l {
		l[i] = string(at(i))
	}
	return l
}
