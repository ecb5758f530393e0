package main

/*
#include "godist.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/godist/godist/backends/mpi"
	"github.com/godist/godist/libgodist"
)

// MPI for bootstrap: the Python rendezvous opens MPI (godist_mpi_open),
// broadcasts the store's address from rank 0 (godist_mpi_bcast) and
// finalises MPI at exit (godist_mpi_finalize).

func init() {
	registerCode(statusUnsupported, func(err error) bool { return errors.Is(err, mpi.ErrUnavailable) })
	registerCode(statusInvalid, func(err error) bool {
		var e *mpi.Error
		return errors.As(err, &e) && e.Code == mpi.ErrArg
	})
}

var (
	mpiMu  sync.Mutex
	mpiLib *mpi.Lib
)

// mpiInfo is what godist_mpi_open reports.
type mpiInfo struct {
	Impl                string `json:"impl"`
	Shim                string `json:"shim"`
	Library             string `json:"library"`
	Version             string `json:"version"`
	Provided            int    `json:"provided"`
	ProvidedName        string `json:"provided_name"`
	InitializedByGodist bool   `json:"initialized_by_godist"`
	Rank                int    `json:"rank"`
	Size                int    `json:"size"`
	TagUB               int    `json:"tag_ub"`
	ProcessorName       string `json:"processor_name"`
}

// godist_mpi_open loads the MPI shim (from dir, the package's mpi
// directory, unless GODIST_MPI_SHIM names one) after the MPI library it
// needs (GODIST_MPI_LIBRARY, else the implementation's soname) and
// initialises MPI once per process, then writes JSON describing it: impl,
// shim, library, version, provided, provided_name, initialized_by_godist,
// rank, size, tag_ub, processor_name. A process without MPI gets
// statusUnsupported.
//
//export godist_mpi_open
func godist_mpi_open(dir *C.char, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	lib, err := mpi.Open(C.GoString(dir))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	mpiMu.Lock()
	mpiLib = lib
	mpiMu.Unlock()
	return putJSON(mpiInfo{Impl: lib.Impl, Shim: lib.Shim, Library: lib.Library, Version: lib.Version, Provided: lib.Provided,
		ProvidedName: lib.ProvidedName, InitializedByGodist: lib.InitializedByGodist, Rank: lib.WorldRank,
		Size: lib.WorldSize, TagUB: lib.TagUB, ProcessorName: lib.ProcessorName}, "mpi info", buf, capacity, outlen,
		errbuf, errlen)
}

func openedMPI() (*mpi.Lib, error) {
	mpiMu.Lock()
	defer mpiMu.Unlock()
	if mpiLib == nil {
		return nil, fmt.Errorf("%w: MPI is not open (call godist_mpi_open first)", libgodist.ErrInvalid)
	}
	return mpiLib, nil
}

// godist_mpi_bcast broadcasts n bytes at buf from root over
// MPI_COMM_WORLD, blocking.
//
//export godist_mpi_bcast
func godist_mpi_bcast(buf unsafe.Pointer, n C.int64_t, root C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	lib, err := openedMPI()
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	if n < 0 || (n > 0 && buf == nil) {
		return finish(fmt.Errorf("%w: godist_mpi_bcast: bad buffer (%d bytes at %p)", libgodist.ErrInvalid, n, buf), errbuf, errlen)
	}
	var b []byte
	if n > 0 {
		b = unsafe.Slice((*byte)(buf), int(n))
	}
	return finish(lib.Bcast(mpi.World, b, int(root)), errbuf, errlen)
}

// godist_mpi_finalize finalises MPI if godist initialised it (and has not
// finalised it yet); otherwise, or without godist_mpi_open, it does
// nothing.
//
//export godist_mpi_finalize
func godist_mpi_finalize(errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	mpiMu.Lock()
	lib := mpiLib
	mpiMu.Unlock()
	if lib == nil {
		return statusOK
	}
	return finish(lib.Finalize(), errbuf, errlen)
}
