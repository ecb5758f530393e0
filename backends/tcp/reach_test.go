package tcp

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/transport"
	"github.com/godist/godist/libgodist/wire"
)

func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestDialErrorText(t *testing.T) {
	e := &DialError{Rank: 2, Peer: 0, Host: "gdhost1", Port: 41234, After: 10*time.Second + 3*time.Millisecond,
		Err: transport.ErrTimeout, Tries: []Try{{Addr: "198.18.0.3", Iface: "eth0", Err: refused()}}}
	assert.Equal(t, "rank 2 could not reach rank 0 at 198.18.0.3:41234 (interface eth0 on host gdhost1): connection refused "+
		"(tried for 10.003s; check the routes and firewalls between the two hosts, or have rank 0 publish another "+
		"interface's address with GODIST_SOCKET_IFNAME on its host)", e.Error())
	assert.True(t, e.Timeout())
	assert.ErrorIs(t, e, transport.ErrTimeout)
	assert.Equal(t, 0, e.PeerRank())

	e.Tries = []Try{{Addr: "127.0.0.1", Iface: "lo", Err: refused()}, {Addr: "fd00::3", Err: &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}}}
	assert.Contains(t, e.Error(), "rank 2 could not reach rank 0 at 127.0.0.1:41234 (interface lo on host gdhost1): "+
		"connection refused; nor at [fd00::3]:41234 (on host gdhost1): timed out (tried for")

	e.Tries, e.Err = []Try{{Addr: "198.18.0.3", Iface: "eth0", Err: errors.Join(errHandshake, errors.New("by the peer"))}}, errHandshake
	assert.Equal(t, "rank 2 could not reach rank 0 at 198.18.0.3:41234 (interface eth0 on host gdhost1): tcp: handshake rejected\nby the peer", e.Error())
	assert.False(t, e.Timeout())

	e.Tries, e.Err = nil, errNoAddress
	assert.Equal(t, "rank 2 could not reach rank 0 on host gdhost1: its record names no address a rank on another host "+
		"can use (only loopback?); set GODIST_SOCKET_IFNAME or GODIST_BIND_ADDR on that host", e.Error())
}

func TestAcceptErrorText(t *testing.T) {
	e := &AcceptError{Rank: 0, Missing: []int{1, 3}, Host: "gdhost0", Port: 41234, Addrs: []string{"198.18.0.2", "fd00::2"},
		Ifaces: []string{"eth0"}, After: 10 * time.Second}
	assert.Equal(t, "rank 0 waited 10s for rank(s) [1 3] to connect to it at 198.18.0.2:41234 (interface eth0 on host "+
		"gdhost0), [fd00::2]:41234 (on host gdhost0); they did not: they cannot reach that address (their own error "+
		"says so), or they failed or stopped before connecting", e.Error())
	assert.True(t, e.Timeout())
	assert.ErrorIs(t, e, transport.ErrTimeout)
	assert.Equal(t, []int{1, 3}, e.MissingRanks())
}

// connectPair runs Connect for ranks 0 and 1 of a group with the given
// endpoints and returns both results once both have returned.
func connectPair(t *testing.T, lns [2]*Listener, eps []Endpoint, within time.Duration) ([2]*Transport, [2]error) {
	t.Helper()
	var trs [2]*Transport
	var errs [2]error
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var wg sync.WaitGroup
	for r := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			trs[r], errs[r] = lns[r].Connect(ctx, eps)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range trs {
			if tr != nil {
				wg.Add(1)
				go func() { defer wg.Done(); tr.Close() }()
			}
		}
		wg.Wait()
	})
	return trs, errs
}

