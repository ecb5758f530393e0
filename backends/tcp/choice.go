package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"time"
)

// The settings that choose a rank's addresses, as users name them.
const (
	envBind   = "GODIST_BIND_ADDR"
	envIfname = "GODIST_SOCKET_IFNAME"
)

// NetConfig is what decides where a rank listens and which addresses it
// publishes: GODIST_BIND_ADDR, else GODIST_SOCKET_IFNAME, else the host of
// the group's store.
type NetConfig struct {
	BindAddr string // GODIST_BIND_ADDR: one address (or host name) of this host
	Ifname   string // GODIST_SOCKET_IFNAME: interfaces, NCCL_SOCKET_IFNAME's syntax
	PeerHost string // the store's host (MASTER_ADDR); "" when there is none (FileStore, HashStore)
}

// How a Choice was made.
const (
	ChoiceAll      = "all"      // all interfaces: nothing to go by
	ChoiceLoopback = "loopback" // loopback only: the store's host is loopback, so every rank is on this host
	ChoiceRoute    = "route"    // the interface the route to the store's host leaves through
	ChoiceIfname   = "ifname"   // GODIST_SOCKET_IFNAME
	ChoiceBind     = "bind"     // GODIST_BIND_ADDR
)

// Choice is where a rank listens and what it publishes.
type Choice struct {
	How     string
	Why     string  // one sentence for logs and `godist info`
	Listen  []Local // the addresses listened on, all on one port; empty: all interfaces
	Publish []Local // the addresses of the rank's record, in the order peers try them
}

// hosts lists the addresses of c.Listen as strings for Listen.
func (c Choice) hosts() []string {
	out := make([]string, len(c.Listen))
	for i, l := range c.Listen {
		out[i] = l.Addr.String()
	}
	return out
}

// Describe says where the rank listens: "10.0.0.2 (eth0)", or "all
// interfaces".
func (c Choice) Describe() string {
	if len(c.Listen) == 0 {
		return "all interfaces"
	}
	return describeLocals(c.Listen)
}

