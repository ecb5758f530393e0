package main

/*
#include "godist.h"
*/
import "C"

import (
	"strconv"
	"unsafe"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/libgodist/reduce"
)

// facts is godist_facts' object: the tables Python needs too, each defined
// once on the Go side. python/godist/_lib.py checks its status and cause
// tables against them at load; _nccl.py and info/ read the rest.
type facts struct {
	Status     map[string]int `json:"status"`     // status codes by _errors.py's names
	Causes     []string       `json:"causes"`     // godist_error.cause's names, by code
	DTypes     map[string]int `json:"dtypes"`     // dtype codes by torch's names
	ReduceOps  map[string]int `json:"reduce_ops"` // reduce op codes by torch's names
	Transports []string       `json:"transports"` // the names GODIST_TRANSPORT accepts
	Rendezvous rdvFacts       `json:"rendezvous"` // the store rendezvous' keys
	NCCL       ncclFacts      `json:"nccl"`       // what the NCCL path reduces
	Libraries  libraryFacts   `json:"libraries"`  // the names the native libraries are loaded by
}

type rdvFacts struct {
	GenerationKey string `json:"generation_key"`
	RecordKey     string `json:"record_key"` // a template: {gen} and {rank} stand for numbers
}

type ncclFacts struct {
	// ReduceOps are the reduce op codes NCCL applies to each dtype it
	// reduces, by dtype code; a dtype not there is not reduced at all.
	ReduceOps map[string][]int `json:"reduce_ops"`
	// ComplexOps are the reduce ops a complex tensor may be reduced with
	// through its real view.
	ComplexOps []int `json:"complex_ops"`
}

type libraryFacts struct {
	NCCL     []string            `json:"nccl"`      // tried in this order, after GODIST_NCCL_LIBRARY
	CUDART   []string            `json:"cudart"`    // after GODIST_CUDART_LIBRARY
	MPIImpls []string            `json:"mpi_impls"` // the MPI implementations with a shim, in the order tried
	MPI      map[string][]string `json:"mpi"`       // each implementation's MPI library sonames, after GODIST_MPI_LIBRARY
}

func opCodes(ops []reduce.Op) []int {
	out := make([]int, len(ops))
	for i, o := range ops {
		out[i] = int(o)
	}
	return out
}

func collectFacts() facts {
	f := facts{Status: statusNames, Causes: causeNames[:], DTypes: map[string]int{}, ReduceOps: map[string]int{},
		Transports: assemble.TransportNames, NCCL: ncclFacts{ReduceOps: map[string][]int{}}}
	libs := assemble.LibraryNames()
	f.Libraries = libraryFacts{NCCL: libs.NCCL, CUDART: libs.CUDART, MPIImpls: libs.MPIImpls, MPI: libs.MPI}
	for d := reduce.DType(0); d.Valid(); d++ {
		f.DTypes[d.String()] = int(d)
	}
	for o := reduce.Op(0); o.Valid(); o++ {
		f.ReduceOps[o.String()] = int(o)
	}
	f.Rendezvous.GenerationKey, f.Rendezvous.RecordKey = libgodist.RendezvousKeys()
	ops, complexOps := assemble.NCCLRules()
	for d, os := range ops {
		f.NCCL.ReduceOps[strconv.Itoa(int(d))] = opCodes(os)
	}
	f.NCCL.ComplexOps = opCodes(complexOps)
	return f
}

// godist_facts writes the facts object (see facts) as JSON into buf
// (capacity bytes) and its length into *outlen; when capacity is too small
// it returns statusInvalid with the needed length in *outlen.
//
//export godist_facts
func godist_facts(buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return putJSON(collectFacts(), "facts", buf, capacity, outlen, errbuf, errlen)
}
