// Package wire defines the self-describing records godist exchanges across
// process boundaries outside the hot path: during rendezvous and when a TCP
// connection opens. Tensor payloads never go through this package, and
// neither do desync checks: every message of a collective carries the
// sender's transport.Stamp, 48 fixed bytes in a TCP frame's header or a
// shared-memory record (the op, sequence number, dtype, element count,
// root, reduce op, a hash of the caller's tensor shapes and, for
// all_to_all, the elements the pair exchanges), and the receiver compares
// it with the collective it runs (libgodist/transport/stamp.go).
//
// Each record is a FlatBuffers table (schema: godist.fbs, generated code:
// package fb, regenerated with go generate). Callers only see the plain Go
// structs below; no FlatBuffers type leaks out of this package.
//
// # Records
//
// PeerRecord is written by every rank of a process group into the c10d
// store during rendezvous (one key per rank) and read by every other rank of
// that group to learn how to reach it: hostname, boot ID and PID identify
// the process and host (two ranks on the same boot ID share a kernel), the
// Addresses and Port say where it listens (Interfaces names the network
// interface of each address, for error messages), ShmProbe names a file
// under /dev/shm that a peer can look for to prove the two ranks share
// /dev/shm, and Transports lists what the rank can speak ("tcp", "shm").
// Session is a random token chosen by rank 0; other ranks may write 0 and
// adopt rank 0's.
//
// Handshake is the first frame the connecting rank sends on every new TCP
// connection between two ranks; the accepting rank reads it to attribute
// the connection and to reject strays: wrong Magic, another wire Version,
// another Session or Group, a FromRank/ToRank outside the group, or a
// WorldSize that differs from its own.
//
// # Encoding
//
// Marshal produces a FlatBuffer finished with a 4-byte file identifier
// ("GDPE" PeerRecord, "GDHS" Handshake) followed by a 4-byte little-endian
// CRC-32C (Castagnoli) of the FlatBuffer. The buffer starts with the
// FlatBuffer, so any FlatBuffers reader can decode a record directly and
// ignore the trailer. Empty strings and lists are omitted from
// the table and decode as "" and nil.
//
// # Decoding
//
// The Unmarshal functions never panic on arbitrary input. They check, in
// order: the size limit (MaxRecordSize), the checksum, the file identifier,
// the FlatBuffers structure (root offset, vtable, every field, string and
// vector inside the buffer, strings NUL-terminated), and finally the
// record's semantics (Validate): Magic, Version == wire.Version, ranks in
// [0, WorldSize), strings valid UTF-8 of at most MaxStringLen bytes, at
// most MaxListLen addresses, transports and interfaces. Any panic left in
// the generated accessors is recovered. Every error wraps ErrMalformed; a version
// mismatch is a *VersionError, which also matches ErrVersionMismatch.
//
// Marshal does not validate; call Validate on the sending side to catch a
// record its peers would reject.
package wire
