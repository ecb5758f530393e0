package store

import "encoding/binary"

// FileStore file format (torch's FileStore; reference §3). The file is an
// append-only log of records with no header; a record is
//
//	u32 keylen | key | u32 vallen | value     (little-endian)
//
// Keys are "/"+user key for values, "-"+"/"+user key (empty value) for a
// deletion, and the bare "refcount/" and "cleanup/" counters. Replaying the
// log in order, last write wins, gives the store's contents.

const (
	filePrefix     = "/"         // user keys
	fileTombstone  = "-"         // deletion records: "-" + "/" + key
	fileRefcount   = "refcount/" // openers still open
	fileCleanup    = "cleanup/"  // openers that closed
	recordHdrBytes = 4
)

// fileRecord is one decoded record. value aliases the parsed buffer.
type fileRecord struct {
	key   string
	value []byte
}

// parseRecords decodes the complete records at the start of b and returns
// them with the number of bytes they occupy. A trailing partial record is
// not consumed (rest reports how many bytes were left over); the caller
// decides whether that is an error.
func parseRecords(b []byte) (recs []fileRecord, consumed int, rest int) {
	for {
		key, n := readField(b[consumed:])
		if n < 0 {
			break
		}
		val, m := readField(b[consumed+n:])
		if m < 0 {
			break
		}
		recs = append(recs, fileRecord{key: string(key), value: val})
		consumed += n + m
	}
	return recs, consumed, len(b) - consumed
}

// readField reads one u32-length-prefixed field; n < 0 means b is too short.
func readField(b []byte) (field []byte, n int) {
	if len(b) < recordHdrBytes {
		return nil, -1
	}
	l := uint64(binary.LittleEndian.Uint32(b))
	if l > uint64(len(b)-recordHdrBytes) {
		return nil, -1
	}
	end := recordHdrBytes + int(l)
	return b[recordHdrBytes:end:end], end
}

// appendRecord appends the encoding of (key, value) to b. Both must be
// shorter than 4 GiB (checked by the caller with checkRecordSize).
func appendRecord(b []byte, key string, value []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(key)))
	b = append(b, key...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// checkRecordSize fails with ErrInvalid if key or value does not fit a u32
// length.
func checkRecordSize(key string, value []byte) error {
	const max = 1<<32 - 1
	if uint64(len(key)) > max || uint64(len(value)) > max {
		return errf(ErrInvalid, "record for key of %d bytes with value of %d bytes does not fit the file format", len(key), len(value))
	}
	return nil
}

// applyRecords replays recs onto cache: a tombstone deletes key[1:], any
// other record sets key. Values are copied.
func applyRecords(cache map[string][]byte, recs []fileRecord) {
	for _, r := range recs {
		if len(r.key) > 0 && r.key[0] == fileTombstone[0] {
			delete(cache, r.key[1:])
			continue
		}
		cache[r.key] = cloneBytes(r.value)
	}
}
