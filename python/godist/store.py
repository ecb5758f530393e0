"""godist's key-value stores: ``torch.distributed.Store`` subclasses whose
work is done by the Go package ``store`` (through capi/store.go).

* :class:`TCPStore` speaks torch's TCPStore wire protocol: a godist client
  works against torch's server and torch's clients against a godist server.
* :class:`FileStore` reads and writes torch's FileStore file format, with the
  same locking and the same clean-up when the last opener closes.
* :class:`HashStore` is an in-process store; :class:`PrefixStore` a
  key-prefix view of another godist store.

They take torch's constructor arguments and have torch's method names, and
return ``bytes`` like torch. As Python subclasses of ``dist.Store`` they can
be passed anywhere torch takes a store (``init_process_group(store=...)``,
``dist.PrefixStore``); C++ callers reach them through torch's PythonStore
trampoline. When a godist process group finds one under torch's
PrefixStores, it does its whole rendezvous in Go (see ``_rendezvous.py``).

Lifetime: torch's C++ side keeps no Python reference to a Python store, so a
store that Python forgot would break the C++ wrappers still using it. godist
stores therefore stay alive until :meth:`close` (or interpreter exit, which
closes them, so a FileStore records its exit as torch's destructor does).

Timeouts: a call that takes no ``timeout`` uses the store's timeout
(:meth:`set_timeout`, also when torch sets it from C++, e.g. through a
``dist.PrefixStore``). 0 means what it means in torch: a TCPStore wait fails
at once, a FileStore or HashStore wait has no limit. A wait that times out raises
``torch.distributed.DistStoreError`` with torch's message,
``"wait timeout after 100ms, keys: /k"``.
"""

from __future__ import annotations

import atexit
import ctypes
import datetime
import threading

import torch.distributed as dist

from . import _lib

_DEFAULT_TIMEOUT = datetime.timedelta(seconds=300)

_live: dict[int, "_GoStore"] = {}
_live_lock = threading.Lock()


def _bytes(v) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, (list, tuple)):  # torch accepts a list of ints for a value
        return bytes(v)
    raise TypeError(f"store value must be bytes or str, got {type(v).__name__}")


def _key(k) -> bytes:
    if isinstance(k, str):
        return k.encode("utf-8")
    if isinstance(k, bytes):
        return k
    raise TypeError(f"store key must be str, got {type(k).__name__}")


def _ms(timeout) -> int:
    """A timedelta as milliseconds."""
    if isinstance(timeout, datetime.timedelta):
        return max(0, int(timeout.total_seconds() * 1000))
    raise TypeError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__}")


# The store's timeout lives in the C++ Store object, where torch's C++ code
# reads and sets it (e.g. PrefixStore.set_timeout reaches only that field), so
# blocking calls read it from there and pass it to Go explicitly.
_cxx_timeout = dist.Store.__dict__["timeout"].fget


def _take(p: ctypes.c_void_p, n: ctypes.c_int64) -> bytes:
    """Copy and free a value returned by Go."""
    if not n.value:
        return b""
    try:
        return ctypes.string_at(p.value, n.value)
    finally:
        _lib.load().store_free(p)


def _unpack(p: ctypes.c_void_p, n: ctypes.c_int64) -> list[bytes]:
    """Split packed (int64 length, bytes) records returned by Go."""
    raw = _take(p, n)
    out, off = [], 0
    while off < len(raw):
        m = int.from_bytes(raw[off:off + 8], "little")
        off += 8
        out.append(raw[off:off + m])
        off += m
    return out


def _bufs(items: list[bytes]):
    """A godist_buf array over items (which the caller keeps alive)."""
    return _lib.bufs([(ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value if b else None, len(b)) for b in items])


# Rendezvous probe (see resolve): a check() made with this thread's target
# set records the keys it receives instead of asking the store.
_probe = threading.local()
_PROBE_KEY = "godist/probe/key-prefix"


