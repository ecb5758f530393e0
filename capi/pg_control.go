package main

/*
#include "godist.h"
*/
import "C"

import (
	"time"

	"github.com/godist/godist/libgodist"
)

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
