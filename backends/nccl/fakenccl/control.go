// This file reaches the fake's test controls (fake_set_hang, fake_counts,
// ...) in the copy of the fake that backends/nccl loaded, and host memory
// that stands in for device memory.

package fakenccl

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

static void *fk_lib;
static void (*fk_hang)(int);
static void (*fk_async)(int);
static int (*fk_counts)(int64_t *, int);
static void (*fk_errors)(char *, int);
static void *(*fk_stream)(int);

static const char *fk_open(const char *path) {
	fk_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (fk_lib == NULL) return dlerror();
	*(void **)(&fk_hang) = dlsym(fk_lib, "fake_set_hang");
	*(void **)(&fk_async) = dlsym(fk_lib, "fake_set_async_error");
	*(void **)(&fk_counts) = dlsym(fk_lib, "fake_counts");
	*(void **)(&fk_errors) = dlsym(fk_lib, "fake_errors");
	*(void **)(&fk_stream) = dlsym(fk_lib, "fake_stream");
	if (!fk_hang || !fk_async || !fk_counts || !fk_errors || !fk_stream) return "a fake_ symbol is missing";
	return NULL;
}
static void fk_set_hang(int on) { fk_hang(on); }
static void fk_set_async(int rc) { fk_async(rc); }
static int fk_get_counts(int64_t *out, int n) { return fk_counts(out, n); }
static void fk_get_errors(char *buf, int n) { fk_errors(buf, n); }
static uintptr_t fk_new_stream(int dev) { return (uintptr_t)fk_stream(dev); }
*/
import "C"

import (
	"errors"
	"unsafe"
)

// Open loads the fake built at path (the library backends/nccl loads) and
// binds its controls.
func Open(path string) error {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	if msg := C.fk_open(cs); msg != nil {
		return errors.New(C.GoString(msg))
	}
	return nil
}

// SetHang makes collectives do nothing and the events after them never
// complete (until their communicator is aborted), or ends that.
func SetHang(on bool) {
	v := C.int(0)
	if on {
		v = 1
	}
	C.fk_set_hang(v)
}

// SetAsyncError makes ncclCommGetAsyncError report rc (0: none), and
// calls on the communicators fail with it.
func SetAsyncError(rc int) { C.fk_set_async(C.int(rc)) }

// Counts are the fake's counters.
type Counts struct {
	Aborts, Destroys, Finalizes, GroupStarts int64
	LivePremul, LiveEvents, LiveStreams      int64
	LiveComms, Errors, Collectives           int64
}

// GetCounts reads the counters.
func GetCounts() Counts {
	var v [10]C.int64_t
	C.fk_get_counts(&v[0], C.int(len(v)))
	return Counts{Aborts: int64(v[0]), Destroys: int64(v[1]), Finalizes: int64(v[2]), GroupStarts: int64(v[3]),
		LivePremul: int64(v[4]), LiveEvents: int64(v[5]), LiveStreams: int64(v[6]), LiveComms: int64(v[7]),
		Errors: int64(v[8]), Collectives: int64(v[9])}
}

// Errors returns the misuse the fake recorded, one line each.
func Errors() string {
	var buf [4096]C.char
	C.fk_get_errors(&buf[0], C.int(len(buf)))
	return C.GoString(&buf[0])
}

// Stream makes a stream of device dev, to stand for a caller's current
// stream (it is never freed).
func Stream(dev int) uintptr { return uintptr(C.fk_new_stream(C.int(dev))) }

// Mem is host memory outside Go's heap, standing in for device memory.
type Mem struct {
	p unsafe.Pointer
	n int
}

// Alloc returns n bytes of zeroed C memory.
func Alloc(n int) *Mem { return &Mem{p: C.calloc(C.size_t(max(n, 1)), 1), n: n} }

// Addr is the memory's "device" address.
func (m *Mem) Addr() uintptr { return uintptr(m.p) }

// Bytes is the memory as a byte slice.
func (m *Mem) Bytes() []byte { return unsafe.Slice((*byte)(m.p), m.n) }

// Free releases the memory.
func (m *Mem) Free() { C.free(m.p); m.p = nil }
