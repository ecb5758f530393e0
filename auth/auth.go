// Package auth is godist's connection authentication: a mutual
// challenge-response over HMAC-SHA256 with keys derived from a job secret
// (GODIST_SECRET), run on a new connection before anything else is read.
//
// The exchange, all sizes fixed:
//
//	client → server  hello:     "GDA1" | client nonce (32)
//	server → client  challenge: "GDA1" | server nonce (32) | server proof (32)
//	client → server  proof:     client proof (32)
//	server → client  verdict:   0 accepted, 1 refused
//
// A proof is HMAC(key, role | context | client nonce | server nonce), with
// role "server" or "client" so one side's proof never serves the other, and
// key = HMAC(secret, "godist v1 " + purpose). Both nonces are fresh on each
// connection, so a recorded exchange does not authenticate again. A server
// that reads anything but "GDA1" first answers Refusal and closes.
package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// Env is the environment variable that holds the job secret: godist's
// library reads it once, when it loads (assemble.Configure), and hands it
// to SetSecret; errors name it.
const Env = "GODIST_SECRET"

// Purposes of keys: one key per kind of socket.
const (
	Transport = "godist-transport"
	Store     = "godist-store"
)

// Sizes of the exchange's messages.
const (
	NonceLen     = 32
	MACLen       = sha256.Size
	HelloLen     = len(magic) + NonceLen
	ChallengeLen = len(magic) + NonceLen + MACLen
	ProofLen     = MACLen
)

const magic = "GDA1"

// Refusal is what a server with a secret answers a connection that does
// not start with an authentication hello, before it closes it.
var Refusal = []byte("GDA?")

// ErrAuth is wrapped by every authentication failure.
var ErrAuth = errors.New("godist: authentication failed")

// Reason says why an exchange failed.
type Reason string

// Reasons, as logged.
const (
	NoAuth      Reason = "no authentication"
	WrongSecret Reason = "wrong secret"
	Malformed   Reason = "replayed/malformed"
	Refused     Reason = "refused by the server"
	NoSecret    Reason = "the server did not authenticate (does it have " + Env + " set?)"
)

// Error is an exchange that failed: on which side, why, and the I/O or
// other error beneath if any. It wraps ErrAuth.
type Error struct {
	Side   string // "server" or "client": who detected it
	Reason Reason
	Err    error // may be nil
}

func (e *Error) Error() string {
	s := fmt.Sprintf("godist: authentication failed (%s side): %s", e.Side, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrAuth and the error beneath.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrAuth}
	}
	return []error{ErrAuth, e.Err}
}

// Key is a secret's key for one purpose. The zero Key is not valid; a nil
// *Key means "no secret".
type Key struct{ k [sha256.Size]byte }

// NewKey derives the key of secret for purpose; it is nil if the secret is
// empty.
func NewKey(secret []byte, purpose string) *Key {
	if len(secret) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("godist v1 " + purpose))
	var k Key
	m.Sum(k.k[:0])
	return &k
}

// set is the secret SetSecret gave, if it was called.
var set atomic.Pointer[[]byte]

// SetSecret sets the job secret that Current's keys come from: GODIST_SECRET
// as the process started (assemble.Configure), or as a host that changes
// its environment later has it (Python passes it before it creates each
// listener or store); empty means none.
func SetSecret(secret []byte) {
	b := append([]byte(nil), secret...)
	set.Store(&b)
}

// Current is the key for purpose of the secret SetSecret gave; nil when
// there is none.
func Current(purpose string) *Key {
	if p := set.Load(); p != nil {
		return NewKey(*p, purpose)
	}
	return nil
}

// proof is HMAC(key, role | len(context) | context | cn | sn).
func (k *Key) proof(role, context string, cn, sn []byte) []byte {
	m := hmac.New(sha256.New, k.k[:])
	m.Write([]byte(role))
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(context)))
	m.Write(n[:])
	m.Write([]byte(context))
	m.Write(cn)
	m.Write(sn)
	return m.Sum(nil)
}

