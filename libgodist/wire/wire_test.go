package wire

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	flatbuffers "github.com/google/flatbuffers/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/wire/fb"
)

func manyStrings(n int, prefix string) []string {
	l := make([]string, n)
	for i := range l {
		l[i] = prefix + strings.Repeat("x", i%7) + string(rune('a'+i%26))
	}
	return l
}

func samplePeer() PeerRecord {
	return PeerRecord{
		Version:    Version,
		Session:    0x0123456789abcdef,
		Group:      "default_pg",
		Rank:       1,
		WorldSize:  4,
		Hostname:   "node-17.cluster",
		BootID:     "6f1c1d0e-9a7b-4a55-8d1e-2b3c4d5e6f70",
		PID:        4242,
		Addresses:  []string{"127.0.0.1", "10.0.0.17", "::1", "fe80::1%eth0"},
		Port:       29500,
		ShmProbe:   "godist-probe-0123456789abcdef-1",
		Transports: []string{"tcp", "shm"},
		CPUs:       16,
		Interfaces: []string{"lo", "eth0", "lo", ""},
	}
}

func sampleHandshake() Handshake {
	return Handshake{Magic: Magic, Version: Version, Session: 0xfeedface, Group: "default_pg", FromRank: 3, ToRank: 0, WorldSize: 8}
}

func TestPeerRecordRoundTrip(t *testing.T) {
	maxStr := strings.Repeat("é", MaxStringLen/2) // exactly MaxStringLen bytes
	cases := []struct {
		name string
		rec  PeerRecord
	}{
		{"typical", samplePeer()},
		{"minimal", PeerRecord{Version: Version, WorldSize: 1}},
		{"empty strings and lists", PeerRecord{Version: Version, Rank: 0, WorldSize: 2, Addresses: nil, Transports: nil}},
		{"empty entries", PeerRecord{Version: Version, WorldSize: 1, Addresses: []string{"", ""}, Transports: []string{""}}},
		{"many addresses", PeerRecord{Version: Version, Rank: 5, WorldSize: 6, Addresses: manyStrings(MaxListLen, "10.0.0."), Transports: manyStrings(MaxListLen, "t")}},
		{"max values", PeerRecord{
			Version: Version, Session: math.MaxUint64, Group: maxStr, Rank: math.MaxInt32 - 1, WorldSize: math.MaxInt32,
			Hostname: maxStr, BootID: maxStr, PID: math.MaxInt32, Addresses: []string{maxStr, maxStr}, Port: math.MaxUint16,
			ShmProbe: strings.Repeat("p", MaxStringLen), Transports: []string{maxStr}, CPUs: math.MaxInt32,
			Interfaces: []string{maxStr, ""},
		}},
		{"max everything", PeerRecord{
			Version: Version, Session: math.MaxUint64, Group: maxStr, Rank: 0, WorldSize: 1, Hostname: maxStr, BootID: maxStr,
			PID: math.MinInt32, Addresses: repeat(maxStr, MaxListLen), Port: math.MaxUint16, ShmProbe: strings.Repeat("p", MaxStringLen),
			Transports: repeat(maxStr, MaxListLen),
		}},
		{"unicode", PeerRecord{Version: Version, Group: "gruppe-ü-日本", Rank: 2, WorldSize: 3, Hostname: "höst", Transports: []string{"tcp"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.rec.Validate())
			b := tc.rec.Marshal()
			assert.Less(t, len(b), MaxRecordSize)
			got, err := UnmarshalPeerRecord(b)
			require.NoError(t, err)
			assert.Equal(t, tc.rec, got)
		})
	}
}

func repeat(s string, n int) []string {
	l := make([]string, n)
	for i := range l {
		l[i] = s
	}
	return l
}

func TestHandshakeRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		h    Handshake
	}{
		{"typical", sampleHandshake()},
		{"empty group", Handshake{Magic: Magic, Version: Version, WorldSize: 1}},
		{"max values", Handshake{Magic: Magic, Version: Version, Session: math.MaxUint64, Group: strings.Repeat("g", MaxStringLen),
			FromRank: math.MaxInt32 - 1, ToRank: math.MaxInt32 - 1, WorldSize: math.MaxInt32}},
		{"to self", Handshake{Magic: Magic, Version: Version, Group: "g", FromRank: 2, ToRank: 2, WorldSize: 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.h.Validate())
			got, err := UnmarshalHandshake(tc.h.Marshal())
			require.NoError(t, err)
			assert.Equal(t, tc.h, got)
		})
	}
}

// The decoded record must not alias the input buffer.
func TestUnmarshalCopies(t *testing.T) {
	b := func() []byte { r := samplePeer(); return r.Marshal() }()
	rec, err := UnmarshalPeerRecord(b)
	require.NoError(t, err)
	for i := range b {
		b[i] = 0xff
	}
	assert.Equal(t, samplePeer(), rec)
}

func TestEncodingIsPlainFlatBuffer(t *testing.T) {
	r := samplePeer()
	b := r.Marshal()
	assert.Equal(t, identPeerRecord, string(b[4:8]))
	// A generic FlatBuffers reader can use the bytes directly.
	t2 := fb.GetRootAsPeerRecord(b, 0)
	assert.Equal(t, r.Group, string(t2.Group()))
	assert.Equal(t, r.Port, t2.Port())
	assert.Equal(t, len(r.Addresses), t2.AddressesLength())
	// Trailer is the CRC-32C of everything before it.
	body := b[:len(b)-4]
	assert.Equal(t, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)), binary.LittleEndian.Uint32(b[len(body):]))

	h := sampleHandshake()
	assert.Equal(t, identHandshake, string(h.Marshal()[4:8]))
}

func TestValidation(t *testing.T) {
	peer := func(mut func(*PeerRecord)) []byte { r := samplePeer(); mut(&r); return r.Marshal() }
	hs := func(mut func(*Handshake)) []byte { h := sampleHandshake(); mut(&h); return h.Marshal() }
	cases := []struct {
		name    string
		b       []byte
		decode  func([]byte) error
		wantMsg string
	}{
		{"peer rank negative", peer(func(r *PeerRecord) { r.Rank = -1 }), decPeer, "rank -1 out of range [0, 4)"},
		{"peer cpus negative", peer(func(r *PeerRecord) { r.CPUs = -2 }), decPeer, "CPUs is -2"},
		{"peer rank too big", peer(func(r *PeerRecord) { r.Rank = 4 }), decPeer, "rank 4 out of range [0, 4)"},
		{"peer world size zero", peer(func(r *PeerRecord) { r.Rank, r.WorldSize = 0, 0 }), decPeer, "world size 0"},
		{"peer long hostname", peer(func(r *PeerRecord) { r.Hostname = strings.Repeat("h", MaxStringLen+1) }), decPeer, "Hostname is 4097 bytes"},
		{"peer bad utf8", peer(func(r *PeerRecord) { r.BootID = "\xff\xfe" }), decPeer, "BootID is not valid UTF-8"},
		{"peer bad utf8 address", peer(func(r *PeerRecord) { r.Addresses = []string{"ok", "\xc0"} }), decPeer, "Addresses[1] is not valid UTF-8"},
		{"peer too many addresses", peer(func(r *PeerRecord) { r.Addresses = manyStrings(MaxListLen+1, "a") }), decPeer, "Addresses has 65 entries"},
		{"peer too many interfaces", peer(func(r *PeerRecord) { r.Interfaces = manyStrings(MaxListLen+1, "i") }), decPeer, "Interfaces has 65 entries"},
		{"peer bad utf8 interface", peer(func(r *PeerRecord) { r.Interfaces = []string{"\xc0"} }), decPeer, "Interfaces[0] is not valid UTF-8"},
		{"peer too many transports", peer(func(r *PeerRecord) { r.Transports = manyStrings(MaxListLen+1, "t") }), decPeer, "Transports has 65 entries"},
		{"peer shm probe path", peer(func(r *PeerRecord) { r.ShmProbe = "../etc/passwd" }), decPeer, "not a plain file name"},
		{"peer shm probe dotdot", peer(func(r *PeerRecord) { r.ShmProbe = ".." }), decPeer, "not a plain file name"},
		{"peer version", peer(func(r *PeerRecord) { r.Version = 7 }), decPeer, "PeerRecord has wire version 7, this build speaks wire version 1"},
		{"peer version zero", peer(func(r *PeerRecord) { r.Version = 0 }), decPeer, "wire version 0"},
		{"handshake magic", hs(func(h *Handshake) { h.Magic = 0x47445355 }), decHandshake, "magic 0x47445355, want 0x47445354"},
		{"handshake version", hs(func(h *Handshake) { h.Version = 2 }), decHandshake, "Handshake has wire version 2, this build speaks wire version 1"},
		{"handshake from rank", hs(func(h *Handshake) { h.FromRank = 8 }), decHandshake, "from rank 8 out of range [0, 8)"},
		{"handshake to rank", hs(func(h *Handshake) { h.ToRank = -3 }), decHandshake, "to rank -3 out of range [0, 8)"},
		{"handshake world size", hs(func(h *Handshake) { h.WorldSize = -1 }), decHandshake, "world size -1"},
		{"handshake long group", hs(func(h *Handshake) { h.Group = strings.Repeat("g", MaxStringLen+1) }), decHandshake, "Group is 4097 bytes"},
		{"peer as handshake", peer(func(*PeerRecord) {}), decHandshake, "buffer holds a PeerRecord record"},
		{"handshake as peer", hs(func(*Handshake) {}), decPeer, "buffer holds a Handshake record"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode(tc.b)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), tc.wantMsg)
		})
	}
}

