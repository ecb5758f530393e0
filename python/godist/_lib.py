"""Loads libgodist.so and declares every exported function.

``_DECLS`` is the single table of C signatures (argtypes and restype), and
the ctypes structs below mirror capi/godist.h (checked against the library's
own layout at load). An op's entry point takes one :class:`GodistOp`:
:func:`run` calls it and raises the exception from :mod:`godist._errors` on
failure. Each other function whose last two parameters are the error buffer
is wrapped so that callers do not pass it: ``lib.pg_seq(...)`` calls
``godist_pg_seq`` with a thread-local buffer. The library is loaded lazily (first use), refuses to run in a
forked child of the loading process, and checks the ABI version, the structs'
layout and the tables of :func:`facts`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import struct
import threading
from ctypes import POINTER, c_char_p, c_double, c_int, c_int32, c_int64, c_uint64, c_void_p

from . import _errors, _log, _types

ABI_VERSION = 14
# GODIST_ASYNC (capi/godist.h): an asynchronous op, whose handle Go pushes
# to the completion queue once watched. Without it an op is synchronous.
ASYNC = 1
# GODIST_CUDA: the op's buffers are CUDA memory on GodistOp.device, enqueued
# on GodistOp.stream (capi/device.go).
CUDA = 2
# GODIST_OP_* (capi/godist.h): an op block's op_code for godist_device_batch.
OP_CODES = {name: i for i, name in enumerate(("allreduce", "broadcast", "reduce", "allgather", "gather",
                                               "reduce_scatter", "scatter", "alltoall", "send", "recv"))}
MESSAGE_LEN = 4096


class GodistBuf(ctypes.Structure):
    """C struct godist_buf: a pointer and a length in bytes."""

    _fields_ = [("data", c_void_p), ("nbytes", c_int64)]


class GodistOp(ctypes.Structure):
    """C struct godist_op: the arguments of one op (capi/godist.h says which
    op reads which field)."""

    _fields_ = [("pg", c_uint64), ("buf", GodistBuf), ("timeout_ms", c_int64), ("flags", c_int32), ("dtype", c_int32),
                ("reduce_op", c_int32), ("root", c_int32), ("peer", c_int32), ("wait_all", c_int32), ("tag", c_int64),
                ("factor", c_double), ("out", GodistBuf), ("ins", POINTER(GodistBuf)), ("outs", POINTER(GodistBuf)),
                ("nins", c_int32), ("nouts", c_int32), ("work", c_uint64), ("source", c_int32), ("errlen", c_int32),
                ("errbuf", c_void_p), ("stream", c_uint64), ("device", c_int32), ("op_code", c_int32),
                ("detail", ctypes.c_char_p)]


class ErrorBuf(ctypes.Structure):
    """The error buffer every call takes: C struct godist_error, then the
    message (capi/godist.h). Go fills it in when a call fails."""

    _fields_ = [("status", c_int32), ("cause", c_int32), ("seq", c_int64), ("peer", c_int32), ("nmissing", c_int32),
                ("after_ms", c_int64), ("missing", c_int32 * 64), ("op", ctypes.c_char * 32),
                ("group", ctypes.c_char * 128), ("message", ctypes.c_char * MESSAGE_LEN)]


ERRLEN = ctypes.sizeof(ErrorBuf)


def _layout() -> list[int]:
    """godist_abi_layout's numbers for the structs declared here."""
    out = [ctypes.sizeof(GodistBuf), GodistBuf.data.offset, GodistBuf.nbytes.offset, ctypes.sizeof(GodistOp)]
    out += [getattr(GodistOp, name).offset for name, _ in GodistOp._fields_]
    out.append(ErrorBuf.message.offset)  # sizeof(godist_error)
    out += [getattr(ErrorBuf, name).offset for name, _ in ErrorBuf._fields_[:-1]]
    out += [64, 32, 128, len(_errors.CAUSES), ASYNC, CUDA]
    return out


