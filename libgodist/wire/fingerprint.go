package wire

import (
	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/godist/godist/libgodist/wire/fb"
)

// Fingerprint describes one collective call for desync checks: ranks
// exchange fingerprints and compare them. Fingerprint is comparable with ==.
// See doc.go.
type Fingerprint struct {
	Seq      uint64 // per-group sequence number of the collective
	Op       string // collective name, e.g. "allreduce"
	DType    uint8  // element type code
	Count    int64  // element count, >= 0
	Root     int32  // root rank of rooted collectives
	ReduceOp uint8  // reduction code for reducing collectives
}

const fingerprintName = "Fingerprint"

// Field layout of table Fingerprint in godist.fbs, in schema order.
var fingerprintFields = []fieldKind{
	fU64,    // seq
	fString, // op
	fU8,     // dtype
	fU64,    // count
	fU32,    // root
	fU8,     // reduce_op
}

// Marshal encodes f. It does not validate f; call Validate first to be sure
// the record will be accepted by UnmarshalFingerprint.
func (f *Fingerprint) Marshal() []byte {
	b := flatbuffers.NewBuilder(80 + len(f.Op))
	op := createString(b, f.Op)
	fb.FingerprintStart(b)
	fb.FingerprintAddSeq(b, f.Seq)
	fb.FingerprintAddCount(b, f.Count)
	fb.FingerprintAddOp(b, op)
	fb.FingerprintAddRoot(b, f.Root)
	fb.FingerprintAddDtype(b, f.DType)
	fb.FingerprintAddReduceOp(b, f.ReduceOp)
	return seal(b, fb.FingerprintEnd(b), identFingerprint)
}

// UnmarshalFingerprint decodes and validates a record produced by
// Fingerprint.Marshal. It never panics; every error wraps ErrMalformed.
func UnmarshalFingerprint(b []byte) (f Fingerprint, err error) {
	defer recoverMalformed(fingerprintName, &err)
	body, err := open(b, fingerprintName, identFingerprint)
	if err != nil {
		return Fingerprint{}, err
	}
	if err := verifyTable(body, fingerprintName, fingerprintFields); err != nil {
		return Fingerprint{}, err
	}
	t := fb.GetRootAsFingerprint(body, 0)
	f = Fingerprint{
		Seq:      t.Seq(),
		Op:       string(t.Op()),
		DType:    t.Dtype(),
		Count:    t.Count(),
		Root:     t.Root(),
		ReduceOp: t.ReduceOp(),
	}
	if err := f.Validate(); err != nil {
		return Fingerprint{}, err
	}
	return f, nil
}

// Validate reports whether UnmarshalFingerprint would accept f: Count must
// be non-negative and Op valid UTF-8 of at most MaxStringLen bytes.
func (f *Fingerprint) Validate() error {
	if f.Count < 0 {
		return malformed(fingerprintName, "count %d is negative", f.Count)
	}
	return checkString(fingerprintName, "Op", f.Op)
}
