package tcp

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/godist/godist/libgodist/wire"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// fakeIfaces is a host with loopback, two Ethernet ports, a container
// bridge, an InfiniBand port that is down, a port with only a link-local
// address and a veth.
func fakeIfaces() []Iface {
	return []Iface{
		{Name: "lo", Up: true, Loopback: true, Addrs: addrs("127.0.0.1", "::1")},
		{Name: "eth0", Up: true, Addrs: addrs("fe80::1", "fd00::2", "10.0.0.2")},
		{Name: "eth1", Up: true, Addrs: addrs("192.168.1.5")},
		{Name: "docker0", Up: true, Addrs: addrs("172.17.0.1")},
		{Name: "ib0", Addrs: addrs("10.1.0.2")},
		{Name: "eth2", Up: true, Addrs: addrs("fe80::5")},
		{Name: "veth9", Up: true, Addrs: addrs("10.9.0.1")},
	}
}

func locals(ls []Local) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Iface + "=" + l.Addr.String()
	}
	return out
}

func TestParseIfname(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want IfnameSpec
	}{
		{"eth0", IfnameSpec{Names: []string{"eth0"}}},
		{"eth0,eth1", IfnameSpec{Names: []string{"eth0", "eth1"}}},
		{" eth , ib ,", IfnameSpec{Names: []string{"eth", "ib"}}},
		{"^docker0,lo", IfnameSpec{Exclude: true, Names: []string{"docker0", "lo"}}},
		{"=eth0", IfnameSpec{Exact: true, Names: []string{"eth0"}}},
		{"^=docker0,virbr0", IfnameSpec{Exclude: true, Exact: true, Names: []string{"docker0", "virbr0"}}},
	} {
		got, err := ParseIfname(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	for in, msg := range map[string]string{
		"":          `godist: GODIST_SOCKET_IFNAME="": names no interface`,
		"^":         `godist: GODIST_SOCKET_IFNAME="^": names no interface`,
		"^=,":       `godist: GODIST_SOCKET_IFNAME="^=,": names no interface`,
		"eth0,^lo":  `godist: GODIST_SOCKET_IFNAME="eth0,^lo": "^lo" is not an interface name ("^" and "=" go once, at the start: ^=eth0,eth1)`,
		"=^eth0":    `"^eth0" is not an interface name`,
		"eth0 eth1": `"eth0 eth1" is not an interface name`,
	} {
		_, err := ParseIfname(in)
		var se *SettingError
		require.ErrorAs(t, err, &se, in)
		assert.Equal(t, "GODIST_SOCKET_IFNAME", se.Var)
		assert.Contains(t, err.Error(), msg, in)
	}
}

func TestIfnameMatch(t *testing.T) {
	spec := func(s string) IfnameSpec { sp, err := ParseIfname(s); require.NoError(t, err); return sp }
	for _, tc := range []struct {
		spec string
		yes  []string
		no   []string
	}{
		{"eth", []string{"eth0", "eth10", "eth"}, []string{"veth0", "et", "ib0"}},
		{"eth0,ib", []string{"eth0", "eth0.100", "ib0", "ibp1s0"}, []string{"eth1", "veth0"}},
		{"=eth0", []string{"eth0"}, []string{"eth0.100", "eth", "eth1"}},
		{"=eth0,ib0", []string{"eth0", "ib0"}, []string{"ib1"}},
		{"^docker,lo", []string{"eth0", "ib0", "virbr0"}, []string{"docker0", "lo", "loop1"}},
		{"^=docker0", []string{"docker1", "eth0", "lo"}, []string{"docker0"}},
	} {
		sp := spec(tc.spec)
		for _, n := range tc.yes {
			assert.True(t, sp.Match(n), "%s should select %s", tc.spec, n)
		}
		for _, n := range tc.no {
			assert.False(t, sp.Match(n), "%s should not select %s", tc.spec, n)
		}
	}
}

func TestSelectIfname(t *testing.T) {
	ifs := fakeIfaces()
	sel := func(s string) ([]string, error) {
		sp, err := ParseIfname(s)
		require.NoError(t, err)
		ls, err := selectIfname(s, sp, ifs)
		return locals(ls), err
	}
	for in, want := range map[string][]string{
		"eth0":         {"eth0=10.0.0.2", "eth0=fd00::2"},
		"eth":          {"eth0=10.0.0.2", "eth0=fd00::2", "eth1=192.168.1.5"},
		"eth1,eth0":    {"eth1=192.168.1.5", "eth0=10.0.0.2", "eth0=fd00::2"},
		"eth1,eth":     {"eth1=192.168.1.5", "eth0=10.0.0.2", "eth0=fd00::2"},
		"=eth1,eth1":   {"eth1=192.168.1.5"},
		"lo":           {"lo=127.0.0.1", "lo=::1"},
		"^docker,lo":   {"eth0=10.0.0.2", "eth0=fd00::2", "eth1=192.168.1.5", "veth9=10.9.0.1"},
		"^=eth0":       {"eth1=192.168.1.5", "docker0=172.17.0.1", "veth9=10.9.0.1"},
		"^eth,docker":  {"veth9=10.9.0.1"},
		"=veth9,eth1":  {"veth9=10.9.0.1", "eth1=192.168.1.5"},
		"^=eth2,eth1 ": {"eth0=10.0.0.2", "eth0=fd00::2", "docker0=172.17.0.1", "veth9=10.9.0.1"},
	} {
		got, err := sel(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	host := "; this host has lo (127.0.0.1, ::1), eth0 (fe80::1, fd00::2, 10.0.0.2), eth1 (192.168.1.5), " +
		"docker0 (172.17.0.1), ib0 (down, 10.1.0.2), eth2 (fe80::5), veth9 (10.9.0.1)"
	for in, msg := range map[string]string{
		"eth9":             `GODIST_SOCKET_IFNAME="eth9": no interface name starts with "eth9"`,
		"=eth":             `GODIST_SOCKET_IFNAME="=eth": no interface is named "eth"`,
		"eth0,wlan":        `GODIST_SOCKET_IFNAME="eth0,wlan": no interface name starts with "wlan"`,
		"ib":               `GODIST_SOCKET_IFNAME="ib": ib0 is down`,
		"=eth2":            `GODIST_SOCKET_IFNAME="=eth2": eth2 has no IPv4 or IPv6 address (link-local addresses are not used)`,
		"^eth,docker,veth": `GODIST_SOCKET_IFNAME="^eth,docker,veth": leaves no interface that is up and has an IPv4 or IPv6 address (loopback is never chosen by exclusion)`,
	} {
		_, err := sel(in)
		var se *SettingError
		require.ErrorAs(t, err, &se, in)
		assert.Equal(t, "godist: "+msg+host, err.Error(), in)
	}
}

func TestSelectIfnameCapsAddresses(t *testing.T) {
	var many []netip.Addr
	for i := range 40 {
		many = append(many, netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i)}))
	}
	ifs := []Iface{{Name: "bond0", Up: true, Addrs: many}}
	sp, _ := ParseIfname("bond")
	ls, err := selectIfname("bond", sp, ifs)
	require.NoError(t, err)
	assert.Len(t, ls, maxPublish)
	assert.Len(t, allAddrs(ifs), maxPublish)
	assert.Equal(t, "127.0.0.1", allAddrs(ifs)[0].Addr.String())
}

