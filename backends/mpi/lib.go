// Package mpi reaches MPI through godist's MPI shims (shim/godist_mpi.h):
// one small library per MPI implementation (libgodist_mpi_openmpi.so,
// libgodist_mpi_mpich.so), each compiled against its own MPI's header but
// linked against no MPI library (no DT_NEEDED entry for it: a wheel can
// ship the shims and stay manylinux). Open picks the shim matching the
// launcher, dlopens that implementation's MPI library (MPILibraries, or
// Config.Library) and then the shim, both RTLD_GLOBAL (loader.c), so
// the shim's MPI symbols resolve against the library when it loads; then
// it initialises MPI on a goroutine locked to its OS thread for the life
// of the process. libgodist.so itself never links MPI and loads where none
// is installed. The package reads no environment: godist's library hands
// it GODIST_MPI, GODIST_MPI_SHIM, GODIST_MPI_LIBRARY and the launcher's
// implementation when it loads (Configure, ConfigFromEnv;
// assemble.Configure).
//
// Threads: Open asks for MPI_THREAD_MULTIPLE. When MPI provides less
// (Provided < 3, or MPI was initialised by someone else at a lower level),
// every call of a Lib is serialised by one process-wide mutex; that makes
// SERIALIZED correct, and FUNNELED or SINGLE correct only as long as no
// other code in the process calls MPI from another thread at the same
// time. MPI_Init_thread and MPI_Finalize always run on the init goroutine's
// thread, as the MPI standard wants.
//
// Memory: MPI keeps the buffers of a non-blocking call (the I* methods)
// until its request completes, so they must not be Go memory (the Go
// garbage collector may move or free it): in production they are tensor
// memory allocated by torch, and Alloc gives C memory for temporaries.
// Count and displacement slices may be Go memory: the shim converts them
// into arrays of its own during the call.
package mpi

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "loader.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ErrUnavailable is wrapped by the errors of Open when no MPI shim can be
// chosen or loaded, or MPI cannot be initialised.
var ErrUnavailable = errors.New("MPI is unavailable")

// ABIVersion is the shim ABI (GM_ABI_VERSION) this package drives.
const ABIVersion = 1

// The shim's own error codes (godist_mpi.h).
const (
	ErrArg     = 100001 // GM_ERR_ARG: an argument the shim refuses
	ErrNotInit = 100002 // GM_ERR_NOT_INIT: MPI is not initialised or already finalised
	errNoShim  = 100003 // GML_NOT_LOADED (loader.h)
)

// Impls are the MPI implementations with a shim, in the order Open tries
// them for a process started without a launcher.
var Impls = []string{"openmpi", "mpich"}

// ShimName is the file name of impl's shim.
func ShimName(impl string) string { return "libgodist_mpi_" + impl + ".so" }

// MPILibraries are the sonames of each implementation's MPI library, in
// the order Open tries them through the dynamic loader's search path
// (LD_LIBRARY_PATH, the ldconfig cache, the default directories): Open
// MPI's libmpi.so.40 (4.x and 5.x); MPICH's libmpich.so.12 (3.x and 4.x),
// or libmpi.so.12, the name some MPICH builds (and derivatives) give it.
var MPILibraries = map[string][]string{
	"openmpi": {"libmpi.so.40"},
	"mpich":   {"libmpich.so.12", "libmpi.so.12"},
}

// The environment variables of Config (ConfigFromEnv reads them):
// EnvMPI names the implementation whose shim to load, EnvShim a shim's
// path, EnvLibrary the MPI library to open instead of MPILibraries' (a
// path, for an install the dynamic loader does not search).
const (
	EnvMPI     = "GODIST_MPI"
	EnvShim    = "GODIST_MPI_SHIM"
	EnvLibrary = "GODIST_MPI_LIBRARY"
)