class _GoStore(dist.Store):
    """Common base: one Go store handle and every Store method."""

    _queues = True  # False where torch raises NotImplementedError for queues
    _queue_error = "queue support is not implemented."

    def _adopt(self, handle: int) -> None:
        self._h = handle
        self._closed = False
        with _live_lock:
            _live[id(self)] = self
        out = ctypes.c_int64()
        _lib.load().store_timeout(handle, ctypes.byref(out))
        dist.Store.set_timeout(self, datetime.timedelta(milliseconds=out.value))

    def _wait_ms(self, timeout=None) -> int:
        return _ms(_cxx_timeout(self) if timeout is None else timeout)

    def _clone_attrs(self, other: "_GoStore") -> None:
        """Copy the subclass's Python attributes to a clone."""

    # ----- lifetime -------------------------------------------------------
    def close(self) -> None:
        """Close the store (a TCPStore master also stops its server; a
        FileStore records its exit and removes the file if it is the last
        one). Idempotent. Other handles (clones, PrefixStores over it) are
        not closed, but a PrefixStore needs its inner store open."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        with _live_lock:
            _live.pop(id(self), None)
        _lib.load().store_close(self._h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def clone(self):
        """A new store object on the same data (a new connection for
        TCPStore, a new opener for FileStore); close it separately."""
        h = ctypes.c_uint64()
        _lib.load().store_clone(self._h, ctypes.byref(h))
        c = type(self).__new__(type(self))
        dist.Store.__init__(c)
        self._clone_attrs(c)
        c._adopt(h.value)
        return c

    # ----- key-value ------------------------------------------------------
    def set(self, key, value) -> None:
        k, v = _key(key), _bytes(value)
        _lib.load().store_set(self._h, k, len(k), v, len(v))

    def get(self, key) -> bytes:
        k = _key(key)
        p, n = ctypes.c_void_p(), ctypes.c_int64()
        _lib.load().store_get(self._h, k, len(k), self._wait_ms(), ctypes.byref(p), ctypes.byref(n))
        return _take(p, n)

    def add(self, key, value: int) -> int:
        k = _key(key)
        out = ctypes.c_int64()
        _lib.load().store_add(self._h, k, len(k), int(value), ctypes.byref(out))
        return out.value

    def compare_set(self, key, expected_value, desired_value) -> bytes:
        k, e, d = _key(key), _bytes(expected_value), _bytes(desired_value)
        p, n = ctypes.c_void_p(), ctypes.c_int64()
        _lib.load().store_compare_set(self._h, k, len(k), e, len(e), d, len(d), ctypes.byref(p), ctypes.byref(n))
        return _take(p, n)

    def check(self, keys) -> bool:
        if getattr(_probe, "target", None) is self:
            _probe.seen = list(keys)
            return True
        ks = [_key(k) for k in keys]
        out = ctypes.c_int32()
        _lib.load().store_check(self._h, _bufs(ks), len(ks), ctypes.byref(out))
        return bool(out.value)

    def wait(self, keys, timeout: datetime.timedelta | None = None) -> None:
        ks = [_key(k) for k in keys]
        _lib.load().store_wait(self._h, _bufs(ks), len(ks), self._wait_ms(timeout))

    def delete_key(self, key) -> bool:
        k = _key(key)
        out = ctypes.c_int32()
        _lib.load().store_delete_key(self._h, k, len(k), ctypes.byref(out))
        return bool(out.value)

    def num_keys(self) -> int:
        out = ctypes.c_int64()
        _lib.load().store_num_keys(self._h, ctypes.byref(out))
        return out.value

    # The PythonStore trampoline calls these C++ names.
    deleteKey = delete_key
    getNumKeys = num_keys

    def has_extended_api(self) -> bool:
        return True

    def append(self, key, value) -> None:
        k, v = _key(key), _bytes(value)
        _lib.load().store_append(self._h, k, len(k), v, len(v))

    def multi_get(self, keys) -> list[bytes]:
        ks = [_key(k) for k in keys]
        p, n = ctypes.c_void_p(), ctypes.c_int64()
        _lib.load().store_multi_get(self._h, _bufs(ks), len(ks), self._wait_ms(), ctypes.byref(p), ctypes.byref(n))
        return _unpack(p, n)

    def multi_set(self, keys, values) -> None:
        if len(keys) != len(values):
            raise ValueError(f"multi_set: {len(keys)} keys but {len(values)} values")
        ks, vs = [_key(k) for k in keys], [_bytes(v) for v in values]
        _lib.load().store_multi_set(self._h, _bufs(ks), _bufs(vs), len(ks))

    def list_keys(self) -> list[str]:
        p, n = ctypes.c_void_p(), ctypes.c_int64()
        _lib.load().store_list_keys(self._h, ctypes.byref(p), ctypes.byref(n))
        return [k.decode("utf-8", "replace") for k in _unpack(p, n)]

    # ----- queues ---------------------------------------------------------
    def _check_queues(self):
        if not self._queues:
            raise NotImplementedError(self._queue_error)

    def queue_push(self, key, value) -> None:
        self._check_queues()
        k, v = _key(key), _bytes(value)
        _lib.load().store_queue_push(self._h, k, len(k), v, len(v))

    def queue_pop(self, key, block: bool = True) -> bytes:
        self._check_queues()
        k = _key(key)
        p, n, found = ctypes.c_void_p(), ctypes.c_int64(), ctypes.c_int32()
        _lib.load().store_queue_pop(self._h, k, len(k), 1 if block else 0, self._wait_ms(), ctypes.byref(p),
                                    ctypes.byref(n), ctypes.byref(found))
        if not found.value:
            raise dist.QueueEmptyError("queue is empty")
        return _take(p, n)

    def queue_len(self, key) -> int:
        self._check_queues()
        k = _key(key)
        out = ctypes.c_int64()
        _lib.load().store_queue_len(self._h, k, len(k), ctypes.byref(out))
        return out.value

    # ----- timeout --------------------------------------------------------
    @property
    def timeout(self) -> datetime.timedelta:
        return _cxx_timeout(self)

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        _lib.load().store_set_timeout(self._h, _ms(timeout))
        dist.Store.set_timeout(self, timeout)

    def __repr__(self):
        return f"godist.{type(self).__name__}(handle={getattr(self, '_h', None)})"


class TCPStore(_GoStore):
    """torch's ``TCPStore``, in Go: a client of a TCPStore server (torch's or
    godist's), which ``is_master=True`` first starts in this process.

    Arguments as torch's. ``world_size`` makes this client register under
    ``init/`` (so ``num_keys()`` counts it); a master with
    ``wait_for_workers`` then waits for ``world_size`` clients.
    ``multi_tenant`` reuses a godist master already serving ``port`` in this
    process. ``use_libuv=False`` says the server is torch's classic backend,
    which has no queues (queue calls raise NotImplementedError, as torch's
    client does). ``secret`` (default: ``GODIST_SECRET``) makes the client,
    and a master's server, authenticate every connection; torch's clients
    and servers cannot, so use it only between godist stores."""

    def __init__(self, host_name: str, port: int, world_size: int | None = None, is_master: bool = False,
                 timeout: datetime.timedelta = _DEFAULT_TIMEOUT, wait_for_workers: bool = True,
                 multi_tenant: bool = False, master_listen_fd: int | None = None, use_libuv: bool = True,
                 secret: str | bytes | None = None):
        super().__init__()
        if world_size is not None and world_size == 0:
            raise ValueError("TCPStore world size cannot be 0")
        if multi_tenant and is_master and port:
            with _live_lock:
                served = any(isinstance(s, TCPStore) and s._master and s._port == port for s in _live.values())
            is_master = is_master and not served
        self._host = host_name
        self._use_libuv = bool(use_libuv)
        self._master = bool(is_master)
        h = ctypes.c_uint64()
        lib = _lib.load()
        with _lib.secret(lib, secret):
            lib.tcpstore_create(host_name.encode(), int(port), int(world_size or 0), int(bool(is_master)),
                                int(bool(wait_for_workers)), -1 if master_listen_fd is None else int(master_listen_fd),
                                0 if use_libuv else 1, _ms(timeout), ctypes.byref(h))
        p = ctypes.c_int32()
        lib.tcpstore_port(h.value, ctypes.byref(p))
        self._port = p.value
        self._adopt(h.value)

    _queue_error = "queues not implemented on legacy TCPStore backend"

    @property
    def _queues(self):  # per instance: depends on use_libuv
        return self._use_libuv

    def _clone_attrs(self, other):
        other._host, other._port, other._use_libuv, other._master = self._host, self._port, self._use_libuv, False

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def libuvBackend(self) -> bool:  # noqa: N802 - torch's name
        return self._use_libuv

    def __repr__(self):
        return f"godist.TCPStore(host={self._host!r}, port={self._port}, master={self._master})"


class TCPServer:
    """A standalone godist TCPStore server (no client): torch and godist
    TCPStore clients can connect to ``port``. Close it with :meth:`close`.
    With ``secret`` (default: ``GODIST_SECRET``) only godist clients with
    the same secret are served."""

    def __init__(self, host: str = "", port: int = 0, secret: str | bytes | None = None):
        h = ctypes.c_uint64()
        lib = _lib.load()
        with _lib.secret(lib, secret):
            lib.tcpserver_create(host.encode(), int(port), ctypes.byref(h))
        self._h = h.value
        p = ctypes.c_int32()
        lib.tcpserver_port(self._h, ctypes.byref(p))
        self.port = p.value
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _lib.load().tcpserver_close(self._h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class FileStore(_GoStore):
    """torch's ``FileStore(file_name, world_size=-1)``, in Go, sharing
    torch's file format: torch and godist processes can use one file. The
    last opener to close removes the file when ``world_size >= 0`` and all
    ``world_size`` openers have closed. No queues (NotImplementedError)."""

    _queues = False

    def __init__(self, file_name: str, world_size: int = -1):
        super().__init__()
        self._path = file_name
        h = ctypes.c_uint64()
        _lib.load().filestore_create(file_name.encode(), int(world_size), -1, ctypes.byref(h))
        self._adopt(h.value)

    def _clone_attrs(self, other):
        other._path = self._path

    @property
    def path(self) -> str:
        return self._path


class HashStore(_GoStore):
    """torch's ``HashStore``, in Go: an in-process store."""

    def __init__(self):
        super().__init__()
        h = ctypes.c_uint64()
        _lib.load().hashstore_create(int(_DEFAULT_TIMEOUT.total_seconds() * 1000), ctypes.byref(h))
        self._adopt(h.value)