// TestUnreachableRankFailsBothRanks: rank 0 publishes an address it does
// not listen on; rank 1 cannot reach it and says where it tried, rank 0
// says rank 1 never came, both within the timeout.
func TestUnreachableRankFailsBothRanks(t *testing.T) {
	var lns [2]*Listener
	for r := range lns {
		ln, err := Listen(Config{Rank: r, Size: 2, Session: 5, Group: "g", Hosts: []string{"127.0.0.1"}})
		require.NoError(t, err)
		lns[r] = ln
	}
	eps := []Endpoint{
		{Addrs: []string{"127.0.0.2"}, Ifaces: []string{"dummy0"}, Host: "gdhostA", Port: lns[0].Port()},
		{Addrs: []string{"127.0.0.1"}, Ifaces: []string{"lo"}, Host: "gdhostB", Port: lns[1].Port()},
	}
	start := time.Now()
	_, errs := connectPair(t, lns, eps, time.Second)
	assert.Less(t, time.Since(start), 3*time.Second)

	var de *DialError
	require.ErrorAs(t, errs[1], &de)
	assert.Contains(t, de.Error(), "rank 1 could not reach rank 0 at 127.0.0.2:"+strconv.Itoa(lns[0].Port())+
		" (interface dummy0 on host gdhostA): connection refused (tried for")
	assert.True(t, de.Timeout())

	var ae *AcceptError
	require.ErrorAs(t, errs[0], &ae)
	assert.Equal(t, []int{1}, ae.Missing)
	assert.Contains(t, ae.Error(), "rank 0 waited")
	assert.Contains(t, ae.Error(), "for rank(s) [1] to connect to it at 127.0.0.2:"+strconv.Itoa(lns[0].Port())+" (interface dummy0 on host gdhostA)")
}

// TestListenOnSeveralAddresses: one port on every address; a peer may
// reach the rank through any of them.
func TestListenOnSeveralAddresses(t *testing.T) {
	ln0, err := Listen(Config{Rank: 0, Size: 2, Session: 9, Group: "g", Hosts: []string{"127.0.0.1", "127.0.0.2", "::1"}})
	if err != nil && errors.Is(err, syscall.EADDRNOTAVAIL) {
		ln0, err = Listen(Config{Rank: 0, Size: 2, Session: 9, Group: "g", Hosts: []string{"127.0.0.1", "127.0.0.2"}})
	}
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ln0.lns), 2)
	for _, l := range ln0.lns {
		assert.Equal(t, ln0.Port(), l.Addr().(*net.TCPAddr).Port)
	}
	ln1, err := Listen(Config{Rank: 1, Size: 2, Session: 9, Group: "g", Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	eps := []Endpoint{{Addrs: []string{"127.0.0.3", "127.0.0.2"}, Port: ln0.Port()}, {Addrs: []string{"127.0.0.1"}, Port: ln1.Port()}}
	trs, errs := connectPair(t, [2]*Listener{ln0, ln1}, eps, 5*time.Second)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	buf := make([]byte, 2)
	r := trs[0].PostRecv(1, transport.P2PTag(1), buf)
	require.NoError(t, trs[1].Send(ctx, 0, transport.P2PTag(1), []byte("hi")))
	require.NoError(t, r.Wait(ctx))
	assert.Equal(t, "hi", string(buf))
	for _, l := range ln0.lns { // closed once connected
		_, err := l.Accept()
		assert.ErrorIs(t, err, net.ErrClosed)
	}
}

func TestDialAddrs(t *testing.T) {
	me := wire.PeerRecord{Hostname: "a", BootID: "b1"}
	all := wire.PeerRecord{Hostname: "a", BootID: "b1", Addresses: []string{"127.0.0.1", "10.0.0.2", "fd00::2"},
		Interfaces: []string{"lo", "eth0", "eth0"}}
	addrs, ifaces := dialAddrs(me, all)
	assert.Equal(t, []string{"127.0.0.1", "10.0.0.2", "fd00::2"}, addrs)
	assert.Equal(t, []string{"lo", "eth0", "eth0"}, ifaces)

	other := all
	other.Hostname = "c"
	addrs, ifaces = dialAddrs(me, other)
	assert.Equal(t, []string{"10.0.0.2", "fd00::2"}, addrs)
	assert.Equal(t, []string{"eth0", "eth0"}, ifaces)

	// Listening on one chosen address: ranks on its host dial that address.
	chosen := wire.PeerRecord{Hostname: "a", BootID: "b1", Addresses: []string{"10.0.0.2"}, Interfaces: []string{"eth0"}}
	addrs, ifaces = dialAddrs(me, chosen)
	assert.Equal(t, []string{"10.0.0.2"}, addrs)
	assert.Equal(t, []string{"eth0"}, ifaces)

	// An older writer: no interfaces; a loopback bind address is dialled as is.
	old := wire.PeerRecord{Hostname: "a", BootID: "b1", Addresses: []string{"127.0.0.5"}}
	addrs, ifaces = dialAddrs(me, old)
	assert.Equal(t, []string{"127.0.0.5"}, addrs)
	assert.Equal(t, []string{""}, ifaces)
	old.Hostname = "c"
	addrs, _ = dialAddrs(me, old)
	assert.Empty(t, addrs)
}
