package tcp

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Iface is a network interface as the choice of addresses sees it.
type Iface struct {
	Name     string
	Up       bool
	Loopback bool
	Addrs    []netip.Addr
}

// Local is an address of this host and the interface that has it ("" when
// no interface lists it).
type Local struct {
	Addr  netip.Addr
	Iface string
}

// maxPublish bounds the addresses a rank publishes.
const maxPublish = 16

// IfnameSpec is a parsed GODIST_SOCKET_IFNAME, with NCCL_SOCKET_IFNAME's
// syntax: a comma-separated list of names, each matching the interfaces
// whose name starts with it; a leading "=" makes every name match exactly,
// a leading "^" (before the "=") selects the interfaces that match none.
type IfnameSpec struct {
	Exclude bool
	Exact   bool
	Names   []string
}

// ParseIfname parses a GODIST_SOCKET_IFNAME value.
func ParseIfname(s string) (IfnameSpec, error) {
	var sp IfnameSpec
	rest := strings.TrimSpace(s)
	if r, ok := strings.CutPrefix(rest, "^"); ok {
		sp.Exclude, rest = true, r
	}
	if r, ok := strings.CutPrefix(rest, "="); ok {
		sp.Exact, rest = true, r
	}
	for _, n := range strings.Split(rest, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if strings.ContainsAny(n, "^= \t/") {
			return IfnameSpec{}, &SettingError{Var: envIfname, Value: s,
				Problem: fmt.Sprintf("%q is not an interface name (\"^\" and \"=\" go once, at the start: ^=eth0,eth1)", n)}
		}
		sp.Names = append(sp.Names, n)
	}
	if len(sp.Names) == 0 {
		return IfnameSpec{}, &SettingError{Var: envIfname, Value: s, Problem: "names no interface (examples: eth0; eth,ib; =eth0; ^docker0,lo)"}
	}
	return sp, nil
}

// matchOne reports whether interface name matches pattern n of the list.
func (sp IfnameSpec) matchOne(n, name string) bool {
	if sp.Exact {
		return name == n
	}
	return strings.HasPrefix(name, n)
}

// Match reports whether the interface called name is selected (for an
// exclusion list: matches none of its names).
func (sp IfnameSpec) Match(name string) bool {
	for _, n := range sp.Names {
		if sp.matchOne(n, name) {
			return !sp.Exclude
		}
	}
	return sp.Exclude
}

// usable reports whether peers can be told address a: link-local
// addresses (which need a zone) and non-unicast ones are left out.
func usable(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && !a.IsLinkLocalUnicast() &&
		!a.IsInterfaceLocalMulticast()
}

// usableAddrs lists the usable addresses of f, IPv4 first.
func usableAddrs(f Iface) []netip.Addr {
	var out []netip.Addr
	for _, a := range f.Addrs {
		if a = a.Unmap(); usable(a) {
			out = append(out, a)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Is4() && !out[j].Is4() })
	return out
}

// selectIfname returns the addresses of the interfaces sp selects among
// ifs, at most maxPublish: for a list of names, interface by interface in
// the order of the names (system order among those one prefix matches);
// for an exclusion list, the up, non-loopback interfaces it leaves, in
// system order. Within an interface IPv4 addresses come first. Every name
// of a list must select an up interface with a usable address.
func selectIfname(raw string, sp IfnameSpec, ifs []Iface) ([]Local, error) {
	var out []Local
	add := func(f Iface) {
		for _, a := range usableAddrs(f) {
			if len(out) < maxPublish {
				out = append(out, Local{Addr: a, Iface: f.Name})
			}
		}
	}
	fail := func(problem string) error {
		return &SettingError{Var: envIfname, Value: raw, Problem: problem + "; this host has " + describeIfaces(ifs)}
	}
	if sp.Exclude {
		for _, f := range ifs {
			if f.Up && !f.Loopback && sp.Match(f.Name) {
				add(f)
			}
		}
		if len(out) == 0 {
			return nil, fail("leaves no interface that is up and has an IPv4 or IPv6 address (loopback is never chosen by exclusion)")
		}
		return out, nil
	}
	taken := map[string]bool{}
	for _, n := range sp.Names {
		var named, up []Iface
		for _, f := range ifs {
			if sp.matchOne(n, f.Name) {
				named = append(named, f)
				if f.Up {
					up = append(up, f)
				}
			}
		}
		what := fmt.Sprintf("no interface is named %q", n)
		if !sp.Exact {
			what = fmt.Sprintf("no interface name starts with %q", n)
		}
		switch {
		case len(named) == 0:
			return nil, fail(what)
		case len(up) == 0:
			return nil, fail(fmt.Sprintf("%s is down", ifaceNames(named)))
		}
		addrs := 0
		for _, f := range up {
			addrs += len(usableAddrs(f))
		}
		if addrs == 0 {
			return nil, fail(fmt.Sprintf("%s has no IPv4 or IPv6 address (link-local addresses are not used)", ifaceNames(up)))
		}
		for _, f := range up {
			if !taken[f.Name] {
				taken[f.Name] = true
				add(f)
			}
		}
	}
	return out, nil
}

// ifaceNames joins the names of ifs for a message.
func ifaceNames(ifs []Iface) string {
	names := make([]string, len(ifs))
	for i, f := range ifs {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// describeIfaces lists ifs for an error message: "lo (127.0.0.1), eth0
// (10.0.0.2, fd00::2), docker0 (down, no address)".
func describeIfaces(ifs []Iface) string {
	if len(ifs) == 0 {
		return "no network interface"
	}
	parts := make([]string, len(ifs))
	for i, f := range ifs {
		var d []string
		if !f.Up {
			d = append(d, "down")
		}
		for _, a := range f.Addrs {
			d = append(d, a.String())
		}
		if len(f.Addrs) == 0 {
			d = append(d, "no address")
		}
		parts[i] = f.Name + " (" + strings.Join(d, ", ") + ")"
	}
	return strings.Join(parts, ", ")
}

// ownerOf names the interface of ifs that has address a: the one listing
// it, else for a loopback address the loopback interface (Linux answers on
// all of 127.0.0.0/8); "" if none.
func ownerOf(ifs []Iface, a netip.Addr) string {
	a = a.Unmap().WithZone("")
	for _, f := range ifs {
		for _, b := range f.Addrs {
			if b.Unmap() == a {
				return f.Name
			}
		}
	}
	if a.IsLoopback() {
		for _, f := range ifs {
			if f.Loopback {
				return f.Name
			}
		}
	}
	return ""
}

// allAddrs is what a rank listening on all interfaces publishes: loopback
// 127.0.0.1 first, then every usable non-loopback address, at most
// maxPublish in all.
func allAddrs(ifs []Iface) []Local {
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	out := []Local{{Addr: lo, Iface: ownerOf(ifs, lo)}}
	for _, f := range ifs {
		for _, a := range f.Addrs {
			if a = a.Unmap(); usable(a) && !a.IsLoopback() && len(out) < maxPublish {
				out = append(out, Local{Addr: a, Iface: f.Name})
			}
		}
	}
	return out
}
