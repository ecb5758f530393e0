package auth

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// rw reads from a fixed input and discards what is written.
type rw struct{ io.Reader }

func (rw) Write(b []byte) (int, error) { return len(b), nil }

// FuzzAuthServer feeds arbitrary client bytes to the server side: it must
// never panic, never read past the hello and proof, and never accept (the
// proof would have to match a fresh nonce).
func FuzzAuthServer(f *testing.F) {
	hello := append([]byte(magic), bytes.Repeat([]byte{1}, NonceLen)...)
	f.Add([]byte{})
	f.Add([]byte{13, 0x3c, 0x85, 0x6f, 0x4c, 14, 1, 0, 0, 0})
	f.Add(append(append([]byte{}, hello...), bytes.Repeat([]byte{2}, ProofLen)...))
	k := NewKey([]byte("fuzz"), Store)
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		err := Server(rw{r}, k, "")
		if !errors.Is(err, ErrAuth) {
			t.Fatalf("server accepted %x: %v", in, err)
		}
		if read := len(in) - r.Len(); read > HelloLen+ProofLen {
			t.Fatalf("read %d bytes before authentication", read)
		}
	})
}

// FuzzAuthClient feeds arbitrary server bytes to the client side.
func FuzzAuthClient(f *testing.F) {
	f.Add([]byte{})
	f.Add(Refusal)
	f.Add(append([]byte(magic), bytes.Repeat([]byte{3}, NonceLen+MACLen+1)...))
	k := NewKey([]byte("fuzz"), Store)
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := Client(rw{bytes.NewReader(in)}, k, ""); !errors.Is(err, ErrAuth) {
			t.Fatalf("client accepted %x: %v", in, err)
		}
	})
}