class PrefixStore(_GoStore):
    """torch's ``PrefixStore(prefix, store)`` over a godist store: key ``k``
    becomes ``prefix + "/" + k``. Closing it does not close ``store``. Wrap
    other stores with ``torch.distributed.PrefixStore``."""

    def __init__(self, prefix: str, store: _GoStore):
        super().__init__()
        if store is None:
            raise ValueError("PrefixStore needs an underlying store, got None")
        if not isinstance(store, _GoStore):
            raise TypeError(f"godist.PrefixStore wraps godist stores, got {type(store).__name__}; "
                            "use torch.distributed.PrefixStore for other stores")
        self._prefix, self._inner = prefix, store
        p = _key(prefix)
        h = ctypes.c_uint64()
        _lib.load().prefixstore_create(p, len(p), store._h, ctypes.byref(h))
        self._adopt(h.value)

    def _clone_attrs(self, other):
        other._prefix, other._inner = self._prefix, self._inner

    @property
    def _queues(self):  # the inner store decides
        return self._inner._queues

    @property
    def _queue_error(self):
        return self._inner._queue_error

    @property
    def underlying_store(self):
        return self._inner

    @property
    def _underlying_non_prefix_store(self):
        s = self._inner
        while isinstance(s, PrefixStore):
            s = s._inner
        return s

    def __repr__(self):
        return f"godist.PrefixStore({self._prefix!r}, {self._inner!r})"