// fakeSystem answers Choose's questions from tables.
type fakeSystem struct {
	ifs      []Iface
	ifsErr   error
	names    map[string][]netip.Addr
	routes   map[netip.Addr]netip.Addr
	bindable map[netip.Addr]bool
}

func (f fakeSystem) Interfaces() ([]Iface, error) { return f.ifs, f.ifsErr }

func (f fakeSystem) Resolve(host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	if as, ok := f.names[host]; ok {
		return as, nil
	}
	return nil, fmt.Errorf("lookup %s: no such host", host)
}

func (f fakeSystem) RouteSource(dst netip.Addr) (netip.Addr, error) {
	if src, ok := f.routes[dst]; ok {
		return src, nil
	}
	return netip.Addr{}, errors.New("connect: network is unreachable")
}

func (f fakeSystem) CanBind(a netip.Addr) error {
	if f.bindable[a] {
		return nil
	}
	return errors.New("bind: cannot assign requested address")
}

func TestChoose(t *testing.T) {
	a := netip.MustParseAddr
	sys := fakeSystem{
		ifs: fakeIfaces(),
		names: map[string][]netip.Addr{
			"localhost": addrs("127.0.0.1", "::1"), "LocalHost.": addrs("127.0.0.1"), "gdself": addrs("127.0.1.1"), "master": addrs("10.0.0.1"), "gdhost1": addrs("10.0.0.2"),
			"elsewhere": addrs("203.0.113.9"),
		},
		routes: map[netip.Addr]netip.Addr{
			a("10.0.0.1"): a("10.0.0.2"), a("10.0.0.2"): a("10.0.0.2"), a("192.168.1.1"): a("192.168.1.5"),
			a("fd00::1"): a("fd00::2"), a("198.51.100.1"): a("198.51.100.7"),
		},
		bindable: map[netip.Addr]bool{a("203.0.113.9"): true},
	}
	all := []string{"lo=127.0.0.1", "eth0=fd00::2", "eth0=10.0.0.2", "eth1=192.168.1.5", "docker0=172.17.0.1",
		"ib0=10.1.0.2", "veth9=10.9.0.1"}
	for _, tc := range []struct {
		cfg     NetConfig
		how     string
		publish []string
		listen  bool // listens on the published addresses, else on all
		why     string
	}{
		{NetConfig{}, ChoiceAll, all, false, "no store host to route to (a FileStore or HashStore has none): all interfaces"},
		{NetConfig{PeerHost: "127.0.0.1"}, ChoiceLoopback, []string{"lo=127.0.0.1"}, true, "the store's host 127.0.0.1 is this host's loopback (127.0.0.1), so every rank of the group runs here"},
		{NetConfig{PeerHost: "localhost"}, ChoiceLoopback, []string{"lo=127.0.0.1"}, true, "the store's host localhost is this host's loopback (127.0.0.1), so every rank of the group runs here"},
		{NetConfig{PeerHost: "LocalHost."}, ChoiceLoopback, []string{"lo=127.0.0.1"}, true, "the store's host LocalHost. is this host's loopback (127.0.0.1), so every rank of the group runs here"},
		{NetConfig{PeerHost: "gdself"}, ChoiceAll, all, false, "the store's host gdself resolves to this host's loopback (127.0.1.1) here, but ranks on other hosts may reach it at another address: all interfaces"},
		{NetConfig{PeerHost: "127.0.1.1"}, ChoiceLoopback, []string{"lo=127.0.0.1"}, true, "the store's host 127.0.1.1 is this host's loopback (127.0.1.1), so every rank of the group runs here"},
		{NetConfig{PeerHost: "::1"}, ChoiceLoopback, []string{"lo=::1"}, true, "the store's host ::1 is this host's loopback (::1), so every rank of the group runs here"},
		{NetConfig{PeerHost: "0.0.0.0"}, ChoiceLoopback, []string{"lo=127.0.0.1"}, true, "the store's host 0.0.0.0 is this host's loopback (0.0.0.0), so every rank of the group runs here"},
		{NetConfig{PeerHost: "master"}, ChoiceRoute, []string{"eth0=10.0.0.2"}, true, "the route to the store's host master leaves through eth0"},
		{NetConfig{PeerHost: "10.0.0.2"}, ChoiceRoute, []string{"eth0=10.0.0.2"}, true, "the route to the store's host 10.0.0.2 leaves through eth0"},
		{NetConfig{PeerHost: "192.168.1.1"}, ChoiceRoute, []string{"eth1=192.168.1.5"}, true, "the route to the store's host 192.168.1.1 leaves through eth1"},
		{NetConfig{PeerHost: "fd00::1"}, ChoiceRoute, []string{"eth0=fd00::2"}, true, "the route to the store's host fd00::1 leaves through eth0"},
		{NetConfig{PeerHost: "198.51.100.1"}, ChoiceRoute, []string{"=198.51.100.7"}, true, "the route to the store's host 198.51.100.1 leaves through address 198.51.100.7"},
		{NetConfig{PeerHost: "nosuch"}, ChoiceAll, all, false, "the store's host nosuch does not resolve here (lookup nosuch: no such host): all interfaces"},
		{NetConfig{PeerHost: "elsewhere"}, ChoiceAll, all, false, "no route to the store's host elsewhere (connect: network is unreachable): all interfaces"},
		{NetConfig{PeerHost: "master", Ifname: "eth1"}, ChoiceIfname, []string{"eth1=192.168.1.5"}, true, "GODIST_SOCKET_IFNAME=eth1 selects eth1"},
		{NetConfig{PeerHost: "master", Ifname: "eth1", BindAddr: "192.168.1.5"}, ChoiceBind, []string{"eth1=192.168.1.5"}, true, "GODIST_BIND_ADDR=192.168.1.5"},
		{NetConfig{BindAddr: "127.0.0.5"}, ChoiceBind, []string{"lo=127.0.0.5"}, true, "GODIST_BIND_ADDR=127.0.0.5"},
		{NetConfig{BindAddr: "gdhost1"}, ChoiceBind, []string{"eth0=10.0.0.2"}, true, "GODIST_BIND_ADDR=gdhost1"},
		{NetConfig{BindAddr: "[fd00::2]"}, ChoiceBind, []string{"eth0=fd00::2"}, true, "GODIST_BIND_ADDR=[fd00::2]"},
		{NetConfig{BindAddr: "203.0.113.9"}, ChoiceBind, []string{"=203.0.113.9"}, true, "GODIST_BIND_ADDR=203.0.113.9"},
		{NetConfig{BindAddr: "0.0.0.0", PeerHost: "master"}, ChoiceAll, all, false, "GODIST_BIND_ADDR=0.0.0.0: all interfaces"},
	} {
		c, err := choose(tc.cfg, sys)
		require.NoError(t, err, "%+v", tc.cfg)
		assert.Equal(t, tc.how, c.How, "%+v", tc.cfg)
		assert.Equal(t, tc.publish, locals(c.Publish), "%+v", tc.cfg)
		assert.Equal(t, tc.why, c.Why, "%+v", tc.cfg)
		if tc.listen {
			assert.Equal(t, c.Publish, c.Listen, "%+v", tc.cfg)
		} else {
			assert.Empty(t, c.Listen, "%+v", tc.cfg)
			assert.Equal(t, "all interfaces", c.Describe())
		}
	}
}

