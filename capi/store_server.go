package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/godist/godist/auth"
	"github.com/godist/godist/libgodist"
	"github.com/godist/godist/libgodist/glog"
	"github.com/godist/godist/store"
)

// The standalone TCPStore server (godist_tcpserver_*) and a group's whole
// rendezvous through a store (godist_pg_rendezvous_store); the store
// handles are in store.go.

// ----- standalone server -------------------------------------------------

// godist_tcpserver_create starts a TCPStore server (no client) listening
// on host:port (host "" or NULL: all interfaces; port 0: ephemeral).
//
//export godist_tcpserver_create
func godist_tcpserver_create(host *C.char, port C.int32_t, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if out == nil || port < 0 || port > 65535 {
		return finish(invalidArg("godist_tcpserver_create: NULL out or port %d out of range", port), errbuf, errlen)
	}
	srv, err := store.NewTCPServer(store.ServerOptions{Addr: net.JoinHostPort(goString(host), strconv.Itoa(int(port))),
		Key: auth.Current(auth.Store), Warnf: glog.Warnf})
	if err != nil {
		return finish(storeFail(err, true), errbuf, errlen)
	}
	*out = C.uint64_t(handles.put(srv))
	return statusOK
}

//export godist_tcpserver_port
func godist_tcpserver_port(h C.uint64_t, out *C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	srv, err := lookup[*store.TCPServer](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	if out != nil {
		*out = C.int32_t(srv.Port())
	}
	return statusOK
}

// godist_tcpserver_close stops the server, closing its connections, and
// releases the handle.
//
//export godist_tcpserver_close
func godist_tcpserver_close(h C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	srv, err := lookup[*store.TCPServer](uint64(h))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	handles.drop(uint64(h))
	return finish(storeFail(srv.Close(), true), errbuf, errlen)
}

// ----- rendezvous --------------------------------------------------------

// godist_pg_rendezvous_store does the whole rendezvous of group pg through
// the store behind store_h, with key_prefix written before every key (what
// torch's PrefixStores in front of that store add: empty, or ending in "/"),
// then connects the group: the same protocol as
// python/godist/_rendezvous.py, with no call back into Python.
//
//export godist_pg_rendezvous_store
func godist_pg_rendezvous_store(pgh, storeh C.uint64_t, prefix unsafe.Pointer, prefixLen C.int64_t, timeoutMs C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	pg, err := lookup[*libgodist.ProcessGroup](uint64(pgh))
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	e, err := storeOf(storeh)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	p, err := keyAt(prefix, prefixLen)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	s := e.s
	if p != "" {
		if !strings.HasSuffix(p, "/") {
			return finish(invalidArg("rendezvous key prefix %q must end in \"/\"", p), errbuf, errlen)
		}
		ps, err := store.NewPrefixStore(strings.TrimSuffix(p, "/"), s)
		if err != nil {
			return finish(e.fail(err), errbuf, errlen)
		}
		defer ps.Close()
		s = ps
	}
	if timeoutMs <= 0 {
		return finish(invalidArg("rendezvous timeout %dms must be positive", timeoutMs), errbuf, errlen)
	}
	return finish(pg.RendezvousStore(context.Background(), s, time.Duration(timeoutMs)*time.Millisecond), errbuf, errlen)
}
