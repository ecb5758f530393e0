package tcp

import (
	"fmt"

	"github.com/godist/godist/libgodist/wire"
)

// Check is what `python -m godist info` reports about the TCP fabric
// (godist_probe_tcp writes it as JSON).
type Check struct {
	Fabric   string `json:"fabric"`
	Bind     string `json:"bind"`
	Ifname   string `json:"ifname"`
	PeerHost string `json:"peer_host"`
	// Choice is how the addresses were chosen (ChoiceAll, ...; "" when a
	// setting is unusable) and Why says so in a sentence.
	Choice string `json:"choice"`
	Why    string `json:"why"`
	// Listen are the addresses listened on; null: all interfaces.
	Listen []string `json:"listen"`
	Usable bool     `json:"usable"`
	Reason string   `json:"reason"`
	// Addresses are those the rank's record would name, Interfaces theirs:
	// its peers on other hosts dial them.
	Addresses  []string `json:"addresses"`
	Interfaces []string `json:"interfaces"`
}

// CheckFabric has the fabric of c describe a rank of a group of one, as
// the rendezvous does: it chooses its addresses, listens on an ephemeral
// port, then closes it. It reports the choice and the addresses the
// record would name, or why it could not listen.
func CheckFabric(c NetConfig) Check {
	p := Check{Fabric: "tcp", Bind: c.BindAddr, Ifname: c.Ifname, PeerHost: c.PeerHost,
		Addresses: []string{}, Interfaces: []string{}}
	f, err := NewFabric(c)
	if err != nil {
		p.Reason = err.Error()
		return p
	}
	ch := f.Choice()
	p.Choice, p.Why = ch.How, ch.Why
	for _, l := range ch.Listen {
		p.Listen = append(p.Listen, l.Addr.String())
	}
	rec := wire.PeerRecord{Version: wire.Version, Group: "godist-info", Rank: 0, WorldSize: 1}
	if err := f.Describe(&rec); err != nil {
		p.Reason = err.Error()
	} else {
		p.Usable = true
		p.Addresses = append(p.Addresses, rec.Addresses...)
		p.Interfaces = append(p.Interfaces, rec.Interfaces...)
	}
	if err := f.Close(); err != nil && p.Usable {
		p.Usable, p.Reason = false, fmt.Sprintf("tcp: closing the probe listener: %v", err)
	}
	return p
}
