package main

/*
#include "godist.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/godist/godist/libgodist"
)

func init() {
	registerCode(statusUnsupported, func(err error) bool { return errors.Is(err, libgodist.ErrNotSplittable) })
}

// godist_pg_set_timeout sets the default deadline, in milliseconds, of the
// group's operations submitted from now on.
//
//export godist_pg_set_timeout
func godist_pg_set_timeout(h C.uint64_t, timeoutMs C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	return finish(pg.SetTimeout(time.Duration(timeoutMs)*time.Millisecond), errbuf, errlen)
}

// godist_pg_error writes into *status the status code of the error that
// broke the group (statusOK while it is healthy) and into errbuf its
// message; the call itself succeeds unless the handle is bad.
//
//export godist_pg_error
func godist_pg_error(h C.uint64_t, status *C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	broken := pg.Err()
	code := codeOf(broken)
	if status != nil {
		*status = C.int32_t(code)
	}
	if broken != nil {
		writeErr(errbuf, errlen, code, broken, broken.Error())
	}
	return statusOK
}

// godist_pg_split forms the child group of the n ranks at ranks (this
// group's ranks in the child's order, this rank among them) on this
// group's connections, without a rendezvous; every rank of this group
// calls it in the same order, each with its own child's ranks. The child's
// handle goes into *out.
//
// A group whose collectives cannot serve a child (libgodist.ErrNotSplittable)
// answers statusUnsupported: form the child anew.
//
//export godist_pg_split
func godist_pg_split(h C.uint64_t, ranks *C.int32_t, n C.int32_t, group *C.char, timeoutMs C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	if out == nil || (ranks == nil && n > 0) || n < 1 {
		return finish(fmt.Errorf("%w: godist_pg_split: %d ranks at %p, out %p", libgodist.ErrInvalid, n, ranks, out), errbuf, errlen)
	}
	rs := make([]int, int(n))
	for i, r := range unsafe.Slice((*int32)(unsafe.Pointer(ranks)), int(n)) {
		rs[i] = int(r)
	}
	child, err := pg.Split(rs, goString(group), millis(timeoutMs))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	*out = C.uint64_t(handles.put(child))
	return statusOK
}

// godist_pg_flight writes the group's flight recorder entries
// (libgodist.FlightEntry, oldest first) as a JSON array into buf
// (capacity bytes) and its length into *outlen; if capacity is too small
// it returns statusInvalid with the needed length in *outlen.
//
//export godist_pg_flight
func godist_pg_flight(h C.uint64_t, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	return putJSON(pg.Flight(), "flight recorder", buf, capacity, outlen, errbuf, errlen)
}

// godist_pg_set_flight sets how many operations the group's flight
// recorder keeps (0 turns it off; libgodist.DefaultFlightEntries until
// set) and drops what it holds.
//
//export godist_pg_set_flight
func godist_pg_set_flight(h C.uint64_t, entries C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	if entries < 0 {
		return finish(fmt.Errorf("%w: flight recorder size %d is negative", libgodist.ErrInvalid, int64(entries)), errbuf, errlen)
	}
	pg.SetFlightEntries(int(entries))
	return statusOK
}