// Environment variables the launchers set (reference: docs of Open MPI,
// MPICH Hydra's pmip_cb.c).
var (
	openMPIVars = []string{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"}
	mpichVars   = []string{"PMI_RANK", "PMI_SIZE", "PMI_ID", "PMI_FD", "PMI_PORT", "MPI_LOCALNRANKS"}
)

// Config says where Open finds MPI. godist's library sets it from the
// environment the process started with when it loads (assemble.Configure,
// through ConfigFromEnv); the zero Config is no setting and no launcher.
type Config struct {
	MPI      string // GODIST_MPI: the implementation whose shim to load (one of Impls); "": the launcher's
	Shim     string // GODIST_MPI_SHIM: the path of the shim to load instead of dir's
	Library  string // GODIST_MPI_LIBRARY: the path of the MPI library to load instead of MPILibraries'
	Launcher string // the implementation whose launcher started the process (LauncherImpl), or ""
}

var config atomic.Pointer[Config]

// Configure sets the Config Open uses. Open runs once per process, so only
// a Configure before the first Open counts.
func Configure(c Config) { config.Store(&c) }

// configured is the Config of the last Configure, or the zero Config.
func configured() Config {
	if p := config.Load(); p != nil {
		return *p
	}
	return Config{}
}

// ConfigFromEnv is the Config of the environment that getenv reads
// (os.Getenv in godist's library): GODIST_MPI, GODIST_MPI_SHIM,
// GODIST_MPI_LIBRARY and LauncherImpl's launcher.
func ConfigFromEnv(getenv func(string) string) Config {
	return Config{MPI: getenv(EnvMPI), Shim: getenv(EnvShim), Library: getenv(EnvLibrary),
		Launcher: LauncherImpl(getenv)}
}

// LauncherImpl is the implementation whose launcher's variables are set
// (not empty) in the environment that getenv reads: "openmpi" for
// OMPI_COMM_WORLD_*, "mpich" for PMI_* or MPI_LOCALNRANKS (MPICH's Hydra),
// else "".
func LauncherImpl(getenv func(string) string) string {
	for _, v := range openMPIVars {
		if getenv(v) != "" {
			return "openmpi"
		}
	}
	for _, v := range mpichVars {
		if getenv(v) != "" {
			return "mpich"
		}
	}
	return ""
}

// Comm is a communicator of the shim; World is MPI_COMM_WORLD.
type Comm int32

// World is MPI_COMM_WORLD.
const World Comm = 0

// Request is a pending non-blocking operation; Test completes it.
type Request int64

// Error is a failed MPI call.
type Error struct {
	Call string // "MPI_Iallreduce"
	Code int    // the MPI error code, or ErrArg / ErrNotInit
	Text string // MPI_Error_string's text
}

func (e *Error) Error() string { return fmt.Sprintf("%s: MPI error %d (%s)", e.Call, e.Code, e.Text) }

// Lib is MPI, loaded and initialised. Its methods may be called from any
// goroutine.
type Lib struct {
	Impl                string // "openmpi" or "mpich": what the shim was built against
	Shim                string // the shim's path
	Library             string // the MPI library Open loaded before the shim (a soname or Config.Library)
	Version             string // the first line of MPI_Get_library_version
	Provided            int    // the thread level: 0 SINGLE .. 3 MULTIPLE
	ProvidedName        string // "MPI_THREAD_MULTIPLE" ...
	InitializedByGodist bool   // Open called MPI_Init_thread (and Finalize will finalise)
	WorldRank           int
	WorldSize           int
	TagUB               int // MPI_TAG_UB
	ProcessorName       string

	calls chan func() // run on the init goroutine's thread

	finMu     sync.Mutex
	finalized bool
	finErr    error

	commMu sync.Mutex
	comms  map[Comm]commInfo
}

type commInfo struct{ rank, size int }

// ThreadLevelNames are the names of the thread levels 0..3.
var ThreadLevelNames = [4]string{"MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED",
	"MPI_THREAD_MULTIPLE"}

var (
	openOnce sync.Once
	opened   *Lib
	openErr  error
	serial   sync.Mutex // held around every call when Provided < 3
)

// Open loads an MPI shim and initialises MPI, once per process: later
// calls return the same *Lib or the same error. It reads the Config of
// Configure. The shim is, in order: the path in Config.Shim
// (GODIST_MPI_SHIM); dir's shim of Config.MPI (GODIST_MPI: openmpi or
// mpich); dir's shim of Config.Launcher, the implementation whose launcher
// started the process (OMPI_COMM_WORLD_* for Open MPI; PMI_* or
// MPI_LOCALNRANKS for MPICH's Hydra); without a launcher, the first of
// dir's shims present in the order of Impls. Before the shim, Open loads
// the MPI library of the shim's implementation: the path in Config.Library
// (GODIST_MPI_LIBRARY), else the first of MPILibraries[impl] the dynamic
// loader finds (one already in the process, say mpi4py's, is used as it
// is). If MPI is already initialised (mpi4py, torch's mpi backend), Open
// uses it and never finalises it.
func Open(dir string) (*Lib, error) {
	openOnce.Do(func() {
		opened, openErr = open(dir)
		if openErr == nil {
			current.Store(opened)
		}
	})
	return opened, openErr
}

// current is the Lib a successful Open made.
var current atomic.Pointer[Lib]

// Current returns the Lib a successful Open made, or nil: MPI is not in use
// in this process.
func Current() *Lib { return current.Load() }

// chooseShim returns the shim's path and its implementation under c. For
// a GODIST_MPI_SHIM path (c.Shim) the implementation is GODIST_MPI's
// (c.MPI), else the one its file name names (libgodist_mpi_<impl>.so),
// else the launcher's, else "" (unknown: no MPI library is loaded for it
// unless GODIST_MPI_LIBRARY, c.Library, names one).
func chooseShim(dir string, c Config) (path, impl string, err error) {
	env := c.MPI
	if p := c.Shim; p != "" {
		if slices.Contains(Impls, env) {
			impl = env
		}
		for _, i := range Impls {
			if impl == "" && filepath.Base(p) == ShimName(i) {
				impl = i
			}
		}
		if impl == "" {
			impl = c.Launcher
		}
		return p, impl, nil
	}
	if env != "" {
		if !slices.Contains(Impls, env) {
			return "", "", fmt.Errorf("%w: GODIST_MPI=%q is none of %s", ErrUnavailable, env, strings.Join(Impls, ", "))
		}
		return filepath.Join(dir, ShimName(env)), env, nil
	}
	if i := c.Launcher; i != "" {
		return filepath.Join(dir, ShimName(i)), i, nil
	}
	var tried []string
	for _, i := range Impls {
		p := filepath.Join(dir, ShimName(i))
		if _, err := os.Stat(p); err == nil {
			return p, i, nil
		}
		tried = append(tried, p)
	}
	return "", "", fmt.Errorf("%w: no MPI shim: GODIST_MPI_SHIM and GODIST_MPI are unset, no launcher variable is set (%s), "+
		"and none of %s exists", ErrUnavailable, strings.Join(append(append([]string{}, openMPIVars...), mpichVars...), ", "),
		strings.Join(tried, ", "))
}

// mpiLibraries are the names openMPILibrary tries for impl under c, and
// whether they come from GODIST_MPI_LIBRARY (c.Library).
func mpiLibraries(impl string, c Config) ([]string, bool) {
	if p := c.Library; p != "" {
		return []string{p}, true
	}
	return MPILibraries[impl], false
}

// openMPILibrary loads impl's MPI library (mpiLibraries) into the global
// scope (loader.c's gml_open_mpi) and returns the name it loaded: "" when
// there is none to try (impl unknown and GODIST_MPI_LIBRARY unset: the
// shim must then find MPI itself).
func openMPILibrary(impl string, c Config) (string, error) {
	names, override := mpiLibraries(impl, c)
	var errs []string
	for _, n := range names {
		cs := C.CString(n)
		var msg [1024]C.char
		rc := C.gml_open_mpi(cs, &msg[0], C.int(len(msg)))
		C.free(unsafe.Pointer(cs))
		if rc == 0 {
			return n, nil
		}
		errs = append(errs, C.GoString(&msg[0]))
	}
	if len(names) == 0 {
		return "", nil
	}
	if override {
		return "", fmt.Errorf("%w: cannot load the MPI library %s=%s: %s", ErrUnavailable, EnvLibrary, names[0], errs[0])
	}
	return "", fmt.Errorf("%w: cannot load the %s library the MPI shim needs: tried %s (%s); install %s's runtime "+
		"library where the dynamic loader finds it (LD_LIBRARY_PATH, ldconfig) or set %s to its path",
		ErrUnavailable, impl, strings.Join(names, ", "), strings.Join(errs, "; "), impl, EnvLibrary)
}

func open(dir string) (*Lib, error) {
	c := configured()
	path, impl, err := chooseShim(dir, c)
	if err != nil {
		return nil, err
	}
	library, err := openMPILibrary(impl, c)
	if err != nil {
		return nil, err
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var msg [1024]C.char
	if C.gml_load(cs, &msg[0], C.int(len(msg))) != 0 {
		hint := ""
		if library == "" {
			hint = fmt.Sprintf(" (no MPI library was loaded before it: its implementation is unknown; set GODIST_MPI "+
				"or %s)", EnvLibrary)
		}
		return nil, fmt.Errorf("%w: cannot load the MPI shim %s: %s%s", ErrUnavailable, path, C.GoString(&msg[0]), hint)
	}
	if v := int(C.gml_abi_version()); v != ABIVersion {
		return nil, fmt.Errorf("%w: the MPI shim %s has ABI version %d, godist needs %d", ErrUnavailable, path, v,
			ABIVersion)
	}
	l := &Lib{Impl: C.GoString(C.gml_impl()), Shim: path, Library: library, calls: make(chan func()), comms: map[Comm]commInfo{}}
	initErr := make(chan error)
	go l.mpiThread(initErr)
	if err := <-initErr; err != nil {
		return nil, fmt.Errorf("%w: %s (shim %s): %w", ErrUnavailable, l.Impl, path, err)
	}
	if l.Provided < 3 {
		serial.Lock()
		defer serial.Unlock()
	}
	var buf [4096]C.char
	if rc := C.gml_library_version(&buf[0], C.int(len(buf))); rc != 0 {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, mpiError("MPI_Get_library_version", rc))
	}
	l.Version, _, _ = strings.Cut(strings.TrimSpace(C.GoString(&buf[0])), "\n")
	l.Version = strings.TrimSpace(l.Version)
	var rank, size, ub C.int
	if rc := C.gml_world(&rank, &size); rc != 0 {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, mpiError("MPI_Comm_rank", rc))
	}
	if rc := C.gml_tag_ub(&ub); rc != 0 {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, mpiError("MPI_Comm_get_attr(MPI_TAG_UB)", rc))
	}
	if rc := C.gml_processor_name(&buf[0], C.int(len(buf))); rc != 0 {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, mpiError("MPI_Get_processor_name", rc))
	}
	l.WorldRank, l.WorldSize, l.TagUB, l.ProcessorName = int(rank), int(size), int(ub), C.GoString(&buf[0])
	l.comms[World] = commInfo{rank: l.WorldRank, size: l.WorldSize}
	return l, nil
}

