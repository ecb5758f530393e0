package main

/*
#include "godist.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"unsafe"

	"github.com/godist/godist/backends/shm"
	"github.com/godist/godist/backends/tcp"
	"github.com/godist/godist/libgodist/wire"
)

// What `python -m godist info` asks the library (python/godist/info.py):
// how it was built, and whether this host can carry the transports a group
// would use, found with the same code the rendezvous runs. Each function
// writes a JSON object into buf (capacity bytes) and its length into
// *outlen; if capacity is too small it returns statusInvalid with the
// needed length in *outlen.

// buildInfo is godist_build_info's object.
type buildInfo struct {
	GoVersion   string `json:"go_version"`
	GOOS        string `json:"goos"`
	GOARCH      string `json:"goarch"`
	Compiler    string `json:"compiler"`
	Module      string `json:"module"`
	VCSRevision string `json:"vcs_revision"` // "" when the build was not stamped
	VCSTime     string `json:"vcs_time"`
	VCSModified bool   `json:"vcs_modified"`
	ABIVersion  int    `json:"abi_version"`
	GOMAXPROCS  int    `json:"gomaxprocs"`
	// GOMAXPROCSEnv is $GOMAXPROCS as the library saw it when it loaded
	// ("" when unset: then GOMAXPROCS is NumCPU + spareProcs).
	GOMAXPROCSEnv string `json:"gomaxprocs_env"`
	SpareProcs    int    `json:"spare_procs"`
	// NumCPU is the number of CPUs this process may run on, as Go counts
	// them: what each rank's rendezvous record says (wire.PeerRecord.CPUs).
	NumCPU int `json:"num_cpu"`
}

// godist_build_info describes the library: the Go toolchain that built
// it, its version control stamp, and the Go runtime's view of the CPUs.
//
//export godist_build_info
func godist_build_info(buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	bi := buildInfo{GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Compiler: runtime.Compiler,
		ABIVersion: abiVersion, GOMAXPROCS: runtime.GOMAXPROCS(0), GOMAXPROCSEnv: os.Getenv("GOMAXPROCS"),
		SpareProcs: spareProcs, NumCPU: runtime.NumCPU()}
	if info, ok := debug.ReadBuildInfo(); ok {
		bi.Module = info.Main.Path
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.VCSRevision = s.Value
			case "vcs.time":
				bi.VCSTime = s.Value
			case "vcs.modified":
				bi.VCSModified = s.Value == "true"
			}
		}
	}
	return putJSON(bi, "info", buf, capacity, outlen, errbuf, errlen)
}

// shmProbe is godist_probe_shm's object.
type shmProbe struct {
	Dir    string `json:"dir"`
	Usable bool   `json:"usable"`
	// Reason says why a group could not use shared memory from this
	// process; "" when Usable.
	Reason   string `json:"reason"`
	Hostname string `json:"hostname"`
	BootID   string `json:"boot_id"`
}

// probeShm checks what the shared-memory offloader needs on this rank's
// side of the rendezvous: a supported platform and a writable dir
// (shm.Usable, which creates and removes a probe file as Describe does), a
// probe file that reads back as its peers read it (shm.SeesProbe), and the
// host's boot id, without which no rank counts as co-located.
func probeShm(dir string) shmProbe {
	if dir == "" {
		dir = shm.DefaultDir
	}
	p := shmProbe{Dir: dir}
	host, herr := shm.LocalHostID()
	p.Hostname, p.BootID = host.Hostname, host.BootID
	if !shm.Usable(dir) {
		// Usable says no without saying why: a probe of our own tells
		// the directory's failure apart from an unsupported platform.
		probe, err := shm.NewProbe(dir)
		if err != nil {
			p.Reason = err.Error()
			return p
		}
		_ = probe.Remove()
		p.Reason = fmt.Sprintf("shm: shared memory is not supported on %s/%s", runtime.GOOS, runtime.GOARCH)
		return p
	}
	probe, err := shm.NewProbe(dir)
	if err != nil {
		p.Reason = err.Error()
		return p
	}
	seen := shm.SeesProbe(probe.Path, probe.Token)
	_ = probe.Remove()
	switch {
	case !seen:
		p.Reason = fmt.Sprintf("shm: the probe file %s did not read back as written", probe.Path)
	case herr != nil:
		p.Reason = herr.Error() + " (ranks without a boot id are never counted as on one host)"
	case host.BootID == "":
		p.Reason = "shm: the boot id (/proc/sys/kernel/random/boot_id) is empty (ranks without a boot id are never " +
			"counted as on one host)"
	default:
		p.Usable = true
	}
	return p
}

// godist_probe_shm reports whether a group created in this process could
// use shared memory in dir (NULL or "" for the default, /dev/shm), and if
// not, why.
//
//export godist_probe_shm
func godist_probe_shm(dir *C.char, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return putJSON(probeShm(goString(dir)), "info", buf, capacity, outlen, errbuf, errlen)
}

// tcpProbe is godist_probe_tcp's object.
type tcpProbe struct {
	Fabric   string `json:"fabric"`
	Bind     string `json:"bind"`
	Ifname   string `json:"ifname"`
	PeerHost string `json:"peer_host"`
	// Choice is how the addresses were chosen (tcp.ChoiceAll, ...; "" when
	// a setting is unusable) and Why says so in a sentence.
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

// godist_probe_tcp has the fabric a group gets describe a rank of a group
// of one, as the rendezvous does: it chooses its addresses from bind
// (GODIST_BIND_ADDR), ifname (GODIST_SOCKET_IFNAME) and peerHost (the
// store's host), each NULL or "" when not set, listens on an ephemeral
// port, then closes it. It reports the choice and the addresses the record
// would name, or why it could not listen.
//
//export godist_probe_tcp
func godist_probe_tcp(bind, ifname, peerHost *C.char, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := tcpProbe{Fabric: "tcp", Bind: goString(bind), Ifname: goString(ifname), PeerHost: goString(peerHost),
		Addresses: []string{}, Interfaces: []string{}}
	f, err := tcp.NewFabric(tcp.NetConfig{BindAddr: p.Bind, Ifname: p.Ifname, PeerHost: p.PeerHost})
	if err != nil {
		p.Reason = err.Error()
		return putJSON(p, "info", buf, capacity, outlen, errbuf, errlen)
	}
	c := f.Choice()
	p.Choice, p.Why = c.How, c.Why
	for _, l := range c.Listen {
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
	return putJSON(p, "info", buf, capacity, outlen, errbuf, errlen)
}
