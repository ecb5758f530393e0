"""godist: a torch.distributed backend whose collectives run on the Go runtime.

``import godist`` registers the backend ``"godist"``::

    import torch.distributed as dist
    import godist  # noqa: F401
    dist.init_process_group("godist", ...)

and the rendezvous scheme ``mpi://`` for programs started by mpirun
(``init_process_group("godist", init_method="mpi://")``; godist/_mpi.py).
The Go library (libgodist.so) is loaded on first use, not at import.
"""

from __future__ import annotations

import atexit
import datetime
import sys
from typing import Final

import torch.distributed as dist

from . import _flight, _mpi
from ._errors import (GodistClosedError, GodistDesyncError, GodistError, GodistForkError,  # noqa: F401
                      GodistInternalError, GodistInvalidError, GodistTimeoutError)
from ._flight import dump_fr_trace  # noqa: F401
from ._log import set_level as set_log_level  # noqa: F401
from ._mpi import mpi_finalize, mpi_info  # noqa: F401
from ._version import __version__ as __version__
from .backend import GodistBackend  # noqa: F401
from .backend import AVAILABLE as _HAS_BACKEND
from .process_group import GodistProcessGroup, close_all, dump_state, group_of, topology  # noqa: F401
from .store import FileStore, HashStore, PrefixStore, TCPServer, TCPStore
from .work import GodistWork  # noqa: F401
from . import ops  # noqa: F401,E402  (registers torch.ops.godist.*)

BACKEND: Final[str] = "godist"


def _shares_devices() -> bool:
    """Whether the group torch is building gives some device to another
    backend ("cpu:godist,cuda:nccl"): read from the device map of the
    torch function that called the creator."""
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            break
        cfg = f.f_locals.get("backend_config")
        if cfg is not None and hasattr(cfg, "get_device_backend_map"):
            return any(str(v) != BACKEND for v in cfg.get_device_backend_map().values())
        f = f.f_back
    return False


def _create(dist_opts, pg_options=None):
    """Backend creator (extended API): called by torch on member ranks. A
    group that is godist's on every device is a GodistProcessGroup (the
    fast path, with its GodistBackend registered); one that shares its
    devices with other backends gets a GodistBackend, which torch's
    ProcessGroup routes the CPU tensors to. A group made while a godist
    default group lives (``new_group``) is split from it, on its
    connections, without a rendezvous."""
    _flight.tell_torch()
    args = (dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout)
    name = str(getattr(dist_opts, "group_id", "") or "")
    reconf = bool(getattr(dist_opts, "enable_reconfigure", False))
    shares = _HAS_BACKEND and _shares_devices()
    child = None if reconf else _split_from_world(dist_opts, name)
    if child is not None:
        if shares:
            return GodistBackend(group=child)
        return GodistProcessGroup(dist_opts.store, child._rank, child._size, group=child)
    if shares:
        return GodistBackend(*args, group_name=name, enable_reconfigure=reconf)
    return GodistProcessGroup(*args, group_name=name, enable_reconfigure=reconf)


def _split_from_world(dist_opts, name: str):
    """The group of ``dist_opts`` (a ``new_group``) split from the default
    group when that is a godist group of the whole world (every rank of the
    new group calls this, in the order torch's ``new_group`` calls are
    made); None otherwise."""
    from ._group import Group, _transport_choice

    ranks = [int(r) for r in (getattr(dist_opts, "global_ranks_in_group", None) or [])]
    if not ranks or not dist.is_initialized():
        return None
    try:
        world = group_of(dist.distributed_c10d._get_default_group())
    except (TypeError, RuntimeError, ValueError):
        return None
    if (type(world) is not Group or world._closed or world._size != dist.get_world_size()
            or world._rank not in ranks or ranks.index(world._rank) != dist_opts.group_rank
            or _transport_choice() != world._transport):  # GODIST_TRANSPORT asks another path for this group
        return None
    return world.split(ranks, dist_opts.timeout, name, store=dist_opts.store)


def monitored_barrier(group: dist.ProcessGroup | None = None, timeout: datetime.timedelta | None = None,
                      wait_all_ranks: bool = False) -> None:
    """godist's monitored barrier (``torch.distributed.monitored_barrier``
    only accepts gloo groups): rank 0 raises an error naming the ranks that
    did not arrive within ``timeout``; the others fail as well."""
    group_of(group).monitored_barrier(timeout=timeout, wait_all_ranks=wait_all_ranks)


def runtime_stats() -> dict[str, int]:
    """Goroutines, live handles and GOMAXPROCS of the Go runtime in this process."""
    import ctypes

    from . import _lib

    g, h = ctypes.c_int64(), ctypes.c_int64()
    _lib.load().runtime_stats(ctypes.byref(g), ctypes.byref(h))
    return {"goroutines": g.value, "handles": h.value, "gomaxprocs": _lib.load().gomaxprocs()}


def _register() -> None:
    """Register the backend with torch (idempotent); also the entry point."""
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}) or hasattr(dist.Backend, BACKEND.upper()):
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])
    _flight.tell_torch()


_register()
_mpi.register()  # the mpi:// rendezvous (godist/_mpi.py)
# atexit runs last-registered first: godist's groups close before MPI is finalised.
atexit.register(_mpi._at_exit)
atexit.register(close_all)

__all__ = ["GodistProcessGroup", "GodistBackend", "GodistWork", "GodistError", "GodistTimeoutError", "GodistClosedError", "GodistDesyncError",
           "GodistInvalidError", "GodistInternalError", "GodistForkError", "BACKEND", "monitored_barrier",
           "runtime_stats", "dump_state", "dump_fr_trace", "topology", "set_log_level", "mpi_info", "mpi_finalize", "TCPStore", "TCPServer", "FileStore", "HashStore", "PrefixStore"]