// mpiThread initialises MPI on a thread it keeps for the life of the
// process (never unlocked: MPI_Finalize must run on the thread that
// called MPI_Init_thread), then runs the functions sent to l.calls.
func (l *Lib) mpiThread(initErr chan<- error) {
	runtime.LockOSThread()
	initErr <- l.initMPI()
	for f := range l.calls {
		f()
	}
}

func (l *Lib) initMPI() error {
	var flag C.int
	if rc := C.gml_initialized(&flag); rc != 0 {
		return mpiError("MPI_Initialized", rc)
	}
	var provided C.int
	if flag != 0 {
		var fin C.int
		if rc := C.gml_finalized(&fin); rc != 0 {
			return mpiError("MPI_Finalized", rc)
		}
		if fin != 0 {
			return errors.New("MPI was already finalised in this process")
		}
		if rc := C.gml_query_thread(&provided); rc != 0 {
			return mpiError("MPI_Query_thread", rc)
		}
	} else {
		if rc := C.gml_init_thread(3, &provided); rc != 0 {
			return mpiError("MPI_Init_thread", rc)
		}
		l.InitializedByGodist = true
	}
	l.Provided = min(max(int(provided), 0), 3)
	l.ProvidedName = ThreadLevelNames[l.Provided]
	return nil
}