func TestVersionError(t *testing.T) {
	r := samplePeer()
	r.Version = Version + 1
	_, err := UnmarshalPeerRecord(r.Marshal())
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrMalformed)
	assert.ErrorIs(t, err, ErrVersionMismatch)
	var ve *VersionError
	require.True(t, errors.As(err, &ve))
	assert.Equal(t, VersionError{Record: "PeerRecord", Got: Version + 1, Want: Version}, *ve)

	_, err = UnmarshalPeerRecord(func() []byte { r := samplePeer(); r.Rank = 9; return r.Marshal() }())
	assert.NotErrorIs(t, err, ErrVersionMismatch)
}

func decPeer(b []byte) error      { _, err := UnmarshalPeerRecord(b); return err }
func decHandshake(b []byte) error { _, err := UnmarshalHandshake(b); return err }

var decoders = []struct {
	name string
	dec  func([]byte) error
}{
	{"PeerRecord", decPeer},
	{"Handshake", decHandshake},
}

func validRecords() map[string][]byte {
	p, h := samplePeer(), sampleHandshake()
	return map[string][]byte{"PeerRecord": p.Marshal(), "Handshake": h.Marshal()}
}

func TestGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := [][]byte{nil, {}, {0}, {1, 2, 3}, make([]byte, 16), make([]byte, 4096), make([]byte, MaxRecordSize+1)}
	for i := 0; i < 2000; i++ {
		b := make([]byte, rng.IntN(256))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		inputs = append(inputs, b)
	}
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) {
			for _, b := range inputs {
				err := d.dec(b)
				require.Error(t, err)
				require.ErrorIs(t, err, ErrMalformed)
			}
		})
	}
}

func TestTruncated(t *testing.T) {
	recs := validRecords()
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) {
			b := recs[d.name]
			require.NoError(t, d.dec(b))
			for n := 0; n < len(b); n++ {
				err := d.dec(b[:n])
				require.Error(t, err, "prefix of %d bytes", n)
				require.ErrorIs(t, err, ErrMalformed)
				// Dropping leading bytes is also an error.
				err = d.dec(b[n+1:])
				require.ErrorIs(t, err, ErrMalformed, "suffix from %d", n+1)
			}
			// Trailing garbage breaks the checksum.
			require.ErrorIs(t, d.dec(append(append([]byte{}, b...), 0)), ErrMalformed)
		})
	}
}

func TestBitFlips(t *testing.T) {
	recs := validRecords()
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) {
			b := recs[d.name]
			for i := 0; i < len(b)*8; i++ {
				c := append([]byte(nil), b...)
				c[i/8] ^= 1 << (i % 8)
				err := d.dec(c)
				require.Error(t, err, "bit %d", i)
				require.ErrorIs(t, err, ErrMalformed)
			}
		})
	}
}