# The fast paths (godist._fast) write this thread's block (op_block) with
# struct.pack_into, which costs less than setting ctypes fields one by one:
# fill(view, 0, pg, data, nbytes, timeout_ms, flags, dtype, reduce_op, root,
# peer) the fields up to peer (struct.error if one does not fit),
# fill_tag(view, TAG_AT, tag) and fill_out(view, OUT_AT, out, outbytes).
fill = struct.Struct("=QQqqiiiii").pack_into
fill_tag = struct.Struct("=q").pack_into
fill_out = struct.Struct("=Qq").pack_into
TAG_AT = GodistOp.tag.offset
OUT_AT = GodistOp.out.offset
assert struct.calcsize("=QQqqiiiii") == GodistOp.wait_all.offset

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
    # the tables Go defines and Python reads (capi/facts.go): JSON into (buf, capacity, *outlen)
    "godist_facts": (c_int, [c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    # process groups
    "godist_pg_create": (c_int, [c_int32, c_int32, c_char_p, c_int64, c_char_p, c_char_p, c_char_p, c_char_p, _U64P]
                         + _ERR),
    "godist_pg_info": (c_int, [c_uint64, POINTER(c_int32)] + _ERR),
    "godist_pg_record": (c_int, [c_uint64, c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    "godist_pg_connect": (c_int, [c_uint64, _BUF, c_int32, c_int64] + _ERR),
    "godist_pg_close": (c_int, [c_uint64] + _ERR),
    "godist_pg_abort": (c_int, [c_uint64] + _ERR),
    "godist_pg_seq": (c_int, [c_uint64, _U64P] + _ERR),
    "godist_pg_state": (c_int, [c_uint64, c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    "godist_pg_set_timeout": (c_int, [c_uint64, c_int64] + _ERR),
    "godist_pg_error": (c_int, [c_uint64, POINTER(c_int32)] + _ERR),
    "godist_pg_split": (c_int, [c_uint64, POINTER(c_int32), c_int32, c_char_p, c_int64, _U64P] + _ERR),
    "godist_pg_flight": (c_int, [c_uint64, c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    "godist_pg_set_flight": (c_int, [c_uint64, c_int64] + _ERR),
    # logging (capi/log.go; used by godist/_log.py)
    "godist_log_level": (None, [c_int32]),
    "godist_log_drain": (c_int, [c_int64, c_void_p, c_int64, POINTER(c_int64)]),
    "godist_dump_on_signal": (c_int, [c_int32]),
    # authentication (capi/auth.go): the job secret for what is created next
    "godist_set_secret": (None, [c_char_p, c_int64]),
    # host report (capi/info.go; used by godist/info/): JSON into (buf, capacity, *outlen)
    "godist_build_info": (c_int, [c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    "godist_probe_shm": (c_int, [c_char_p, c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    "godist_probe_tcp": (c_int, [c_char_p, c_char_p, c_char_p, c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    # ops (capi/ops.go): one entry point each, taking a godist_op's address
    **{"godist_" + op: (c_int, [c_void_p]) for op in (
        "allreduce", "broadcast", "reduce", "allgather", "gather", "reduce_scatter", "scatter", "alltoall", "barrier",
        "monitored_barrier", "send", "recv")},
    # the device path (capi/device.go; used by godist/_nccl.py)
    "godist_device_order": (c_int, [c_void_p]),
    "godist_device_batch": (c_int, [c_void_p, c_int32]),
    "godist_device_id": (c_int, [c_uint64, c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    "godist_device_open": (c_int, [c_uint64, c_int32, c_int32, c_char_p, c_int64] + _ERR),
    "godist_device_has": (c_int32, [c_uint64, c_int32]),
    "godist_nccl_info": (c_int, [c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    # MPI for bootstrap (capi/mpi.go): open (dir of the shims; JSON into buf, capacity, *outlen), blocking
    # broadcast on MPI_COMM_WORLD (buf, nbytes, root), finalize
    "godist_mpi_open": (c_int, [c_char_p, c_void_p, c_int64, POINTER(c_int64)] + _ERR),
    "godist_mpi_bcast": (c_int, [c_void_p, c_int64, c_int32] + _ERR),
    "godist_mpi_finalize": (c_int, _ERR),
    # works (capi/work.go)
    "godist_work_wait": (c_int, [c_void_p]),
    "godist_work_free": (c_int, [c_uint64]),
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
_facts: dict = {}
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


def op_block():
    """This thread's godist_op block for the fast paths, as (view, address,
    block, error buffer): ``fill(view, 0, ...)`` writes its leading fields,
    an op's entry point takes the address, ``block.work`` holds the handle
    afterwards and the error buffer the message of a failure. The fast paths
    never set its lists (ins, outs), so they stay empty."""
    c = getattr(_tls, "op", None)
    if c is None:
        eb = _errbuf()
        blk = GodistOp(errbuf=ctypes.addressof(eb), errlen=ERRLEN)
        c = _tls.op = (memoryview(blk).cast("B"), ctypes.addressof(blk), blk, eb)
    return c


def wait_block(slice_ms: int):
    """This thread's godist_op block for godist_work_wait, as (address,
    block, error buffer), waiting slice_ms per call: set ``block.work``, call
    ``work_wait(address)``, read ``block.source``."""
    c = getattr(_tls, "wait", None)
    if c is None:
        eb = _errbuf()
        blk = GodistOp(timeout_ms=slice_ms, errbuf=ctypes.addressof(eb), errlen=ERRLEN)
        c = _tls.wait = (ctypes.addressof(blk), blk, eb)
    return c


def run(fn, op: GodistOp) -> int:
    """Call op's entry point fn (a raw function of the table), raise its
    error, and return the work handle it stored (0: the op completed during
    the call)."""
    if _forked:
        raise _forked_error()
    eb = _errbuf()
    op.errbuf, op.errlen = ctypes.addressof(eb), ERRLEN
    rc = fn(ctypes.addressof(op))
    if rc != _errors.OK:
        raise _errors.from_buffer(rc, eb)
    return op.work


class _Lib:
    """Attribute access returns the wrapped function without the godist_ prefix."""

    def __init__(self, cdll):
        self._cdll = cdll
        # raw: the bare ctypes functions, for the ops' entry points (see run)
        # and the fast paths, which check _forked themselves.
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
            lib = _Lib(cdll)
            _facts.update(json.loads(read_bytes(lib.facts)))
            _check_facts(_facts, path)
            _lib = lib
            _loaded_pid = os.getpid()
            _log.setup(_lib)
    return _lib


_secret_lock = threading.Lock()


@contextlib.contextmanager
def secret(lib: _Lib, value: str | bytes | None = None):
    """Hold the job secret for the listener, store server or store client
    created in this block: ``value`` if given, else GODIST_SECRET as
    os.environ has it now (Go reads the environment only at load)."""
    if value is None:
        value = os.environ.get("GODIST_SECRET", "")
    if not isinstance(value, (str, bytes)):
        raise TypeError(f"godist: the secret must be str or bytes, got {type(value).__name__}")
    b = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    with _secret_lock:
        lib.set_secret(b or None, len(b))
        try:
            yield
        finally:
            lib.set_secret(None, 0)


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


def facts() -> dict:
    """godist_facts (capi/facts.go), read once at load: the tables defined
    in Go that Python uses too. ``status`` and ``causes`` (godist._errors'
    tables), ``dtypes`` and ``reduce_ops`` (godist._types' codes), checked
    at load; ``transports`` (the names GODIST_TRANSPORT accepts),
    ``rendezvous`` (the store keys, ``record_key`` with ``{gen}`` and
    ``{rank}``), ``nccl`` (``reduce_ops``: the reduce op codes NCCL applies
    to each dtype code it reduces; ``complex_ops``: those a complex tensor
    may be reduced with through its real view) and ``libraries`` (the names
    NCCL, the CUDA runtime and each MPI implementation's library are loaded
    by, in the order tried)."""
    load()
    return _facts


def _python_facts() -> dict:
    """The tables of _errors and _types as godist_facts spells them."""
    return {"status": {n: v for n, v in vars(_errors).items() if n.isupper() and type(v) is int},
            "causes": list(_errors.CAUSES),
            "dtypes": {str(d).removeprefix("torch."): c for d, c in _types.DTYPE_CODES.items()},
            "reduce_ops": {name: c for c, name in _types.OP_NAMES.items()}}


def _check_facts(go: dict, path):
    """Refuse a library whose status codes, causes, dtype or reduce op codes
    differ from godist._errors' and godist._types'."""
    for key, want in _python_facts().items():
        if go.get(key) != want:
            raise ImportError(f"godist: {path} numbers its {key} as {go.get(key)}, this package as {want}; "
                              "capi/ and python/godist/ disagree")


def buf_list(pairs):
    """A C array of godist_buf from (pointer, nbytes) pairs, as (array,
    length) for an op's ins/nins or outs/nouts."""
    arr = (GodistBuf * len(pairs))(*pairs)
    return ctypes.cast(arr, POINTER(GodistBuf)), len(pairs)


def bufs(pairs):
    """A C array of godist_buf from (pointer, nbytes) pairs, for the
    functions that take one (godist_pg_connect)."""
    return (GodistBuf * max(1, len(pairs)))(*pairs)


def read_bytes(fn, *args, size: int = 4096) -> bytes:
    """What a function that fills a caller's buffer returns (its last
    arguments: buffer, capacity, *length; capi's copyOut): called again with
    a buffer of the needed length when the first was too small."""
    buf, n = ctypes.create_string_buffer(size), c_int64()
    try:
        fn(*args, buf, len(buf), ctypes.byref(n))
    except ValueError:
        if n.value <= len(buf):
            raise
        buf = ctypes.create_string_buffer(n.value)
        fn(*args, buf, len(buf), ctypes.byref(n))
    return buf.raw[: n.value]
