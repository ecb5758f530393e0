package tcp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/godist/godist/auth"
	"github.com/godist/godist/libgodist/transport"
)

var (
	// errCorrupt is wrapped when a peer sends bytes that are not a frame.
	errCorrupt = errors.New("tcp: corrupt frame")
	// errHandshake is wrapped when a new connection's handshake is rejected.
	errHandshake = errors.New("tcp: handshake rejected")
	// errNoAddress is wrapped when a peer's record names no address to dial.
	errNoAddress = errors.New("tcp: no usable address published")
)

// SettingError reports a setting (an environment variable) whose value
// cannot be used.
type SettingError struct {
	Var, Value, Problem string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("godist: %s=%q: %s", e.Var, e.Value, e.Problem)
}

// Try is one address a rank tried to reach a peer at.
type Try struct {
	Addr  string // IP address
	Iface string // the peer's interface of that address, as its record says; "" if not said
	Err   error  // the last failure there
}

// DialError reports a lower rank this rank could not connect to: the
// addresses it tried, each with its interface on the peer's host, and why.
type DialError struct {
	Rank, Peer int
	Host       string // the peer's host name
	Port       int
	Tries      []Try
	After      time.Duration // how long this rank tried
	Err        error         // transport.ErrTimeout, or errHandshake when the peer refused
}

func (e *DialError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d could not reach rank %d", e.Rank, e.Peer)
	if len(e.Tries) == 0 {
		fmt.Fprintf(&b, " on host %s: its record names no address a rank on another host can use (only loopback?); "+
			"set %s or %s on that host", e.Host, envIfname, envBind)
		return b.String()
	}
	for i, t := range e.Tries {
		sep := " at "
		if i > 0 {
			sep = "; nor at "
		}
		fmt.Fprintf(&b, "%s%s (%s): %s", sep, net.JoinHostPort(t.Addr, strconv.Itoa(e.Port)), where(t.Iface, e.Host), reason(t.Err))
	}
	if errors.Is(e.Err, transport.ErrTimeout) {
		fmt.Fprintf(&b, " (tried for %v; check the routes and firewalls between the two hosts, or have rank %d "+
			"publish another interface's address with %s on its host)", e.After.Round(time.Millisecond), e.Peer, envIfname)
	}
	return b.String()
}

func (e *DialError) Unwrap() error { return e.Err }

// Timeout reports whether the rank ran out of time trying.
func (e *DialError) Timeout() bool { return errors.Is(e.Err, transport.ErrTimeout) }

// PeerRank is the rank that could not be reached.
func (e *DialError) PeerRank() int { return e.Peer }

// AcceptError reports higher ranks that did not connect to this rank
// before the rendezvous timed out.
type AcceptError struct {
	Rank    int
	Missing []int
	Host    string   // this host's name
	Port    int      // this rank's port
	Addrs   []string // the addresses this rank published
	Ifaces  []string // their interfaces
	After   time.Duration
}

func (e *AcceptError) Error() string {
	at := make([]string, len(e.Addrs))
	for i, a := range e.Addrs {
		iface := ""
		if i < len(e.Ifaces) {
			iface = e.Ifaces[i]
		}
		at[i] = net.JoinHostPort(a, strconv.Itoa(e.Port)) + " (" + where(iface, e.Host) + ")"
	}
	return fmt.Sprintf("rank %d waited %v for rank(s) %v to connect to it at %s; they did not: they cannot reach "+
		"that address (their own error says so), or they failed or stopped before connecting",
		e.Rank, e.After.Round(time.Millisecond), e.Missing, strings.Join(at, ", "))
}

func (e *AcceptError) Unwrap() error { return transport.ErrTimeout }

// Timeout reports true: the ranks did not come in time.
func (e *AcceptError) Timeout() bool { return true }

// MissingRanks are the ranks that never connected.
func (e *AcceptError) MissingRanks() []int { return e.Missing }

// where says where an address is: "interface eth0 on host h".
func where(iface, host string) string {
	switch {
	case iface != "" && host != "":
		return "interface " + iface + " on host " + host
	case iface != "":
		return "interface " + iface
	case host != "":
		return "on host " + host
	}
	return "unknown interface"
}

// reason says briefly why a connection attempt failed.
func reason(err error) string {
	if err == nil {
		return "no answer"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	if errors.Is(err, errHandshake) || errors.Is(err, auth.ErrAuth) {
		return err.Error()
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	return err.Error()
}
