package main

/*
#include "godist.h"
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
	"unsafe"

	"github.com/godist/godist/auth"
	"github.com/godist/godist/libgodist/glog"
	"github.com/godist/godist/store"
)

// Stores (package store) through the C ABI.
//
// Handles: godist_tcpstore_create, godist_filestore_create,
// godist_hashstore_create, godist_prefixstore_create and godist_store_clone
// return a store handle; every godist_store_* function takes one;
// godist_store_close closes the store and releases the handle. A standalone
// TCPStore server (godist_tcpserver_*, store_server.go) has its own handle.
//
// Arguments: a single key or value is (pointer, length) and may hold any
// bytes; lists of keys or values are godist_buf arrays. Nothing the caller
// passes is kept after the call returns.
//
// Returned values (get, compare_set, queue_pop, multi_get, list_keys) are
// written to C.malloc'd memory: *out receives the pointer (NULL for an empty
// result) and *outlen its length; the caller releases it with
// godist_store_free. A two-call "ask for the size, then copy" pattern does
// not fit here: a second get may see another value, and queue_pop cannot be
// repeated. List results are packed as records of an int64 (little-endian)
// length followed by that many bytes, in order.
//
// Timeouts: timeout_ms < 0 means the store's own timeout (set_timeout); a
// value >= 0 bounds this call, where 0 means what a zero timeout means for
// the store: fail at once unless ready (TCPStore), no limit (FileStore,
// HashStore, and PrefixStores over them), as in torch.
//
// Errors cross as *storeError (see below), whose message follows torch's
// wording, so torch-style regexes match: a timed-out wait reads
// "wait timeout after 100ms, keys: /k1, /k2" (TCPStore keys as on the wire,
// with their "/"), and Python raises torch.distributed.DistStoreError.

// keysOf copies a godist_buf array of keys into strings.
func keysOf(p *C.godist_buf, n C.int32_t) ([]string, error) {
	views, err := listOf(p, n, "keys")
	if err != nil {
		return nil, invalidArg("%v", err)
	}
	keys := make([]string, len(views))
	for i, v := range views {
		keys[i] = string(v)
	}
	return keys, nil
}

// ----- constructors ------------------------------------------------------

// godist_tcpstore_create connects to the TCPStore server at host:port,
// first starting one in this process when is_master (listening on all
// interfaces at port, 0 for an ephemeral port, or on listen_fd when >= 0,
// which the server then owns). world_size > 0 registers this client under
// "init/"; a master with wait_for_workers then waits for world_size
// registrations. legacy_server marks a torch classic (use_libuv=False)
// server: queue calls then fail without being sent. timeout_ms is the
// store's timeout (0: waits fail at once; connecting and waiting for workers
// then use the default of 300 s).
//
//export godist_tcpstore_create
func godist_tcpstore_create(host *C.char, port C.int32_t, worldSize C.int64_t, isMaster, waitForWorkers C.int32_t,
	listenFd C.int32_t, legacyServer C.int32_t, timeoutMs C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if out == nil {
		return finish(invalidArg("godist_tcpstore_create: NULL out"), errbuf, errlen)
	}
	if port < 0 || port > 65535 {
		return finish(invalidArg("TCPStore port %d is out of range", port), errbuf, errlen)
	}
	opts := store.TCPStoreOptions{Host: goString(host), Port: int(port), IsMaster: isMaster != 0,
		WorldSize: int(max(worldSize, 0)), NoWaitForWorkers: waitForWorkers == 0, LegacyServer: legacyServer != 0,
		Timeout: time.Duration(max(timeoutMs, 0)) * time.Millisecond, Key: auth.Current(auth.Store),
		Server: store.ServerOptions{Warnf: glog.Warnf}}
	if isMaster != 0 && listenFd >= 0 {
		f := os.NewFile(uintptr(listenFd), "master_listen_fd")
		ln, err := net.FileListener(f) // dups the descriptor
		f.Close()
		if err != nil {
			return finish(storeFail(fmt.Errorf("godist: master_listen_fd %d: %w", listenFd, err), true), errbuf, errlen)
		}
		opts.Server.Listener = ln
	}
	s, err := store.NewTCPStore(context.Background(), opts)
	if err != nil {
		if opts.Server.Listener != nil {
			opts.Server.Listener.Close() // the server may have closed it already
		}
		return finish(storeFail(err, true), errbuf, errlen)
	}
	if timeoutMs == 0 {
		s.SetTimeout(0)
	}
	putHandle(s, out)
	return statusOK
}

// godist_tcpstore_port writes the server port of a TCPStore (the bound port
// when this store started the server on port 0).
//
//export godist_tcpstore_port
func godist_tcpstore_port(h C.uint64_t, out *C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		t, ok := e.s.(*store.TCPStore)
		if !ok || out == nil {
			return invalidArg("godist_tcpstore_port: handle %d is not a TCPStore, or NULL out", h)
		}
		*out = C.int32_t(t.Port())
		return nil
	})
}

// godist_filestore_create opens the FileStore in path, registering this
// opener like torch's FileStore(path, num_workers) does (num_workers < 0:
// the file is never removed). timeout_ms > 0 sets the store's timeout
// (default 300 s); 0 means no timeout.
//
//export godist_filestore_create
func godist_filestore_create(path *C.char, numWorkers C.int32_t, timeoutMs C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if out == nil || path == nil {
		return finish(invalidArg("godist_filestore_create: NULL path or out"), errbuf, errlen)
	}
	s, err := store.NewFileStore(context.Background(), C.GoString(path), int(numWorkers))
	if err != nil {
		return finish(storeFail(err, false), errbuf, errlen)
	}
	if timeoutMs >= 0 {
		s.SetTimeout(time.Duration(timeoutMs) * time.Millisecond)
	}
	putHandle(s, out)
	return statusOK
}

// godist_hashstore_create makes an in-process HashStore with the given
// timeout (0: no timeout).
//
//export godist_hashstore_create
func godist_hashstore_create(timeoutMs C.int64_t, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if out == nil {
		return finish(invalidArg("godist_hashstore_create: NULL out"), errbuf, errlen)
	}
	putHandle(store.NewHashStore(time.Duration(max(timeoutMs, 0))*time.Millisecond), out)
	return statusOK
}

// godist_prefixstore_create makes a PrefixStore(prefix, inner): key k
// becomes prefix + "/" + k. Closing it does not close inner, which must stay
// open as long as the PrefixStore is used.
//
//export godist_prefixstore_create
func godist_prefixstore_create(prefix unsafe.Pointer, prefixLen C.int64_t, inner C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	if out == nil {
		return finish(invalidArg("godist_prefixstore_create: NULL out"), errbuf, errlen)
	}
	p, err := keyAt(prefix, prefixLen)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	e, err := storeOf(inner)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	ps, err := store.NewPrefixStore(p, e.s)
	if err != nil {
		return finish(e.fail(err), errbuf, errlen)
	}
	putHandle(ps, out)
	return statusOK
}

// godist_store_clone opens a new handle on the same store (a new connection
// for TCPStore, a new opener of the file for FileStore).
//
//export godist_store_clone
func godist_store_clone(h C.uint64_t, out *C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		if out == nil {
			return invalidArg("godist_store_clone: NULL out")
		}
		ctx, cancel := store.CallContext(e.s, -1)
		defer cancel()
		c, err := e.s.Clone(ctx)
		if err != nil {
			return err
		}
		putHandle(c, out)
		return nil
	})
}

// godist_store_close closes the store and releases its handle.
//
//export godist_store_close
func godist_store_close(h C.uint64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	e, err := storeOf(h)
	if err != nil {
		return finish(err, errbuf, errlen)
	}
	handles.drop(uint64(h))
	return finish(e.fail(e.s.Close()), errbuf, errlen)
}

// godist_store_free releases memory returned by a godist_store_* call.
//
//export godist_store_free
func godist_store_free(p unsafe.Pointer) { C.free(p) }

// ----- operations --------------------------------------------------------

//export godist_store_set
func godist_store_set(h C.uint64_t, key unsafe.Pointer, keyLen C.int64_t, val unsafe.Pointer, valLen C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		k, err := keyAt(key, keyLen)
		if err != nil {
			return err
		}
		v, err := bytesAt(val, valLen, "value")
		if err != nil {
			return err
		}
		return e.s.Set(context.Background(), k, v)
	})
}

//export godist_store_get
func godist_store_get(h C.uint64_t, key unsafe.Pointer, keyLen C.int64_t, timeoutMs C.int64_t, out *unsafe.Pointer, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		k, err := keyAt(key, keyLen)
		if err != nil {
			return err
		}
		ctx, cancel, err := store.WaitContext(e.s, timeout(timeoutMs), "get", []string{k})
		if err != nil {
			return err
		}
		defer cancel()
		v, err := e.s.Get(ctx, k)
		if err != nil {
			return store.Requested(err, timeout(timeoutMs))
		}
		return putBytes(v, out, outlen)
	})
}

//export godist_store_add
func godist_store_add(h C.uint64_t, key unsafe.Pointer, keyLen C.int64_t, delta C.int64_t, out *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		k, err := keyAt(key, keyLen)
		if err != nil {
			return err
		}
		n, err := e.s.Add(context.Background(), k, int64(delta))
		if err == nil && out != nil {
			*out = C.int64_t(n)
		}
		return err
	})
}

//export godist_store_compare_set
func godist_store_compare_set(h C.uint64_t, key unsafe.Pointer, keyLen C.int64_t, expected unsafe.Pointer, expectedLen C.int64_t,
	desired unsafe.Pointer, desiredLen C.int64_t, out *unsafe.Pointer, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		k, err := keyAt(key, keyLen)
		if err != nil {
			return err
		}
		exp, err := bytesAt(expected, expectedLen, "expected")
		if err != nil {
			return err
		}
		des, err := bytesAt(desired, desiredLen, "desired")
		if err != nil {
			return err
		}
		v, err := e.s.CompareSet(context.Background(), k, exp, des)
		if err != nil {
			return err
		}
		return putBytes(v, out, outlen)
	})
}

//export godist_store_check
func godist_store_check(h C.uint64_t, keys *C.godist_buf, n C.int32_t, out *C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		ks, err := keysOf(keys, n)
		if err != nil {
			return err
		}
		ok, err := e.s.Check(context.Background(), ks)
		if err == nil && out != nil {
			*out = C.int32_t(boolInt(ok))
		}
		return err
	})
}

//export godist_store_wait
func godist_store_wait(h C.uint64_t, keys *C.godist_buf, n C.int32_t, timeoutMs C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		ks, err := keysOf(keys, n)
		if err != nil {
			return err
		}
		ctx, cancel, err := store.WaitContext(e.s, timeout(timeoutMs), "wait", ks)
		if err != nil {
			return err
		}
		defer cancel()
		return store.Requested(e.s.Wait(ctx, ks), timeout(timeoutMs))
	})
}

//export godist_store_delete_key
func godist_store_delete_key(h C.uint64_t, key unsafe.Pointer, keyLen C.int64_t, out *C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		k, err := keyAt(key, keyLen)
		if err != nil {
			return err
		}
		ok, err := e.s.DeleteKey(context.Background(), k)
		if err == nil && out != nil {
			*out = C.int32_t(boolInt(ok))
		}
		return err
	})
}

//export godist_store_num_keys
func godist_store_num_keys(h C.uint64_t, out *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		n, err := e.s.NumKeys(context.Background())
		if err == nil && out != nil {
			*out = C.int64_t(n)
		}
		return err
	})
}

//export godist_store_append
func godist_store_append(h C.uint64_t, key unsafe.Pointer, keyLen C.int64_t, val unsafe.Pointer, valLen C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		k, err := keyAt(key, keyLen)
		if err != nil {
			return err
		}
		v, err := bytesAt(val, valLen, "value")
		if err != nil {
			return err
		}
		return e.s.Append(context.Background(), k, v)
	})
}

// godist_store_multi_get waits for all keys (one deadline) and returns their
// values as packed records (see the top of this file).
//
//export godist_store_multi_get
func godist_store_multi_get(h C.uint64_t, keys *C.godist_buf, n C.int32_t, timeoutMs C.int64_t, out *unsafe.Pointer, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		ks, err := keysOf(keys, n)
		if err != nil {
			return err
		}
		ctx, cancel, err := store.WaitContext(e.s, timeout(timeoutMs), "multi_get", ks)
		if err != nil {
			return err
		}
		defer cancel()
		vs, err := e.s.MultiGet(ctx, ks)
		if err != nil {
			return store.Requested(err, timeout(timeoutMs))
		}
		return putList(vs, out, outlen)
	})
}

//export godist_store_multi_set
func godist_store_multi_set(h C.uint64_t, keys *C.godist_buf, vals *C.godist_buf, n C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		ks, err := keysOf(keys, n)
		if err != nil {
			return err
		}
		vs, err := listOf(vals, n, "values")
		if err != nil {
			return invalidArg("%v", err)
		}
		if vs == nil {
			vs = [][]byte{}
		}
		return e.s.MultiSet(context.Background(), ks, vs)
	})
}

// godist_store_list_keys returns the store's keys as packed records.
//
//export godist_store_list_keys
func godist_store_list_keys(h C.uint64_t, out *unsafe.Pointer, outlen *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		ks, err := e.s.ListKeys(context.Background())
		if err != nil {
			return err
		}
		items := make([][]byte, len(ks))
		for i, k := range ks {
			items[i] = []byte(k)
		}
		return putList(items, out, outlen)
	})
}

//export godist_store_queue_push
func godist_store_queue_push(h C.uint64_t, key unsafe.Pointer, keyLen C.int64_t, val unsafe.Pointer, valLen C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		k, err := keyAt(key, keyLen)
		if err != nil {
			return err
		}
		v, err := bytesAt(val, valLen, "value")
		if err != nil {
			return err
		}
		return e.s.QueuePush(context.Background(), k, v)
	})
}

// godist_store_queue_pop pops the head of the queue key. With block it
// waits (timeout_ms as above) and a timeout is an error; without, an empty
// queue is not an error: *found is set to 0 (torch raises QueueEmptyError).
//
//export godist_store_queue_pop
func godist_store_queue_pop(h C.uint64_t, key unsafe.Pointer, keyLen C.int64_t, block C.int32_t, timeoutMs C.int64_t,
	out *unsafe.Pointer, outlen *C.int64_t, found *C.int32_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		k, err := keyAt(key, keyLen)
		if err != nil {
			return err
		}
		if found == nil {
			return invalidArg("godist_store_queue_pop: NULL found")
		}
		ctx, cancel := store.CallContext(e.s, -1) // a non-blocking pop does not wait
		if block != 0 {
			cancel()
			if ctx, cancel, err = store.WaitContext(e.s, timeout(timeoutMs), "queue_pop", []string{k}); err != nil {
				return err
			}
		}
		defer cancel()
		v, err := e.s.QueuePop(ctx, k, block != 0)
		if block == 0 && errors.Is(err, store.ErrNotFound) {
			*found = 0
			return putBytes(nil, out, outlen)
		}
		if err != nil {
			return store.Requested(err, timeout(timeoutMs))
		}
		*found = 1
		return putBytes(v, out, outlen)
	})
}

//export godist_store_queue_len
func godist_store_queue_len(h C.uint64_t, key unsafe.Pointer, keyLen C.int64_t, out *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		k, err := keyAt(key, keyLen)
		if err != nil {
			return err
		}
		n, err := e.s.QueueLen(context.Background(), k)
		if err == nil && out != nil {
			*out = C.int64_t(n)
		}
		return err
	})
}

// godist_store_set_timeout sets the store's timeout (0: see the top of
// this file; negative values are invalid).
//
//export godist_store_set_timeout
func godist_store_set_timeout(h C.uint64_t, timeoutMs C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		if timeoutMs < 0 {
			return invalidArg("store timeout %dms must not be negative", timeoutMs)
		}
		e.s.SetTimeout(time.Duration(timeoutMs) * time.Millisecond)
		return nil
	})
}

//export godist_store_timeout
func godist_store_timeout(h C.uint64_t, out *C.int64_t, errbuf *C.char, errlen C.int32_t) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	return withStore(h, errbuf, errlen, func(e *storeEntry) error {
		if out != nil {
			*out = C.int64_t(e.s.Timeout().Milliseconds())
		}
		return nil
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
