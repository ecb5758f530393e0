"""Loads libgodist.so and declares every exported function.

``_DECLS`` is the single table of C signatures (argtypes and restype). Each
function whose last two parameters are the error buffer is wrapped so that
callers do not pass it: ``lib.allreduce(...)`` calls ``godist_allreduce`` with
a thread-local buffer and raises the exception from :mod:`godist._errors` on
failure. The library is loaded lazily (first use), refuses to run in a
forked child of the loading process, and checks the ABI version.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from ctypes import POINTER, c_char_p, c_double, c_int, c_int32, c_int64, c_uint64, c_void_p

from . import _errors

ABI_VERSION = 6
# GODIST_ASYNC (capi/godist.h): an asynchronous op, whose handle Go pushes
# to the completion queue once watched. Without it an op is synchronous.
ASYNC = 1
MESSAGE_LEN = 4096


class GodistBuf(ctypes.Structure):
    """C struct godist_buf: a pointer and a length in bytes."""

    _fields_ = [("data", c_void_p), ("nbytes", c_int64)]


class GodistCall(ctypes.Structure):
    """C struct godist_call: the arguments of one op on one or two buffers
    (capi/call.go)."""

    _fields_ = [("pg", c_uint64), ("data", c_void_p), ("nbytes", c_int64), ("arg0", c_int64), ("arg1", c_int64),
                ("timeout_ms", c_int64), ("flags", c_int64), ("work", c_uint64), ("errbuf", c_void_p),
                ("errlen", c_int64), ("out", c_void_p), ("outbytes", c_int64)]


class ErrorBuf(ctypes.Structure):
    """The error buffer every call takes: C struct godist_error, then the
    message (capi/godist.h). Go fills it in when a call fails."""

    _fields_ = [("status", c_int32), ("cause", c_int32), ("seq", c_int64), ("peer", c_int32), ("nmissing", c_int32),
                ("after_ms", c_int64), ("missing", c_int32 * 64), ("op", ctypes.c_char * 32),
                ("group", ctypes.c_char * 128), ("message", ctypes.c_char * MESSAGE_LEN)]


ERRLEN = ctypes.sizeof(ErrorBuf)


def _layout() -> list[int]:
    """godist_abi_layout's numbers for the structs declared here."""
    out = [ctypes.sizeof(GodistBuf), GodistBuf.data.offset, GodistBuf.nbytes.offset, ctypes.sizeof(GodistCall)]
    out += [getattr(GodistCall, name).offset for name, _ in GodistCall._fields_]
    out.append(ErrorBuf.message.offset)  # sizeof(godist_error)
    out += [getattr(ErrorBuf, name).offset for name, _ in ErrorBuf._fields_[:-1]]
    out += [64, 32, 128, len(_errors.CAUSES), ASYNC]
    return out


# fill(view, 0, pg, data, nbytes, arg0, arg1, timeout_ms, flags) writes a
# godist_call block's inputs in one step (struct.error if one does not fit);
# fill_wait(view, WAIT_AT, timeout_ms, flags, work) those of call_work_wait;
# fill_out(view, OUT_AT, out, outbytes) the output of a two-buffer op.
fill = struct.Struct("=QQqqqqq").pack_into
fill_wait = struct.Struct("=qqQ").pack_into
fill_out = struct.Struct("=Qq").pack_into
WAIT_AT = GodistCall.timeout_ms.offset
OUT_AT = GodistCall.out.offset

_BUF = POINTER(GodistBuf)
_U64P = POINTER(c_uint64)
_ERR = [POINTER(ErrorBuf), c_int32]