func TestChooseErrors(t *testing.T) {
	sys := fakeSystem{ifs: fakeIfaces()}
	host := "; this host has lo (127.0.0.1, ::1), eth0"
	for _, tc := range []struct {
		cfg NetConfig
		msg string
	}{
		{NetConfig{BindAddr: "203.0.113.7"}, `godist: GODIST_BIND_ADDR="203.0.113.7": no interface of this host has this address` + host},
		{NetConfig{BindAddr: "nosuch.example", Ifname: "eth0"}, `godist: GODIST_BIND_ADDR="nosuch.example": not an IP address, nor a host name that resolves here (lookup nosuch.example: no such host)`},
		{NetConfig{Ifname: "eth7", PeerHost: "10.0.0.1"}, `godist: GODIST_SOCKET_IFNAME="eth7": no interface name starts with "eth7"` + host},
		{NetConfig{Ifname: ","}, `godist: GODIST_SOCKET_IFNAME=",": names no interface`},
		{NetConfig{Ifname: "^docker,veth,eth"}, `godist: GODIST_SOCKET_IFNAME="^docker,veth,eth": leaves no interface`},
	} {
		_, err := choose(tc.cfg, sys)
		var se *SettingError
		require.ErrorAs(t, err, &se, "%+v", tc.cfg)
		assert.Contains(t, err.Error(), tc.msg)
	}
	_, err := choose(NetConfig{Ifname: "eth0"}, fakeSystem{ifsErr: errors.New("netlink: permission denied")})
	assert.EqualError(t, err, `godist: GODIST_SOCKET_IFNAME="eth0": cannot list this host's interfaces: netlink: permission denied`)
	c, err := choose(NetConfig{PeerHost: "127.0.0.1"}, fakeSystem{ifsErr: errors.New("netlink: permission denied")})
	require.NoError(t, err)
	assert.Equal(t, []string{"=127.0.0.1"}, locals(c.Publish))
	assert.Equal(t, c.Publish, c.Listen)
}

