package main

/*
#include "godist.h"
*/
import "C"

import (
	"errors"
	"unsafe"

	"github.com/godist/godist/assemble"
	"github.com/godist/godist/libgodist"
)

func init() {
	registerCode(statusInvalid, func(err error) bool { return errors.Is(err, libgodist.ErrInvalid) })
	registerCode(statusClosed, func(err error) bool { return errors.Is(err, libgodist.ErrClosed) })
	registerCode(statusTimeout, func(err error) bool {
		var t interface{ Timeout() bool }
		return errors.As(err, &t) && t.Timeout()
	})
}

// godist_pg_create creates a process group for rank of size ranks and starts
// listening for its peers; *out receives its handle. transport is "" (shared
// memory between co-located ranks, TCP otherwise), "tcp" (TCP only) or
// "mpi". bindHost (GODIST_BIND_ADDR), ifname (GODIST_SOCKET_IFNAME) and
// peerHost (the host of the group's store), each NULL or "" when not set,
// choose the addresses TCP listens on and publishes (tcp.Choose).
//
//export godist_pg_create
func godist_pg_create(rank, size C.int32_t, group *C.char, timeoutMs C.int64_t, bindHost, ifname, peerHost *C.char, transport *C.char, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if out == nil {
		return finish(errors.New("godist_pg_create: NULL out"), errbuf, errlen)
	}
	set, err := assemble.Backends(assemble.Options{BindHost: goString(bindHost), Ifname: goString(ifname),
		PeerHost: goString(peerHost), Transport: goString(transport)})
	if err != nil {
		return finish(invalidSetting{err}, errbuf, errlen)
	}
	pg, err := libgodist.New(libgodist.Config{Rank: int(rank), Size: int(size), Group: goString(group),
		Timeout: millis(timeoutMs)}, set)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	*out = C.uint64_t(handles.put(pg))
	return statusOK
}

// invalidSetting is a setting the backends cannot use: an invalid
// argument (statusInvalid), with the backend's message unchanged.
type invalidSetting struct{ error }

func (e invalidSetting) Unwrap() []error { return []error{e.error, libgodist.ErrInvalid} }

// godist_pg_record writes this rank's rendezvous record into buf (capacity
// cap bytes) and its length into *outlen. If cap is too small it returns
// statusInvalid with the needed length in *outlen.
//
//export godist_pg_record
func godist_pg_record(h C.uint64_t, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	rec, err := pg.LocalRecord()
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	return copyOut(rec, "record", buf, capacity, outlen, errbuf, errlen)
}

// godist_pg_connect completes the rendezvous with all n records (index =
// rank) and starts the group.
//
//export godist_pg_connect
func godist_pg_connect(h C.uint64_t, recs *C.godist_buf, n C.int32_t, timeoutMs C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	views, err := listOf((*C.godist_buf)(unsafe.Pointer(recs)), n, "records")
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	records := make([][]byte, len(views))
	for i, v := range views {
		records[i] = append([]byte(nil), v...)
	}
	return finish(pg.Connect(records, millis(timeoutMs)), errbuf, errlen)
}

// godist_pg_close shuts the group down gracefully and releases its handle.
// Closing an already released handle is an error (statusInvalid).
//
//export godist_pg_close
func godist_pg_close(h C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	handles.drop(uint64(h))
	return finish(pg.Close(), errbuf, errlen)
}

// godist_pg_abort fails all pending work of the group at once and closes
// its connections without goodbye. The handle stays valid until close.
//
//export godist_pg_abort
func godist_pg_abort(h C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	pg.Abort(nil)
	return statusOK
}

// godist_pg_seq writes the sequence number of the last collective issued.
//
//export godist_pg_seq
func godist_pg_seq(h C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	if out != nil {
		*out = C.uint64_t(pg.Seq())
	}
	return statusOK
}

// godist_pg_info reports whether the group's collectives use shared memory.
//
//export godist_pg_info
func godist_pg_info(h C.uint64_t, sharedMemory *C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	if sharedMemory != nil {
		*sharedMemory = 0
		if assemble.SharedMemory(pg.Offload()) {
			*sharedMemory = 1
		}
	}
	return statusOK
}

// godist_pg_state writes the group's snapshot (libgodist.State, and its
// one-line summary) as JSON into buf (capacity bytes) and its length into
// *outlen; if capacity is too small it returns statusInvalid with the
// needed length in *outlen.
//
//export godist_pg_state
func godist_pg_state(h C.uint64_t, buf unsafe.Pointer, capacity C.int64_t, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	st := pg.State()
	return putJSON(struct {
		libgodist.State
		Summary string `json:"summary"` // the line a signal's dump logs
	}{st, st.String()}, "state", buf, capacity, outlen, errbuf, errlen)
}