// reseal replaces the checksum trailer of b so corruption reaches the
// structural verifier instead of stopping at the checksum.
func reseal(b []byte) []byte {
	if len(b) < trailerLen {
		return b
	}
	out := append([]byte(nil), b...)
	body := out[:len(out)-trailerLen]
	binary.LittleEndian.PutUint32(out[len(body):], crc32.Checksum(body, castagnoli))
	return out
}

// With valid checksums, bit flips and byte corruption anywhere in the
// FlatBuffer must still never panic, and anything accepted must validate.
func TestCorruptionBehindValidChecksum(t *testing.T) {
	recs := validRecords()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) {
			b := recs[d.name]
			body := len(b) - trailerLen
			for i := 0; i < body*8; i++ {
				c := append([]byte(nil), b...)
				c[i/8] ^= 1 << (i % 8)
				assert.NotPanics(t, func() { _ = d.dec(reseal(c)) })
			}
			for i := 0; i < 20000; i++ {
				c := append([]byte(nil), b...)
				for k := rng.IntN(4) + 1; k > 0; k-- {
					c[rng.IntN(body)] = byte(rng.Uint32())
				}
				if rng.IntN(4) == 0 {
					c = c[:rng.IntN(len(c))]
				}
				assert.NotPanics(t, func() { _ = d.dec(reseal(c)) })
			}
		})
	}
}

// hostileFields is the schema of the tables TestHostileOffsets builds by
// hand: a ulong, then a string.
var hostileFields = []fieldKind{fU64, fString}

// decHostile opens b as a record and verifies its table against
// hostileFields.
func decHostile(b []byte) error {
	body, err := open(b, "Hostile", identHandshake)
	if err != nil {
		return err
	}
	return verifyTable(body, "Hostile", hostileFields)
}

// Hand-built hostile buffers aimed at each verifier check; all must fail
// cleanly even with a valid identifier and checksum.
func TestHostileOffsets(t *testing.T) {
	le32 := func(b []byte, p int, v uint32) { binary.LittleEndian.PutUint32(b[p:], v) }
	le16 := func(b []byte, p int, v uint16) { binary.LittleEndian.PutUint16(b[p:], v) }
	base := func() []byte {
		// root offset 16, identifier, vtable at 8 (2 slots, the ulong
		// present at +4), table at 16 (12 bytes: soffset + ulong), zero
		// padding after.
		b := make([]byte, 64+trailerLen)
		le32(b, 0, 16)
		copy(b[4:], identHandshake)
		le16(b, 8, 8)   // vtable size
		le16(b, 10, 12) // table size
		le16(b, 12, 4)  // the ulong at +4
		le16(b, 14, 0)
		le32(b, 16, 8) // soffset: vtable at 16-8 = 8
		return b
	}
	require.NoError(t, decHostile(reseal(base())))

	mutations := []struct {
		name, want string
		mut        func([]byte)
	}{
		{"root past end", "root table offset", func(b []byte) { le32(b, 0, 0xfffffff0) }},
		{"root in header", "root table offset 4", func(b []byte) { le32(b, 0, 4) }},
		{"vtable negative", "vtable offset", func(b []byte) { le32(b, 16, 0x7fffffff) }},
		{"vtable past end", "vtable offset", func(b []byte) { le32(b, 16, 0x80000000) }},
		{"vtable size huge", "vtable size 65534", func(b []byte) { le16(b, 8, 0xfffe) }},
		{"vtable size odd", "vtable size 7", func(b []byte) { le16(b, 8, 7) }},
		{"table size huge", "table size 65520", func(b []byte) { le16(b, 10, 0xfff0) }},
		{"field past table", "field 0 at offset 10", func(b []byte) { le16(b, 12, 10) }},
		{"field in soffset", "field 0 at offset 2", func(b []byte) { le16(b, 12, 2) }},
		{"string offset huge", "field 1: bad offset", func(b []byte) {
			le16(b, 14, 8) // the string at +8
			le32(b, 24, 0xfffffff0)
		}},
		{"string offset zero", "field 1: bad offset 0", func(b []byte) {
			le16(b, 14, 8)
			le32(b, 24, 0)
		}},
		{"string length huge", "string of 2147483647 bytes", func(b []byte) {
			le16(b, 14, 8)
			le32(b, 24, 8) // string at 32
			le32(b, 32, 0x7fffffff)
		}},
		{"string unterminated", "not NUL-terminated", func(b []byte) {
			le16(b, 14, 8)
			le32(b, 24, 8)
			le32(b, 32, 4)
			copy(b[36:], "abcdX")
		}},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			b := base()
			m.mut(b)
			err := decHostile(reseal(b))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), m.want)
		})
	}
	// Vector of strings with an absurd count, via a PeerRecord body.
	t.Run("vector count huge", func(t *testing.T) {
		r := PeerRecord{Version: Version, WorldSize: 1, Addresses: []string{"a"}}
		b := r.Marshal()
		tab := fb.GetRootAsPeerRecord(b, 0).Table()
		vec := tab.Vector(flatbuffers.UOffsetT(tab.Offset(4+2*8))) - 4
		le32(b, int(vec), 0x40000000)
		_, err := UnmarshalPeerRecord(reseal(b))
		require.ErrorIs(t, err, ErrMalformed)
		assert.Contains(t, err.Error(), "vector of 1073741824 entries out of range")
	})
}