// onThread runs f on the init goroutine's thread and waits for it.
func (l *Lib) onThread(f func()) {
	done := make(chan struct{})
	l.calls <- func() { f(); close(done) }
	<-done
}

// Finalize calls MPI_Finalize on the thread that initialised MPI, if
// godist initialised it and it is not finalised yet; otherwise it does
// nothing. Every later call fails with ErrNotInit; MPI cannot be
// initialised again in this process. Idempotent: later calls return the
// first one's error.
func (l *Lib) Finalize() error {
	l.finMu.Lock()
	defer l.finMu.Unlock()
	if l.finalized || !l.InitializedByGodist {
		return l.finErr
	}
	l.finalized = true
	var fin C.int
	if C.gml_finalized(&fin) == 0 && fin != 0 {
		return nil
	}
	defer l.lock()()
	l.onThread(func() {
		if rc := C.gml_finalize(); rc != 0 {
			l.finErr = mpiError("MPI_Finalize", rc)
		}
	})
	return l.finErr
}

// lock serialises the call when MPI does not provide MPI_THREAD_MULTIPLE;
// it returns the unlock.
func (l *Lib) lock() func() {
	if l.Provided >= 3 {
		return func() {}
	}
	serial.Lock()
	return serial.Unlock
}

// mpiError describes a nonzero return code of the shim.
func mpiError(call string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	if rc == errNoShim {
		return &Error{Call: call, Code: int(rc), Text: "the MPI shim is not loaded"}
	}
	var buf [1024]C.char
	C.gml_error_string(rc, &buf[0], C.int(len(buf)))
	return &Error{Call: call, Code: int(rc), Text: C.GoString(&buf[0])}
}

func argError(call, format string, args ...any) error {
	return &Error{Call: call, Code: ErrArg, Text: "GM_ERR_ARG: " + fmt.Sprintf(format, args...)}
}

// Alloc returns n bytes of C memory (not moved or collected by Go, so it
// may be handed to a non-blocking call) and the function that frees it.
// n == 0 gives a nil slice.
func Alloc(n int) (buf []byte, free func()) {
	if n <= 0 {
		return nil, func() {}
	}
	p := C.malloc(C.size_t(n))
	if p == nil {
		panic(fmt.Sprintf("mpi.Alloc: cannot allocate %d bytes", n))
	}
	var once sync.Once
	return unsafe.Slice((*byte)(p), n), func() { once.Do(func() { C.free(p) }) }
}
