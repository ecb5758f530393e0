package wire

import (
	"strings"

	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/godist/godist/libgodist/wire/fb"
)

// PeerRecord is what every rank of a process group publishes into the c10d
// store during rendezvous, and what every rank reads back for each peer.
// See doc.go for the meaning of each field.
type PeerRecord struct {
	Version    uint16   // wire.Version of the writer
	Session    uint64   // random token chosen by rank 0; others may write 0
	Group      string   // process group name
	Rank       int32    // rank of the writer, in [0, WorldSize)
	WorldSize  int32    // size of the process group
	Hostname   string   // os.Hostname() of the writer
	BootID     string   // /proc/sys/kernel/random/boot_id of the writer's host
	PID        int32    // process id of the writer
	Addresses  []string // IPs the writer listens on, loopback included
	Port       uint16   // TCP port the writer listens on
	ShmProbe   string   // file name under /dev/shm proving a shared /dev/shm; may be empty
	Transports []string // transports the writer supports, e.g. "tcp", "shm"
	CPUs       int32    // CPUs the writer's process may run on; 0 if not said (older writers)
	Interfaces []string // interface of each of Addresses, same order; "" or missing: not known
}

const peerRecordName = "PeerRecord"

// Field layout of table PeerRecord in godist.fbs, in schema order.
var peerRecordFields = []fieldKind{
	fU16,       // version
	fU64,       // session
	fString,    // group
	fU32,       // rank
	fU32,       // world_size
	fString,    // hostname
	fString,    // boot_id
	fU32,       // pid
	fStringVec, // addresses
	fU16,       // port
	fString,    // shm_probe
	fStringVec, // transports
	fU32,       // cpus
	fStringVec, // interfaces
}

// Marshal encodes r. It does not validate r; call Validate first to be sure
// the record will be accepted by UnmarshalPeerRecord.
func (r *PeerRecord) Marshal() []byte {
	size := 128 + len(r.Group) + len(r.Hostname) + len(r.BootID) + len(r.ShmProbe)
	for _, s := range r.Addresses {
		size += 12 + len(s)
	}
	for _, s := range r.Transports {
		size += 12 + len(s)
	}
	for _, s := range r.Interfaces {
		size += 12 + len(s)
	}
	b := flatbuffers.NewBuilder(size)
	group := createString(b, r.Group)
	hostname := createString(b, r.Hostname)
	bootID := createString(b, r.BootID)
	addresses := createStringVector(b, r.Addresses)
	shmProbe := createString(b, r.ShmProbe)
	transports := createStringVector(b, r.Transports)
	interfaces := createStringVector(b, r.Interfaces)

	fb.PeerRecordStart(b)
	fb.PeerRecordAddSession(b, r.Session)
	fb.PeerRecordAddGroup(b, group)
	fb.PeerRecordAddRank(b, r.Rank)
	fb.PeerRecordAddWorldSize(b, r.WorldSize)
	fb.PeerRecordAddHostname(b, hostname)
	fb.PeerRecordAddBootId(b, bootID)
	fb.PeerRecordAddPid(b, r.PID)
	fb.PeerRecordAddAddresses(b, addresses)
	fb.PeerRecordAddShmProbe(b, shmProbe)
	fb.PeerRecordAddTransports(b, transports)
	fb.PeerRecordAddInterfaces(b, interfaces)
	fb.PeerRecordAddVersion(b, r.Version)
	fb.PeerRecordAddPort(b, r.Port)
	fb.PeerRecordAddCpus(b, r.CPUs)
	return seal(b, fb.PeerRecordEnd(b), identPeerRecord)
}

// UnmarshalPeerRecord decodes and validates a record produced by
// PeerRecord.Marshal. It never panics; every error wraps ErrMalformed, and
// a record from another wire version yields a *VersionError.
func UnmarshalPeerRecord(b []byte) (rec PeerRecord, err error) {
	defer recoverMalformed(peerRecordName, &err)
	body, err := open(b, peerRecordName, identPeerRecord)
	if err != nil {
		return PeerRecord{}, err
	}
	if err := verifyTable(body, peerRecordName, peerRecordFields); err != nil {
		return PeerRecord{}, err
	}
	t := fb.GetRootAsPeerRecord(body, 0)
	rec = PeerRecord{
		Version:   t.Version(),
		Session:   t.Session(),
		Group:     string(t.Group()),
		Rank:      t.Rank(),
		WorldSize: t.WorldSize(),
		Hostname:  string(t.Hostname()),
		BootID:    string(t.BootId()),
		PID:       t.Pid(),
		Port:      t.Port(),
		ShmProbe:  string(t.ShmProbe()),
		CPUs:      t.Cpus(),
	}
	// Bound the lists before copying them out.
	if n := t.AddressesLength(); n > MaxListLen {
		return PeerRecord{}, malformed(peerRecordName, "Addresses has %d entries, limit %d", n, MaxListLen)
	}
	if n := t.TransportsLength(); n > MaxListLen {
		return PeerRecord{}, malformed(peerRecordName, "Transports has %d entries, limit %d", n, MaxListLen)
	}
	if n := t.InterfacesLength(); n > MaxListLen {
		return PeerRecord{}, malformed(peerRecordName, "Interfaces has %d entries, limit %d", n, MaxListLen)
	}
	rec.Addresses = readList(t.AddressesLength(), t.Addresses)
	rec.Transports = readList(t.TransportsLength(), t.Transports)
	rec.Interfaces = readList(t.InterfacesLength(), t.Interfaces)
	if err := rec.Validate(); err != nil {
		return PeerRecord{}, err
	}
	return rec, nil
}

// Validate reports whether UnmarshalPeerRecord would accept r: Version must
// be wire.Version, 0 <= Rank < WorldSize, every string valid UTF-8 of at
// most MaxStringLen bytes, at most MaxListLen Addresses, Transports and
// Interfaces, and
// ShmProbe empty or a plain file name (no '/', no NUL, not "." or "..").
func (r *PeerRecord) Validate() error {
	if err := checkVersion(peerRecordName, r.Version); err != nil {
		return err
	}
	if err := checkRank(peerRecordName, "rank", r.Rank, r.WorldSize); err != nil {
		return err
	}
	for _, f := range []struct{ name, val string }{
		{"Group", r.Group},
		{"Hostname", r.Hostname},
		{"BootID", r.BootID},
		{"ShmProbe", r.ShmProbe},
	} {
		if err := checkString(peerRecordName, f.name, f.val); err != nil {
			return err
		}
	}
	if r.CPUs < 0 {
		return malformed(peerRecordName, "CPUs is %d", r.CPUs)
	}
	if p := r.ShmProbe; p == "." || p == ".." || strings.ContainsAny(p, "/\x00") {
		return malformed(peerRecordName, "ShmProbe %q is not a plain file name", p)
	}
	if err := checkList(peerRecordName, "Addresses", r.Addresses); err != nil {
		return err
	}
	if err := checkList(peerRecordName, "Interfaces", r.Interfaces); err != nil {
		return err
	}
	return checkList(peerRecordName, "Transports", r.Transports)
}