# name: (restype, argtypes). Functions ending in _ERR take the error buffer.
_DECLS = {
    "godist_abi_version": (c_int32, []),
    "godist_abi_layout": (c_int32, [POINTER(c_int64), c_int32]),
    "godist_live_handles": (c_int64, []),
    "godist_gomaxprocs": (c_int32, []),
    "godist_runtime_stats": (None, [POINTER(c_int64), POINTER(c_int64)]),
    # process groups
    "godist_pg_create": (c_int, [c_int32, c_int32, c_char_p, c_int64, c_char_p, c_char_p, _U64P] + _ERR),
    "godist_pg_info": (c_int, [c_uint64, POINTER(c_int32)] + _ERR),
    "godist_pg_record": (c_int, [c_uint64, c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    "godist_pg_connect": (c_int, [c_uint64, _BUF, c_int32, c_int64] + _ERR),
    "godist_pg_close": (c_int, [c_uint64] + _ERR),
    "godist_pg_abort": (c_int, [c_uint64] + _ERR),
    "godist_pg_seq": (c_int, [c_uint64, _U64P] + _ERR),
    # collectives: ..., timeout_ms, flags (0 or ASYNC), *work, err, errlen
    "godist_allreduce": (c_int, [c_uint64, _BUF, c_int32, c_int32, c_double, c_int64, c_int32, _U64P] + _ERR),
    "godist_broadcast": (c_int, [c_uint64, _BUF, c_int32, c_int64, c_int32, _U64P] + _ERR),
    "godist_reduce": (c_int, [c_uint64, _BUF, c_int32, c_int32, c_int32, c_double, c_int64, c_int32, _U64P] + _ERR),
    "godist_allgather": (c_int, [c_uint64, _BUF, _BUF, c_int32, c_int64, c_int32, _U64P] + _ERR),
    "godist_gather": (c_int, [c_uint64, _BUF, _BUF, c_int32, c_int32, c_int64, c_int32, _U64P] + _ERR),
    "godist_reduce_scatter": (c_int, [c_uint64, _BUF, c_int32, _BUF, c_int32, c_int32, c_double, c_int64, c_int32, _U64P] + _ERR),
    "godist_scatter": (c_int, [c_uint64, _BUF, c_int32, _BUF, c_int32, c_int64, c_int32, _U64P] + _ERR),
    "godist_alltoall": (c_int, [c_uint64, _BUF, c_int32, _BUF, c_int32, c_int64, c_int32, _U64P] + _ERR),
    "godist_barrier": (c_int, [c_uint64, c_int64, c_int32, _U64P] + _ERR),
    "godist_monitored_barrier": (c_int, [c_uint64, c_int64, c_int32, c_int32, _U64P] + _ERR),
    "godist_send": (c_int, [c_uint64, _BUF, c_int32, c_int64, c_int64, c_int32, _U64P] + _ERR),
    "godist_recv": (c_int, [c_uint64, _BUF, c_int32, c_int64, c_int64, c_int32, _U64P] + _ERR),
    # the same single-buffer ops with their arguments in a godist_call block
    # (call_block): the fast paths of process_group.py
    "godist_call_allreduce": (c_int, [c_void_p]),
    "godist_call_broadcast": (c_int, [c_void_p]),
    "godist_call_barrier": (c_int, [c_void_p]),
    "godist_call_send": (c_int, [c_void_p]),
    "godist_call_recv": (c_int, [c_void_p]),
    "godist_call_work_wait": (c_int, [c_void_p]),
    # two buffers, split evenly: all_gather_into_tensor, reduce_scatter_tensor,
    # all_to_all_single (capi/call_2buf.go)
    "godist_call_allgather": (c_int, [c_void_p]),
    "godist_call_reduce_scatter": (c_int, [c_void_p]),
    "godist_call_alltoall": (c_int, [c_void_p]),
    # works
    "godist_work_wait": (c_int, [c_uint64, c_int64, POINTER(c_int32)] + _ERR),
    "godist_work_free": (c_int, [c_uint64]),
    "godist_work_claim": (c_int, [c_uint64]),
    "godist_work_watch": (c_int, [c_uint64]),
    "godist_wait_any": (c_int, [c_int64, _U64P, c_int32, POINTER(c_int32)]),
    # ----- stores (capi/store.go; used by godist/store.py) -----
    # A key or value is (bytes, length). Returned values come back as a
    # malloc'd (void **out, int64 *outlen) that the caller releases with
    # store_free; lists are packed (int64 length, bytes) records.
    # timeout_ms < 0: the store's own timeout.
    "godist_tcpstore_create": (c_int, [c_char_p, c_int32, c_int64, c_int32, c_int32, c_int32, c_int32, c_int64,
                                       _U64P] + _ERR),
    "godist_tcpstore_port": (c_int, [c_uint64, POINTER(c_int32)] + _ERR),
    "godist_filestore_create": (c_int, [c_char_p, c_int32, c_int64, _U64P] + _ERR),
    "godist_hashstore_create": (c_int, [c_int64, _U64P] + _ERR),
    "godist_prefixstore_create": (c_int, [c_char_p, c_int64, c_uint64, _U64P] + _ERR),
    "godist_store_clone": (c_int, [c_uint64, _U64P] + _ERR),
    "godist_store_close": (c_int, [c_uint64] + _ERR),
    "godist_store_free": (None, [c_void_p]),
    "godist_store_set": (c_int, [c_uint64, c_char_p, c_int64, c_char_p, c_int64] + _ERR),
    "godist_store_get": (c_int, [c_uint64, c_char_p, c_int64, c_int64, POINTER(c_void_p), POINTER(c_int64)] + _ERR),
    "godist_store_add": (c_int, [c_uint64, c_char_p, c_int64, c_int64, POINTER(c_int64)] + _ERR),
    "godist_store_compare_set": (c_int, [c_uint64, c_char_p, c_int64, c_char_p, c_int64, c_char_p, c_int64,
                                         POINTER(c_void_p), POINTER(c_int64)] + _ERR),
    "godist_store_check": (c_int, [c_uint64, _BUF, c_int32, POINTER(c_int32)] + _ERR),
    "godist_store_wait": (c_int, [c_uint64, _BUF, c_int32, c_int64] + _ERR),
    "godist_store_delete_key": (c_int, [c_uint64, c_char_p, c_int64, POINTER(c_int32)] + _ERR),
    "godist_store_num_keys": (c_int, [c_uint64, POINTER(c_int64)] + _ERR),
    "godist_store_append": (c_int, [c_uint64, c_char_p, c_int64, c_char_p, c_int64] + _ERR),
    "godist_store_multi_get": (c_int, [c_uint64, _BUF, c_int32, c_int64, POINTER(c_void_p), POINTER(c_int64)] + _ERR),
    "godist_store_multi_set": (c_int, [c_uint64, _BUF, _BUF, c_int32] + _ERR),
    "godist_store_list_keys": (c_int, [c_uint64, POINTER(c_void_p), POINTER(c_int64)] + _ERR),
    "godist_store_queue_push": (c_int, [c_uint64, c_char_p, c_int64, c_char_p, c_int64] + _ERR),
    "godist_store_queue_pop": (c_int, [c_uint64, c_char_p, c_int64, c_int32, c_int64, POINTER(c_void_p),
                                       POINTER(c_int64), POINTER(c_int32)] + _ERR),
    "godist_store_queue_len": (c_int, [c_uint64, c_char_p, c_int64, POINTER(c_int64)] + _ERR),
    "godist_store_set_timeout": (c_int, [c_uint64, c_int64] + _ERR),
    "godist_store_timeout": (c_int, [c_uint64, POINTER(c_int64)] + _ERR),
    "godist_tcpserver_create": (c_int, [c_char_p, c_int32, _U64P] + _ERR),
    "godist_tcpserver_port": (c_int, [c_uint64, POINTER(c_int32)] + _ERR),
    "godist_tcpserver_close": (c_int, [c_uint64] + _ERR),
    "godist_pg_rendezvous_store": (c_int, [c_uint64, c_uint64, c_char_p, c_int64, c_int64] + _ERR),
}

_lock = threading.Lock()
_lib = None
_loaded_pid = None
_forked = False
_tls = threading.local()


def _after_fork_in_child():
    global _forked
    if _lib is not None:
        _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def library_path() -> str:
    """Where libgodist.so is loaded from (GODIST_LIBRARY overrides)."""
    env = os.environ.get("GODIST_LIBRARY")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libgodist.so")


def _errbuf():
    b = getattr(_tls, "errbuf", None)
    if b is None:
        b = _tls.errbuf = ErrorBuf()
    return b


class _Raw:
    """The bare ctypes functions, by short name."""


def call_block():
    """This thread's godist_call block as (view, address, block, error
    buffer): ``fill(view, 0, ...)`` writes its inputs, the raw call_* function
    takes the address, ``block.work`` holds the handle afterwards and the
    error buffer the message of a failure."""
    c = getattr(_tls, "call", None)
    if c is None:
        eb = _errbuf()
        blk = GodistCall(errbuf=ctypes.addressof(eb), errlen=ERRLEN)
        c = _tls.call = (memoryview(blk).cast("B"), ctypes.addressof(blk), blk, eb)
    return c


class _Lib:
    """Attribute access returns the wrapped function without the godist_ prefix."""

    def __init__(self, cdll):
        self._cdll = cdll
        # raw: the bare ctypes functions, for the synchronous fast paths that
        # pass their arguments in a godist_call block (see call_block) and
        # check _forked themselves.
        self.raw = _Raw()
        for name, (restype, argtypes) in _DECLS.items():
            fn = getattr(cdll, name)
            fn.restype = restype
            fn.argtypes = argtypes
            short = name[len("godist_"):]
            setattr(self.raw, short, fn)
            if argtypes[-2:] == _ERR:
                setattr(self, short, _wrap(fn))
            else:
                setattr(self, short, _guard(fn))


def _guard(fn):
    def call(*args):
        if _forked:
            raise _forked_error()
        return fn(*args)

    call.__name__ = fn.__name__
    return call


def _wrap(fn):
    check = _errors.check

    def call(*args):
        if _forked:
            raise _forked_error()
        eb = _errbuf()
        return check(fn(*args, eb, ERRLEN), eb)

    call.__name__ = fn.__name__
    return call


def _forked_error():
    return _errors.GodistForkError(
        "godist: this process was forked from the process that loaded godist; the Go runtime "
        "cannot run in a forked child. Use the 'spawn' or 'forkserver' start method "
        "(e.g. DataLoader(multiprocessing_context='spawn')) for workers that use godist.",
        _errors.FORKED,
    )


def load() -> _Lib:
    """Load the library once (thread-safe) and return the wrapped table."""
    global _lib, _loaded_pid
    if _forked:
        raise _forked_error()
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = library_path()
            if not os.path.exists(path):
                raise ImportError(
                    f"godist: {path} not found; build it with `make lib` or reinstall with `pip install .` "
                    "(needs a Go toolchain)")
            cdll = ctypes.CDLL(path)
            ver = cdll.godist_abi_version()
            if ver != ABI_VERSION:
                raise ImportError(f"godist: {path} has ABI version {ver}, this package needs {ABI_VERSION}; rebuild it")
            _check_layout(cdll, path)
            _lib = _Lib(cdll)
            _loaded_pid = os.getpid()
    return _lib


def _check_layout(cdll, path):
    """Refuse a library whose structs are laid out other than declared here."""
    fn = cdll.godist_abi_layout
    fn.restype, fn.argtypes = c_int32, [POINTER(c_int64), c_int32]
    want = _layout()
    got = (c_int64 * len(want))()
    n = fn(got, len(want))
    if n != len(want) or list(got) != want:
        raise ImportError(f"godist: {path} lays out its C structs as {list(got)[:n]}, this package declares {want}; "
                          "capi/godist.h and python/godist/_lib.py disagree")


def bufs(pairs):
    """Build a C array of godist_buf from (pointer, nbytes) pairs."""
    if len(pairs) == 1:  # one struct passes as a pointer to it
        return GodistBuf(*pairs[0])
    arr = (GodistBuf * max(1, len(pairs)))()
    for i, (p, n) in enumerate(pairs):
        arr[i].data = p
        arr[i].nbytes = n
    return arr
