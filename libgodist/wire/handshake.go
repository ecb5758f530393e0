package wire

import (
	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/godist/godist/libgodist/wire/fb"
)

// Handshake is the first frame on every new TCP connection between two
// ranks, sent by the connecting rank. See doc.go.
type Handshake struct {
	Magic     uint32 // must be wire.Magic ("GDST")
	Version   uint16 // wire.Version of the sender
	Session   uint64 // session token from rank 0's PeerRecord
	Group     string // process group name
	FromRank  int32  // rank of the sender, in [0, WorldSize)
	ToRank    int32  // rank the sender believes it reached, in [0, WorldSize)
	WorldSize int32  // size of the process group
}

const handshakeName = "Handshake"

// Field layout of table Handshake in godist.fbs, in schema order.
var handshakeFields = []fieldKind{
	fU32,    // magic
	fU16,    // version
	fU64,    // session
	fString, // group
	fU32,    // from_rank
	fU32,    // to_rank
	fU32,    // world_size
}

// Marshal encodes h. It does not validate h; call Validate first to be sure
// the frame will be accepted by UnmarshalHandshake.
func (h *Handshake) Marshal() []byte {
	b := flatbuffers.NewBuilder(96 + len(h.Group))
	group := createString(b, h.Group)
	fb.HandshakeStart(b)
	fb.HandshakeAddSession(b, h.Session)
	fb.HandshakeAddMagic(b, h.Magic)
	fb.HandshakeAddGroup(b, group)
	fb.HandshakeAddFromRank(b, h.FromRank)
	fb.HandshakeAddToRank(b, h.ToRank)
	fb.HandshakeAddWorldSize(b, h.WorldSize)
	fb.HandshakeAddVersion(b, h.Version)
	return seal(b, fb.HandshakeEnd(b), identHandshake)
}

// UnmarshalHandshake decodes and validates a frame produced by
// Handshake.Marshal. It never panics; every error wraps ErrMalformed, and a
// frame from another wire version yields a *VersionError.
func UnmarshalHandshake(b []byte) (h Handshake, err error) {
	defer recoverMalformed(handshakeName, &err)
	body, err := open(b, handshakeName, identHandshake)
	if err != nil {
		return Handshake{}, err
	}
	if err := verifyTable(body, handshakeName, handshakeFields); err != nil {
		return Handshake{}, err
	}
	t := fb.GetRootAsHandshake(body, 0)
	h = Handshake{
		Magic:     t.Magic(),
		Version:   t.Version(),
		Session:   t.Session(),
		Group:     string(t.Group()),
		FromRank:  t.FromRank(),
		ToRank:    t.ToRank(),
		WorldSize: t.WorldSize(),
	}
	if err := h.Validate(); err != nil {
		return Handshake{}, err
	}
	return h, nil
}

// Validate reports whether UnmarshalHandshake would accept h: Magic must be
// wire.Magic, Version must be wire.Version, FromRank and ToRank must lie in
// [0, WorldSize), and Group must be valid UTF-8 of at most MaxStringLen
// bytes.
func (h *Handshake) Validate() error {
	if h.Magic != Magic {
		return malformed(handshakeName, "magic %#08x, want %#08x", h.Magic, Magic)
	}
	if err := checkVersion(handshakeName, h.Version); err != nil {
		return err
	}
	if err := checkRank(handshakeName, "from rank", h.FromRank, h.WorldSize); err != nil {
		return err
	}
	if err := checkRank(handshakeName, "to rank", h.ToRank, h.WorldSize); err != nil {
		return err
	}
	return checkString(handshakeName, "Group", h.Group)
}
