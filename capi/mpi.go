package main

/*
#include "godist.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/libgodist"
)

// MPI for bootstrap: the Python rendezvous opens MPI (godist_mpi_open),
// broadcasts the store's address from rank 0 (godist_mpi_bcast) and
// finalises MPI at exit (godist_mpi_finalize), through assemble.

func init() {
	registerCode(statusUnsupported, assemble.Unsupported)
	registerCode(statusInvalid, assemble.BadArgument)
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
	info, err := assemble.OpenMPI(C.GoString(dir))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	return putJSON(info, "mpi info", buf, capacity, outlen, errbuf, errlen)
}

// godist_mpi_bcast broadcasts n bytes at buf from root over
// MPI_COMM_WORLD, blocking.
//
//export godist_mpi_bcast
func godist_mpi_bcast(buf unsafe.Pointer, n C.int64_t, root C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if n < 0 || (n > 0 && buf == nil) {
		return finish(fmt.Errorf("%w: godist_mpi_bcast: bad buffer (%d bytes at %p)", libgodist.ErrInvalid, n, buf), errbuf, errlen)
	}
	var b []byte
	if n > 0 {
		b = unsafe.Slice((*byte)(buf), int(n))
	}
	return finish(assemble.BcastMPI(b, int(root)), errbuf, errlen)
}

// godist_mpi_finalize finalises MPI if godist initialised it (and has not
// finalised it yet); otherwise, or without godist_mpi_open, it does
// nothing.
//
//export godist_mpi_finalize
func godist_mpi_finalize(errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return finish(assemble.FinalizeMPI(), errbuf, errlen)
}
