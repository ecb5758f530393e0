package auth

import (
	"bytes"
	"crypto/hmac"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// pair runs the server and the client over a pipe and returns both errors.
func pair(t *testing.T, sk, ck *Key, sctx, cctx string) (serr, cerr error) {
	t.Helper()
	s, c := net.Pipe()
	defer s.Close()
	defer c.Close()
	d := time.Now().Add(5 * time.Second)
	_ = s.SetDeadline(d)
	_ = c.SetDeadline(d)
	done := make(chan error, 1)
	go func() {
		err := Server(s, sk, sctx)
		if err != nil {
			s.Close()
		}
		done <- err
	}()
	cerr = Client(c, ck, cctx)
	if cerr != nil {
		c.Close()
	}
	return <-done, cerr
}

func reason(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func TestRightSecret(t *testing.T) {
	k := NewKey([]byte("s3cret"), Transport)
	if serr, cerr := pair(t, k, k, "g 0", "g 0"); serr != nil || cerr != nil {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
}

func TestWrongSecretBothSides(t *testing.T) {
	serr, cerr := pair(t, NewKey([]byte("a"), Store), NewKey([]byte("b"), Store), "", "")
	if reason(serr) != WrongSecret || reason(cerr) != WrongSecret {
		t.Fatalf("server %v, client %v; want both %q", serr, cerr, WrongSecret)
	}
	if !errors.Is(serr, ErrAuth) || !errors.Is(cerr, ErrAuth) {
		t.Fatal("errors do not wrap ErrAuth")
	}
}

func TestPurposeAndContextBind(t *testing.T) {
	if serr, cerr := pair(t, NewKey([]byte("a"), Store), NewKey([]byte("a"), Transport), "", ""); serr == nil || cerr == nil {
		t.Fatalf("a store key authenticated to a transport: %v %v", serr, cerr)
	}
	k := NewKey([]byte("a"), Transport)
	if serr, cerr := pair(t, k, k, "g rank=0", "g rank=1"); serr == nil || cerr == nil {
		t.Fatalf("a proof for rank 1 authenticated to rank 0: %v %v", serr, cerr)
	}
}

func TestNoAuthRefused(t *testing.T) {
	s, c := net.Pipe()
	defer c.Close()
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	done := make(chan error, 1)
	go func() { done <- Server(s, NewKey([]byte("a"), Store), ""); s.Close() }()
	// A torch TCPStore client starts with VALIDATE.
	go func() { _, _ = c.Write([]byte{13, 0x3c, 0x85, 0x6f, 0x4c}) }()
	got, _ := io.ReadAll(c)
	if err := <-done; reason(err) != NoAuth {
		t.Fatalf("server: %v, want %q", err, NoAuth)
	}
	if !bytes.Equal(got, Refusal) {
		t.Fatalf("client read %q, want %q", got, Refusal)
	}
}

func TestServerWithoutSecret(t *testing.T) {
	s, c := net.Pipe()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() { b := make([]byte, 4); _, _ = io.ReadFull(s, b); s.Close() }() // reads a frame header and drops
	if err := Client(c, NewKey([]byte("a"), Store), ""); reason(err) != NoSecret {
		t.Fatalf("client: %v, want %q", err, NoSecret)
	}
}

// recorder keeps what the client wrote.
type recorder struct {
	io.ReadWriter
	w bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) { r.w.Write(b); return r.ReadWriter.Write(b) }

func TestReplayRefused(t *testing.T) {
	k := NewKey([]byte("a"), Store)
	s, c := net.Pipe()
	rec := &recorder{ReadWriter: c}
	done := make(chan error, 1)
	go func() { done <- Server(s, k, "") }()
	if err := Client(rec, k, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.Close()
	c.Close()
	// Play the recorded client bytes to a fresh server.
	s, c = net.Pipe()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() { done <- Server(s, k, ""); s.Close() }()
	go func() { _, _ = c.Write(rec.w.Bytes()) }()
	_, _ = io.ReadAll(c)
	if err := <-done; reason(err) != WrongSecret {
		t.Fatalf("replay: %v, want refused as %q", err, WrongSecret)
	}
}

func TestTruncatedAndGarbage(t *testing.T) {
	k := NewKey([]byte("a"), Store)
	hello := append([]byte(magic), make([]byte, NonceLen)...)
	for name, in := range map[string][]byte{
		"empty":          nil,
		"short magic":    []byte("GD"),
		"short nonce":    hello[:10],
		"no proof":       hello,
		"short proof":    append(append([]byte{}, hello...), 1, 2, 3),
		"garbage":        bytes.Repeat([]byte{0xff}, 200),
		"garbage proof":  append(append([]byte{}, hello...), bytes.Repeat([]byte{7}, ProofLen)...),
		"magic+overflow": append(append([]byte{}, hello...), bytes.Repeat([]byte{7}, 4*ProofLen)...),
	} {
		t.Run(name, func(t *testing.T) {
			s, c := net.Pipe()
			defer c.Close()
			_ = s.SetDeadline(time.Now().Add(200 * time.Millisecond))
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- Server(s, k, ""); s.Close() }()
			go func() { _, _ = c.Write(in) }() // then stays silent
			go func() { _, _ = io.Copy(io.Discard, c) }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrAuth) {
					t.Fatalf("err %v", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("server did not give up at its deadline")
			}
			if time.Since(start) > 2*time.Second {
				t.Fatal("took too long")
			}
		})
	}
}

func TestConstantTimeCompare(t *testing.T) {
	// The proofs are compared with hmac.Equal: guard against a refactor to
	// bytes.Equal or ==.
	src, err := os.ReadFile("auth.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "hmac.Equal("); n != 2 {
		t.Fatalf("hmac.Equal used %d times, want 2", n)
	}
	if strings.Contains(string(src), "bytes.Equal(sp") || strings.Contains(string(src), "bytes.Equal(p,") {
		t.Fatal("a proof is compared with bytes.Equal")
	}
	_ = hmac.Equal
}

func TestNoSecretNoKey(t *testing.T) {
	if NewKey(nil, Store) != nil {
		t.Fatal("empty secret gave a key")
	}
	defer set.Store(nil)
	set.Store(nil)
	if Current(Store) != nil {
		t.Fatal("no SetSecret gave a key")
	}
	SetSecret([]byte("x"))
	if Current(Store) == nil {
		t.Fatal("SetSecret(x) gave no key")
	}
	SetSecret(nil)
	if Current(Store) != nil {
		t.Fatal("SetSecret(nil) did not take the secret away")
	}
	SetSecret([]byte("y"))
	if *Current(Store) != *NewKey([]byte("y"), Store) {
		t.Fatal("SetSecret did not set the key")
	}
}
