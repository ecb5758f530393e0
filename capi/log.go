package main

/*
#include "godist.h"
*/
import "C"

import (
	"encoding/binary"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/godist/godist/libgodist/glog"
)

// godist_log_level sets the lowest level of the records Go keeps (Python
// logging's numbers: 10 DEBUG, 20 INFO, 30 WARNING, 40 ERROR; higher
// disables).
//
//export godist_log_level
func godist_log_level(level C.int32_t) {
	glog.SetLevel(glog.Level(level))
}

// godist_log_drain waits up to timeout_ms for log records and writes as
// many as fit in buf (capacity bytes), oldest first, each as a
// little-endian int32 level, an int32 length and the message's bytes; *n
// receives the number of bytes written. A record longer than the buffer is
// truncated.
//
//export godist_log_drain
func godist_log_drain(timeoutMs C.int64_t, buf unsafe.Pointer, capacity C.int64_t, n *C.int64_t) (rc C.int) {
	defer recoverTo(&rc, nil, 0)
	if buf == nil || n == nil || capacity < 9 {
		return statusInvalid
	}
	dst := unsafe.Slice((*byte)(buf), int(capacity))
	left := len(dst)
	recs := glog.Drain(time.Duration(timeoutMs)*time.Millisecond, func(r glog.Record) bool {
		if 8+len(r.Msg) > left {
			return false
		}
		left -= 8 + len(r.Msg)
		return true
	})
	off := 0
	for _, r := range recs {
		msg := r.Msg[:min(len(r.Msg), len(dst)-off-8)]
		binary.LittleEndian.PutUint32(dst[off:], uint32(r.Level))
		binary.LittleEndian.PutUint32(dst[off+4:], uint32(len(msg)))
		off += 8 + copy(dst[off+8:], msg)
	}
	*n = C.int64_t(off)
	return statusOK
}

var dumpSignals struct {
	sync.Mutex
	on map[syscall.Signal]bool
}

// godist_dump_on_signal has every live group's snapshot logged (at
// WARNING) whenever the process receives signal signo, however busy the
// Python side is: a Go goroutine takes the signal, so a thread stuck in a
// collective does not delay it. Asking twice for one signal is harmless.
//
//export godist_dump_on_signal
func godist_dump_on_signal(signo C.int32_t) (rc C.int) {
	defer recoverTo(&rc, nil, 0)
	sig := syscall.Signal(signo)
	if signo <= 0 || signo >= 65 || sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
		return statusInvalid
	}
	dumpSignals.Lock()
	defer dumpSignals.Unlock()
	if dumpSignals.on[sig] {
		return statusOK
	}
	if dumpSignals.on == nil {
		dumpSignals.on = map[syscall.Signal]bool{}
	}
	dumpSignals.on[sig] = true
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sig)
	go func() {
		for range ch {
			dumpGroups()
		}
	}()
	return statusOK
}

// dumpGroups logs the snapshot of every live group.
func dumpGroups() {
	groups := liveGroups()
	if len(groups) == 0 {
		glog.Logf(glog.Warning, "godist: state dump: no live groups")
	}
	for _, pg := range groups {
		glog.Logf(glog.Warning, "%s", pg.State())
	}
}
