"""Rendezvous through the c10d store that torch hands the backend.

Each rank publishes its PeerRecord (built by Go: addresses, port, host
identity) under ``godist/<generation>/<rank>`` and reads everyone's. The
generation comes from a shared counter, so a store reused across
init/destroy cycles never serves stale records. The store torch passes is
already prefixed with the group's name, so subgroups do not collide.

When that store is a godist store (python/godist/store.py), possibly under
torch's PrefixStores, the whole exchange runs in Go with the same keys
(libgodist/rendezvous_store.go): no Python round trip per key.
``GODIST_STORE_RENDEZVOUS=0`` forces the Python path; ``stats`` counts the
rendezvous done each way in this process.
"""

from __future__ import annotations

import ctypes
import datetime
import os

import torch.distributed as dist

from . import _errors, _lib
from . import store as _store

stats = {"go": 0, "python": 0}

# torch's own stores, whose multi_get reads every record in one round trip
# (a store written in Python may not have it).
_MULTI_GET = tuple(t for t in (getattr(dist, n, None) for n in ("TCPStore", "PrefixStore", "FileStore", "HashStore"))
                   if t is not None and hasattr(t, "multi_get"))


def store_host(store) -> str | None:
    """The host the group's store is reached at, under any PrefixStores: a
    TCPStore's host; None for a FileStore or HashStore (no network to go
    by); for another kind of store, MASTER_ADDR if set. Go picks the
    interface whose route leads there (backends/tcp/choice.go)."""
    base = store
    for _ in range(64):
        if not isinstance(base, (dist.PrefixStore, _store.PrefixStore)):
            break
        base = base.underlying_store
    if isinstance(base, (dist.TCPStore, _store.TCPStore)):
        try:
            return base.host or None
        except Exception:  # a closed godist store
            return None
    if isinstance(base, (dist.FileStore, dist.HashStore, _store.FileStore, _store.HashStore)):
        return None
    return os.environ.get("MASTER_ADDR") or None


def _store_timeout(store):
    try:
        return store.timeout
    except Exception:  # a store written in Python may not say
        return None


def exchange(store, rank: int, size: int, handle: int, timeout: datetime.timedelta, group: str) -> None:
    lib = _lib.load()
    target = _store.resolve(store) if os.environ.get("GODIST_STORE_RENDEZVOUS", "1") != "0" else None
    if target is not None:
        go_store, key_prefix = target
        lib.pg_rendezvous_store(handle, go_store._h, key_prefix, len(key_prefix),
                                max(1, int(timeout.total_seconds() * 1000)))
        stats["go"] += 1
        return
    stats["python"] += 1
    gen = (store.add("godist/generation", 1) - 1) // size
    record = _lib.read_bytes(lib.pg_record, handle)
    keys = [f"godist/{gen}/{r}" for r in range(size)]
    store.set(keys[rank], record)
    # torch's stores' multi_get waits for every key, for the store's own
    # timeout: where that is the group's, one round trip instead of two.
    one_trip = type(store) in _MULTI_GET and _store_timeout(store) == timeout
    records = None
    try:
        if one_trip:
            records = store.multi_get(keys)
        else:
            store.wait(keys, timeout)
    except Exception as e:
        try:
            missing = [r for r, k in enumerate(keys) if not store.check([k])]
        except Exception as e2:
            raise dist.DistBackendError(
                f"godist: rendezvous of group {group!r} (rank {rank} of {size}) failed: the store does not answer "
                f"({e2}). Is the process that hosts it (MASTER_ADDR/MASTER_PORT, usually rank 0) still running? "
                f"({e})") from e
        raise _errors.GodistTimeoutError(
            f"godist: rendezvous of group {group!r} (rank {rank} of {size}) timed out after {timeout}: "
            f"rank(s) {missing} never published their address. Did every rank call init_process_group/new_group "
            f"with the same arguments? ({e})", _errors.TIMEOUT, cause="timeout", group=group,
            missing_ranks=missing, after=timeout.total_seconds()) from e
    if records is None:
        records = store.multi_get(keys) if type(store) in _MULTI_GET else [store.get(k) for k in keys]
    arr = _lib.bufs([(ctypes.cast(ctypes.c_char_p(r), ctypes.c_void_p).value, len(r)) for r in records])
    lib.pg_connect(handle, arr, size, int(timeout.total_seconds() * 1000))
    del records