def resolve(store) -> tuple[_GoStore, bytes] | None:
    """If ``store`` is a godist store, possibly under torch PrefixStores,
    return it with the key prefix those add (``b""`` or ending in ``"/"``),
    else None. The prefix is learnt without store traffic: a check() sent
    through the chain is intercepted by the godist store (torch's PrefixStore
    does not expose its prefix)."""
    base = store
    while isinstance(base, dist.PrefixStore):
        base = base.underlying_store
    if not isinstance(base, _GoStore) or getattr(base, "_closed", True):
        return None
    if base is store:
        return base, b""
    _probe.target, _probe.seen = base, None
    try:
        store.check([_PROBE_KEY])
    finally:
        _probe.target = None
    seen = _probe.seen
    if not seen or len(seen) != 1 or not seen[0].endswith(_PROBE_KEY):
        return None
    prefix = seen[0][: -len(_PROBE_KEY)]
    if prefix and not prefix.endswith("/"):
        return None
    return base, prefix.encode("utf-8")


def _close_all():
    with _live_lock:
        stores = list(_live.values())
    for s in reversed(stores):  # PrefixStores and clones before what they use
        try:
            s.close()
        except Exception:
            pass


atexit.register(_close_all)

__all__ = ["TCPStore", "TCPServer", "FileStore", "HashStore", "PrefixStore"]