// Client runs the client side on rw, whose deadline the caller sets. A
// nil error means both sides proved the same key for the same context.
func Client(rw io.ReadWriter, k *Key, context string) error {
	hello := make([]byte, HelloLen)
	copy(hello, magic)
	if _, err := rand.Read(hello[len(magic):]); err != nil {
		return &Error{Side: "client", Reason: Malformed, Err: err}
	}
	cn := hello[len(magic):]
	if _, err := rw.Write(hello); err != nil {
		return &Error{Side: "client", Reason: NoSecret, Err: err}
	}
	ch := make([]byte, ChallengeLen)
	if n, err := io.ReadFull(rw, ch); err != nil {
		if n >= len(Refusal) && bytes.Equal(ch[:len(Refusal)], Refusal) {
			return &Error{Side: "client", Reason: Refused}
		}
		return &Error{Side: "client", Reason: NoSecret, Err: err}
	}
	if string(ch[:len(magic)]) != magic {
		return &Error{Side: "client", Reason: NoSecret, Err: fmt.Errorf("the server answered %q", ch[:len(magic)])}
	}
	sn, sp := ch[len(magic):len(magic)+NonceLen], ch[len(magic)+NonceLen:]
	// The proof goes out even when the server's is wrong, so the server can
	// log a wrong secret rather than a dropped connection.
	if _, err := rw.Write(k.proof("client", context, cn, sn)); err != nil {
		return &Error{Side: "client", Reason: Refused, Err: err}
	}
	if !hmac.Equal(sp, k.proof("server", context, cn, sn)) {
		return &Error{Side: "client", Reason: WrongSecret, Err: errors.New("the server proves a different secret")}
	}
	var v [1]byte
	if _, err := io.ReadFull(rw, v[:]); err != nil {
		return &Error{Side: "client", Reason: Refused, Err: err}
	}
	if v[0] != 0 {
		return &Error{Side: "client", Reason: Refused, Err: errors.New("the server refused this client's proof")}
	}
	return nil
}

// Server runs the server side on rw, whose deadline the caller sets (it
// reads at most HelloLen+ProofLen bytes). On failure it has told the
// client, and the caller closes the connection.
func Server(rw io.ReadWriter, k *Key, context string) error {
	hello := make([]byte, HelloLen)
	if _, err := io.ReadFull(rw, hello[:len(magic)]); err != nil {
		return &Error{Side: "server", Reason: Malformed, Err: err}
	}
	if string(hello[:len(magic)]) != magic {
		_, _ = rw.Write(Refusal)
		return &Error{Side: "server", Reason: NoAuth, Err: fmt.Errorf("the client sent %q", hello[:len(magic)])}
	}
	if _, err := io.ReadFull(rw, hello[len(magic):]); err != nil {
		return &Error{Side: "server", Reason: Malformed, Err: err}
	}
	cn := hello[len(magic):]
	ch := make([]byte, ChallengeLen)
	copy(ch, magic)
	sn := ch[len(magic) : len(magic)+NonceLen]
	if _, err := rand.Read(sn); err != nil {
		return &Error{Side: "server", Reason: Malformed, Err: err}
	}
	copy(ch[len(magic)+NonceLen:], k.proof("server", context, cn, sn))
	if _, err := rw.Write(ch); err != nil {
		return &Error{Side: "server", Reason: Malformed, Err: err}
	}
	p := make([]byte, ProofLen)
	if _, err := io.ReadFull(rw, p); err != nil {
		return &Error{Side: "server", Reason: Malformed, Err: err}
	}
	if !hmac.Equal(p, k.proof("client", context, cn, sn)) {
		_, _ = rw.Write([]byte{1})
		return &Error{Side: "server", Reason: WrongSecret}
	}
	if _, err := rw.Write([]byte{0}); err != nil {
		return &Error{Side: "server", Reason: Malformed, Err: err}
	}
	return nil
}