// TestChooseOnThisHost runs the real system: loopback is always there.
func TestChooseOnThisHost(t *testing.T) {
	c, err := Choose(NetConfig{PeerHost: "127.0.0.1"})
	require.NoError(t, err)
	assert.Equal(t, ChoiceLoopback, c.How)
	assert.Equal(t, []Local{{Addr: netip.MustParseAddr("127.0.0.1"), Iface: c.Listen[0].Iface}}, c.Listen)
	assert.Equal(t, c.Listen, c.Publish)
	assert.Equal(t, "127.0.0.1 ("+c.Listen[0].Iface+")", c.Describe())
	c, err = Choose(NetConfig{BindAddr: "127.0.0.1"})
	require.NoError(t, err)
	assert.Equal(t, []Local{{Addr: netip.MustParseAddr("127.0.0.1"), Iface: c.Publish[0].Iface}}, c.Listen)
	assert.NotEmpty(t, c.Publish[0].Iface)
	_, err = Choose(NetConfig{BindAddr: "203.0.113.7"})
	assert.ErrorContains(t, err, `GODIST_BIND_ADDR="203.0.113.7": no interface of this host has this address`)
}

// TestNewFabricKeepsItsChoice: a process makes its choice once per
// setting; a cached one that no longer binds is made anew.
func TestNewFabricKeepsItsChoice(t *testing.T) {
	cfg := NetConfig{PeerHost: "127.0.0.1", Ifname: "", BindAddr: ""}
	choices.Delete(cfg)
	f1, err := NewFabric(cfg)
	require.NoError(t, err)
	assert.Nil(t, f1.cfg) // made here
	f2, err := NewFabric(cfg)
	require.NoError(t, err)
	require.NotNil(t, f2.cfg) // from the cache
	assert.Equal(t, f1.Choice(), f2.Choice())

	// An address that left the host: Describe chooses again and listens.
	gone := Local{Addr: netip.MustParseAddr("203.0.113.7"), Iface: "gone0"}
	choices.Store(cfg, Choice{How: ChoiceRoute, Why: "stale", Listen: []Local{gone}, Publish: []Local{gone}})
	f3, err := NewFabric(cfg)
	require.NoError(t, err)
	rec := wire.PeerRecord{Rank: 0, WorldSize: 2, Group: "g"}
	require.NoError(t, f3.Describe(&rec))
	defer f3.Close()
	assert.Equal(t, []string{"127.0.0.1"}, rec.Addresses)
	c, _ := choices.Load(cfg)
	assert.Equal(t, ChoiceLoopback, c.(Choice).How)
}