func describeLocals(ls []Local) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.Addr.String()
		if l.Iface != "" {
			parts[i] += " (" + l.Iface + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// system is what Choose asks of the host; tests give it a fake.
type system interface {
	Interfaces() ([]Iface, error)
	// Resolve returns the addresses of host (an IP address or a name),
	// IPv4 first.
	Resolve(host string) ([]netip.Addr, error)
	// RouteSource returns the local address a packet to dst leaves from.
	RouteSource(dst netip.Addr) (netip.Addr, error)
	// CanBind reports whether a socket can listen on a.
	CanBind(a netip.Addr) error
}

// Choose decides where a rank listens and what it publishes, asking this
// host about its interfaces and routes.
func Choose(cfg NetConfig) (Choice, error) { return choose(cfg, hostSystem{}) }

// choose is Choose over sys:
//   - GODIST_BIND_ADDR: that address, which must be one of this host's;
//     "0.0.0.0" or "::": all interfaces;
//   - GODIST_SOCKET_IFNAME: the addresses of the interfaces it selects
//     (selectIfname);
//   - the store's host is a loopback address (or the unspecified one, which
//     reaches the host it is used on too) or localhost: loopback only
//     (loopback). These mean the same host wherever they are used, so every
//     rank of the group reached the store on this host and runs here: a rank
//     elsewhere could not have reached the store, nor will it be able to
//     reach these ports, which is the point;
//   - another store host: the local address the route to it leaves from,
//     and its interface; when it cannot be resolved or routed to, all
//     interfaces. So is a host name that resolves to loopback here but is
//     not localhost (Debian maps the machine's own name to 127.0.1.1):
//     ranks on other hosts may resolve it to this host's network address;
//   - no store host: all interfaces. A FileStore's file may be on a
//     filesystem several hosts share, so where the other ranks are is
//     known only after the rendezvous, once this rank has published its
//     addresses.
//
// All interfaces means listening on every address and publishing loopback
// then every usable address (allAddrs). Otherwise the rank listens on the
// chosen addresses only and publishes them; ranks on the same host then
// connect to them rather than to loopback.
func choose(cfg NetConfig, sys system) (Choice, error) {
	ifs, ifErr := sys.Interfaces()
	all := func(why string) (Choice, error) {
		return Choice{How: ChoiceAll, Why: why, Publish: allAddrs(ifs)}, nil
	}
	if b := strings.TrimSpace(cfg.BindAddr); b != "" {
		return chooseBind(b, ifs, sys)
	}
	if strings.TrimSpace(cfg.Ifname) != "" {
		sp, err := ParseIfname(cfg.Ifname)
		if err != nil {
			return Choice{}, err
		}
		if ifErr != nil {
			return Choice{}, &SettingError{Var: envIfname, Value: cfg.Ifname, Problem: "cannot list this host's interfaces: " + ifErr.Error()}
		}
		ls, err := selectIfname(cfg.Ifname, sp, ifs)
		if err != nil {
			return Choice{}, err
		}
		return Choice{How: ChoiceIfname, Why: fmt.Sprintf("%s=%s selects %s", envIfname, cfg.Ifname, ifaceNamesOf(ls)),
			Listen: ls, Publish: ls}, nil
	}
	host := strings.TrimSpace(cfg.PeerHost)
	if host == "" {
		return all("no store host to route to (a FileStore or HashStore has none): all interfaces")
	}
	dsts, err := sys.Resolve(host)
	if err != nil || len(dsts) == 0 {
		return all(fmt.Sprintf("the store's host %s does not resolve here (%v): all interfaces", host, err))
	}
	dst := dsts[0]
	if dst.IsLoopback() || dst.IsUnspecified() {
		if !loopbackEverywhere(host) {
			return all(fmt.Sprintf("the store's host %s resolves to this host's loopback (%s) here, but ranks on other hosts may reach it at another address: all interfaces", host, dst))
		}
		return loopback(ifs, fmt.Sprintf("the store's host %s is this host's loopback (%s), so every rank of the group runs here", host, dst), dst.Is6()), nil
	}
	src, err := sys.RouteSource(dst)
	if err != nil {
		return all(fmt.Sprintf("no route to the store's host %s (%v): all interfaces", host, err))
	}
	src = src.Unmap()
	if src.IsLoopback() || !usable(src) {
		return all(fmt.Sprintf("the route to the store's host %s leaves from %s: all interfaces", host, src))
	}
	l := Local{Addr: src, Iface: ownerOf(ifs, src)}
	via := l.Iface
	if via == "" {
		via = "address " + src.String()
	}
	return Choice{How: ChoiceRoute, Why: fmt.Sprintf("the route to the store's host %s leaves through %s", host, via),
		Listen: []Local{l}, Publish: []Local{l}}, nil
}

// loopbackEverywhere reports whether host, a store's host that resolves to
// loopback here, does so on every host: an IP address, or localhost (RFC
// 6761: localhost and names under it are always loopback).
func loopbackEverywhere(host string) bool {
	if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		return true
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// loopback is the Choice of a group whose ranks all run on this host:
// listen on and publish 127.0.0.1 (::1 when the store's host is an IPv6
// address), which no other host can reach.
func loopback(ifs []Iface, why string, v6 bool) Choice {
	a := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if v6 {
		a = netip.IPv6Loopback()
	}
	l := []Local{{Addr: a, Iface: ownerOf(ifs, a)}}
	return Choice{How: ChoiceLoopback, Why: why, Listen: l, Publish: l}
}

// chooseBind checks GODIST_BIND_ADDR=b: an address of this host (or a
// name resolving to one), or 0.0.0.0 / :: for all interfaces.
func chooseBind(b string, ifs []Iface, sys system) (Choice, error) {
	if b == "0.0.0.0" || b == "::" || b == "[::]" {
		return Choice{How: ChoiceAll, Why: fmt.Sprintf("%s=%s: all interfaces", envBind, b), Publish: allAddrs(ifs)}, nil
	}
	addrs, err := sys.Resolve(strings.TrimSuffix(strings.TrimPrefix(b, "["), "]"))
	if err != nil || len(addrs) == 0 {
		return Choice{}, &SettingError{Var: envBind, Value: b, Problem: fmt.Sprintf("not an IP address, nor a host name that resolves here (%v)", err)}
	}
	for _, a := range addrs {
		if name := ownerOf(ifs, a); name != "" {
			l := []Local{{Addr: a, Iface: name}}
			return Choice{How: ChoiceBind, Why: fmt.Sprintf("%s=%s", envBind, b), Listen: l, Publish: l}, nil
		}
	}
	// No interface lists it; the system may still let a socket listen there
	// (net.ipv4.ip_nonlocal_bind, a local route to a whole prefix).
	if err := sys.CanBind(addrs[0]); err == nil {
		l := []Local{{Addr: addrs[0]}}
		return Choice{How: ChoiceBind, Why: fmt.Sprintf("%s=%s", envBind, b), Listen: l, Publish: l}, nil
	}
	what := "no interface of this host has this address"
	if len(addrs) > 1 || addrs[0].String() != b {
		what = fmt.Sprintf("it resolves to %v, and no interface of this host has any of these addresses", addrs)
	}
	return Choice{}, &SettingError{Var: envBind, Value: b, Problem: what + "; this host has " + describeIfaces(ifs)}
}

// ifaceNamesOf lists the interfaces of ls once each, in order.
func ifaceNamesOf(ls []Local) string {
	var names []string
	seen := map[string]bool{}
	for _, l := range ls {
		if !seen[l.Iface] {
			seen[l.Iface] = true
			names = append(names, l.Iface)
		}
	}
	return strings.Join(names, ", ")
}

// resolveTimeout bounds a host name lookup.
const resolveTimeout = 10 * time.Second

// hostSystem is the real host.
type hostSystem struct{}

func (hostSystem) Interfaces() ([]Iface, error) {
	nifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]Iface, 0, len(nifs))
	for _, ni := range nifs {
		f := Iface{Name: ni.Name, Up: ni.Flags&net.FlagUp != 0, Loopback: ni.Flags&net.FlagLoopback != 0}
		as, err := ni.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ni.Name, err)
		}
		for _, a := range as {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					f.Addrs = append(f.Addrs, ip.Unmap())
				}
			}
		}
		out = append(out, f)
	}
	return out, nil
}

func (hostSystem) Resolve(host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	for i := range as {
		as[i] = as[i].Unmap()
	}
	sort.SliceStable(as, func(i, j int) bool { return as[i].Is4() && !as[j].Is4() })
	return as, nil
}

// RouteSource "connects" a UDP socket to dst, which sends nothing but has
// the kernel pick the route and the source address.
func (hostSystem) RouteSource(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	la, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok {
		return netip.Addr{}, errors.New("no local address")
	}
	return la.AddrPort().Addr().Unmap(), nil
}

func (hostSystem) CanBind(a netip.Addr) error {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		return err
	}
	return ln.Close()
}
