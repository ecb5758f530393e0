// Package nccl carries collectives on CUDA memory through NCCL, loaded at
// run time: shim.c dlopens libnccl.so.2 and the CUDA runtime (the copies
// torch has loaded when there are some), so libgodist.so has no NEEDED
// entry on either and loads on hosts without a GPU. The engine reaches it
// only through backend.Accelerator and backend.DeviceComm.
package nccl

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ErrUnavailable is wrapped by the errors of Load when NCCL or the CUDA
// runtime cannot be loaded.
var ErrUnavailable = errors.New("NCCL is unavailable")

// MinVersion is the oldest NCCL godist drives: the ncclConfig_t that
// shim.c declares is 2.18's.
const MinVersion = 21800

// Library describes the loaded NCCL and CUDA runtime.
type Library struct {
	Version        int    // ncclGetVersion: 23007 for 2.30.7
	RuntimeVersion int    // cudaRuntimeGetVersion: 13000 for 13.0
	NCCLFrom       string // which name or path was loaded
	CUDARTFrom     string
}

// VersionString is Version as "2.30.7".
func (l *Library) VersionString() string { return versionString(l.Version) }

func versionString(v int) string {
	if v >= 10000 { // 2.9 and later: major*10000 + minor*100 + patch
		return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
}

var (
	loadOnce sync.Once
	loaded   *Library
	loadErr  error
)

// NCCLNames and CUDARTNames are the names Load tries, first among the
// libraries already in the process (what torch loaded), then on the
// loader's search path; Config's paths replace them. The CUDA runtime's soname is
// libcudart.so.<major> from CUDA 12 on, libcudart.so.11.0 for CUDA 11
// (torch's cu118 builds). python -m godist.info reports these names
// (godist_facts).
var (
	NCCLNames   = []string{"libnccl.so.2", "libnccl.so"}
	CUDARTNames = []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}
)

// Config names the libraries Load opens instead of searching for
// NCCLNames and CUDARTNames: paths, "" for the search. godist's library
// sets it from GODIST_NCCL_LIBRARY and GODIST_CUDART_LIBRARY when it loads
// (assemble.Configure).
type Config struct {
	NCCLLibrary   string
	CUDARTLibrary string
}

var config atomic.Pointer[Config]

// Configure sets the Config Load uses. Load runs once per process, so
// only a Configure before the first Load counts.
func Configure(c Config) { config.Store(&c) }

// Load loads NCCL and the CUDA runtime once per process and returns what
// it found, or an error wrapping ErrUnavailable that says what was tried.
func Load() (*Library, error) {
	loadOnce.Do(func() { loaded, loadErr = load() })
	return loaded, loadErr
}

func load() (*Library, error) {
	var c Config
	if p := config.Load(); p != nil {
		c = *p
	}
	nh, nfrom, err := open("NCCL", c.NCCLLibrary, NCCLNames)
	if err != nil {
		return nil, err
	}
	ch, cfrom, err := open("the CUDA runtime", c.CUDARTLibrary, CUDARTNames)
	if err != nil {
		return nil, err
	}
	var msg [512]C.char
	if C.gn_bind(nh, ch, &msg[0], C.int(len(msg))) != 0 {
		return nil, fmt.Errorf("%w: %s (from %s, %s)", ErrUnavailable, C.GoString(&msg[0]), nfrom, cfrom)
	}
	lib := &Library{NCCLFrom: nfrom, CUDARTFrom: cfrom}
	var v C.int
	var st C.gn_status
	if C.gn_nccl_version(&v, &st) != 0 {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, statusError(&st, nil))
	}
	lib.Version = int(v)
	if C.gn_cuda_runtime_version(&v, &st) != 0 {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, statusError(&st, nil))
	}
	lib.RuntimeVersion = int(v)
	if lib.Version < MinVersion {
		return nil, fmt.Errorf("%w: NCCL %s from %s is older than %s, the oldest godist drives", ErrUnavailable,
			lib.VersionString(), nfrom, versionString(MinVersion))
	}
	return lib, nil
}

// open dlopens the first of: path (if set), names already loaded in the
// process, names on the search path.
func open(what, path string, names []string) (unsafe.Pointer, string, error) {
	var tried []string
	try := func(name string, noload bool) unsafe.Pointer {
		cs := C.CString(name)
		defer C.free(unsafe.Pointer(cs))
		var msg [512]C.char
		nl := C.int(0)
		if noload {
			nl = 1
		}
		h := C.gn_dlopen(cs, nl, &msg[0], C.int(len(msg)))
		if h == nil && !noload {
			tried = append(tried, C.GoString(&msg[0]))
		}
		return h
	}
	if path != "" {
		if h := try(path, false); h != nil {
			return h, path, nil
		}
		return nil, "", fmt.Errorf("%w: cannot load %s: %s", ErrUnavailable, what, strings.Join(tried, "; "))
	}
	for _, n := range names {
		if h := try(n, true); h != nil {
			return h, n + " (already loaded)", nil
		}
	}
	for _, n := range names {
		if h := try(n, false); h != nil {
			return h, n, nil
		}
	}
	return nil, "", fmt.Errorf("%w: cannot load %s: %s", ErrUnavailable, what, strings.Join(tried, "; "))
}

// UniqueID returns a new communicator's id (128 bytes); no GPU needed.
func (l *Library) UniqueID() ([]byte, error) {
	id := make([]byte, 128)
	var st C.gn_status
	if C.gn_unique_id(unsafe.Pointer(&id[0]), &st) != 0 {
		return nil, statusError(&st, nil)
	}
	return id, nil
}

// DeviceCount is cudaGetDeviceCount's answer.
func (l *Library) DeviceCount() (int, error) {
	var n C.int
	var st C.gn_status
	if C.gn_device_count(&n, &st) != 0 {
		return 0, statusError(&st, nil)
	}
	return int(n), nil
}

// Error is a failed NCCL or CUDA call.
type Error struct {
	Call   string // "ncclAllReduce", "cudaSetDevice"
	NCCL   int    // ncclResult_t, or 0
	CUDA   int    // cudaError_t, or 0
	Text   string // the library's name for the code
	Detail string // ncclGetLastError, when there is one
}

func (e *Error) Error() string {
	var s string
	if e.CUDA != 0 {
		s = fmt.Sprintf("%s: CUDA error %d (%s)", e.Call, e.CUDA, e.Text)
	} else {
		s = fmt.Sprintf("%s: NCCL error %d (%s)", e.Call, e.NCCL, e.Text)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Timeout reports whether a non-blocking call outlived its deadline.
func (e *Error) Timeout() bool { return e.NCCL == C.GN_TIMEOUT }

func statusError(st *C.gn_status, comm unsafe.Pointer) error {
	e := &Error{Call: C.GoString(st.what), NCCL: int(st.nccl), CUDA: int(st.cuda)}
	if e.CUDA != 0 {
		e.Text = C.GoString(C.gn_cuda_string(st.cuda))
	} else {
		e.Text = C.GoString(C.gn_nccl_string(st.nccl))
		if comm != nil && e.NCCL != C.GN_TIMEOUT {
			e.Detail = C.GoString(C.gn_last_error(comm))
		}
	}
	return e
}
