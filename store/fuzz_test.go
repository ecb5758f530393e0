package store

import (
	"bufio"
	"bytes"
	"testing"
)

// fuzzLimits keep allocations small while fuzzing.
var fuzzLimits = limits{maxKeyLen: 256, maxValueLen: 4096, maxKeys: 64, maxRequest: 1 << 16}

// FuzzServerDecode feeds arbitrary bytes to the server's request decoder
// and state machine: decoding must never panic, every decoded request must
// re-encode to exactly the bytes it came from, and the state machine must
// accept or reject each one without panicking.
func FuzzServerDecode(f *testing.F) {
	for _, r := range allRequests() {
		f.Add(appendRequest(appendRequest(nil, rqValidate()), r))
	}
	f.Add([]byte{})
	f.Add([]byte{0xFF})
	f.Add(hexBytes([]byte{3}, u64le(1<<63)))
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReader(bytes.NewReader(data))
		s := newServerState()
		s.connect(1)
		s.connect(2)
		off := 0
		for i := 0; ; i++ {
			req, err := readRequest(br, fuzzLimits)
			if err != nil {
				return
			}
			enc := appendRequest(nil, req)
			if !bytes.HasPrefix(data[off:], enc) {
				t.Fatalf("request %d (%v) re-encodes to %x, input at %d is %x", i, req.cmd, enc, off, data[off:min(len(data), off+len(enc))])
			}
			off += len(enc)
			c := connID(1 + i%2)
			if i < 2 { // let both connections through VALIDATE
				if _, err := s.handle(c, ptr(rqValidate())); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.handle(c, &req); err != nil {
				s.disconnect(c)
				s.connect(c)
			}
		}
	})
}

// FuzzFileStoreRead feeds arbitrary bytes to the FileStore record reader:
// it must never panic, must account for every byte, and the records it
// returns must re-encode to exactly the bytes it consumed.
func FuzzFileStoreRead(f *testing.F) {
	f.Add(appendRecord(appendRecord(nil, "refcount/", []byte("1")), "/k", []byte("v")))
	f.Add(appendRecord(appendRecord(nil, "/k", []byte("v")), "-/k", nil))
	f.Add([]byte{5, 0, 0, 0, '/', 'k'})
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, n, rest := parseRecords(data)
		if n < 0 || rest < 0 || n+rest != len(data) {
			t.Fatalf("consumed %d + rest %d != %d", n, rest, len(data))
		}
		var re []byte
		for _, r := range recs {
			re = appendRecord(re, r.key, r.value)
		}
		if !bytes.Equal(re, data[:n]) {
			t.Fatalf("records re-encode to %x, want %x", re, data[:n])
		}
		cache := map[string][]byte{}
		applyRecords(cache, recs)
		if len(cache) > len(recs) {
			t.Fatalf("%d cache entries from %d records", len(cache), len(recs))
		}
	})
}
