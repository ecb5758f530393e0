package main

/*
#include "godist.h"
*/
import "C"

import (
	"os"
	"runtime"
	"unsafe"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/internal/buildinfo"
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
	st := buildinfo.Read()
	bi.Module, bi.VCSRevision, bi.VCSTime, bi.VCSModified = st.Module, st.Revision, st.Time, st.Modified
	return putJSON(bi, "info", buf, capacity, outlen, errbuf, errlen)
}

// godist_probe_shm reports whether a group created in this process could
// use shared memory in dir (NULL or "" for the default, /dev/shm), and if
// not, why (assemble.CheckShm).
//
//export godist_probe_shm
func godist_probe_shm(dir *C.char, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return putJSON(assemble.CheckShm(goString(dir)), "info", buf, capacity, outlen, errbuf, errlen)
}

// godist_probe_tcp has the fabric a group gets describe a rank of a group
// of one, as the rendezvous does (assemble.CheckTCP): it chooses its
// addresses from bind (GODIST_BIND_ADDR), ifname (GODIST_SOCKET_IFNAME)
// and peerHost (the store's host), each NULL or "" when not set, listens
// on an ephemeral port, then closes it. It reports the choice and the
// addresses the record would name, or why it could not listen.
//
//export godist_probe_tcp
func godist_probe_tcp(bind, ifname, peerHost *C.char, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	p := assemble.CheckTCP(assemble.Options{BindHost: goString(bind), Ifname: goString(ifname),
		PeerHost: goString(peerHost)})
	return putJSON(p, "info", buf, capacity, outlen, errbuf, errlen)
}

// godist_nccl_info writes JSON describing the NCCL this process can load:
// its version, where it came from, the CUDA devices, whether a unique id
// can be made (assemble.CheckNCCL).
//
//export godist_nccl_info
func godist_nccl_info(buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return putJSON(assemble.CheckNCCL(), "nccl info", buf, capacity, outlen, errbuf, errlen)
}