// A record from a newer writer with extra trailing fields still decodes.
func TestForwardCompatibleExtraField(t *testing.T) {
	b := flatbuffers.NewBuilder(0)
	group := b.CreateString("pg1")
	extra := b.CreateString("a field from the future")
	b.StartObject(9)
	b.PrependUint32Slot(0, Magic, 0)
	b.PrependUint16Slot(1, Version, 0)
	b.PrependUOffsetTSlot(3, group, 0)
	b.PrependInt32Slot(4, 1, 0)
	b.PrependInt32Slot(6, 2, 0)
	b.PrependUOffsetTSlot(8, extra, 0)
	b.FinishWithFileIdentifier(b.EndObject(), []byte(identHandshake))
	raw := append(append([]byte(nil), b.FinishedBytes()...), 0, 0, 0, 0)
	h, err := UnmarshalHandshake(reseal(raw))
	require.NoError(t, err)
	assert.Equal(t, Handshake{Magic: Magic, Version: Version, Group: "pg1", FromRank: 1, WorldSize: 2}, h)
}

// TestPeerRecordInterfacesCompatible: a record from a writer that predates
// the interfaces field decodes with no interfaces, and a reader that
// predates it (the first 13 fields) accepts a record carrying it.
func TestPeerRecordInterfacesCompatible(t *testing.T) {
	old := samplePeer()
	old.Interfaces = nil
	b := flatbuffers.NewBuilder(0)
	group := b.CreateString(old.Group)
	addrs := createStringVector(b, old.Addresses)
	b.StartObject(13)
	b.PrependUint16Slot(0, old.Version, 0)
	b.PrependUOffsetTSlot(2, group, 0)
	b.PrependInt32Slot(3, old.Rank, 0)
	b.PrependInt32Slot(4, old.WorldSize, 0)
	b.PrependUOffsetTSlot(8, addrs, 0)
	b.PrependUint16Slot(9, old.Port, 0)
	b.FinishWithFileIdentifier(b.EndObject(), []byte(identPeerRecord))
	got, err := UnmarshalPeerRecord(reseal(append(append([]byte(nil), b.FinishedBytes()...), 0, 0, 0, 0)))
	require.NoError(t, err)
	assert.Nil(t, got.Interfaces)
	assert.Equal(t, old.Addresses, got.Addresses)

	cur := samplePeer()
	body, err := open(cur.Marshal(), peerRecordName, identPeerRecord)
	require.NoError(t, err)
	require.NoError(t, verifyTable(body, peerRecordName, peerRecordFields[:13]))
	assert.Equal(t, 4, fb.GetRootAsPeerRecord(body, 0).InterfacesLength())
}
