"""Group: one godist process group in Go: its life (creation, timeouts,
coalescing, errors, abort and close); its ops are in :mod:`godist._group_ops`.

This is the engine side of a group, shared by both of godist's faces in
torch: :class:`godist.GodistProcessGroup` (the group torch's ``dist.*``
functions call, with the fast paths) and :class:`godist.GodistBackend` (the
``c10d`` Backend torch's own ProcessGroup dispatches to: hooks, the flight
recorder, device routing, split and shrink).
"""

from __future__ import annotations

import ctypes
import datetime
import logging
import os
import threading
import weakref

import torch
from torch.distributed import PrefixStore

from . import _desync, _dump, _errors, _flight, _lib, _log, _native, _rendezvous, _types
from ._group_ops import GroupOps
from .work import combine

_live = weakref.WeakSet()
_by_name = weakref.WeakValueDictionary()  # group name -> Group, for failures reported by name


def cuda_mode() -> str:
    """GODIST_CUDA: "auto" (NCCL when it loads and sees a GPU, else staged),
    "nccl" or "staged" (CUDA tensors through pinned host memory over godist's
    CPU transports)."""
    raw = os.environ.get("GODIST_CUDA", "")
    v = raw.strip().lower() or "auto"
    if v not in ("auto", "nccl", "staged"):
        raise ValueError(f"godist: GODIST_CUDA={raw!r}: use 'auto', 'nccl' or 'staged'")
    return v
_live_lock = threading.Lock()


class OnGroup:
    """What GodistProcessGroup and GodistBackend share, both being a torch
    face of a Group held in ``_g``."""

    def __getattr__(self, name):
        # The engine's attributes (_h, _rank, _device_path, shared_memory,
        # ...) for code that reaches the group through either face.
        g = self.__dict__.get("_g")
        if g is None:
            raise AttributeError(name)
        return getattr(g, name)

    def __repr__(self):
        return f"{type(self).__name__}({self._g!r})"

    def getBackendName(self) -> str:
        return "godist"

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self._g.set_timeout(timeout)

    def _get_sequence_number_for_group(self) -> int:
        return self._g._get_sequence_number_for_group()

    def _set_sequence_number_for_group(self) -> None:
        pass

    def _start_coalescing(self, device=None):
        self._g._start_coalescing(device)

    def _end_coalescing(self, device=None):
        return self._g._end_coalescing(device)

    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing


def _transport_choice() -> str:
    """GODIST_TRANSPORT as a group made now takes it: auto, tcp or mpi."""
    return os.environ.get("GODIST_TRANSPORT", "auto").strip().lower() or "auto"


class Group(GroupOps):
    """A godist process group: its Go handle and its ops."""

    # The names this group is bound under in the native kernel of
    # torch.ops.godist.all_reduce_ (godist._native).
    _native_keys = frozenset()
    _transport = "auto"  # GODIST_TRANSPORT when it was made (auto, tcp or mpi)

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta | None = None, group_name: str = ""):
        self._fields(store, rank, size, timeout, group_name)
        lib = _lib.load()
        _log.set_rank(rank)
        _dump.on_signal(lib)
        h = ctypes.c_uint64()
        bind = os.environ.get("GODIST_BIND_ADDR", "").encode()
        ifname = os.environ.get("GODIST_SOCKET_IFNAME", "").encode()
        peer_host = (_rendezvous.store_host(store) or "").encode() if size > 1 else b""
        transport = _transport_choice()
        if transport not in ("auto", "tcp", "mpi"):
            raise ValueError(f"godist: GODIST_TRANSPORT={transport!r}: use 'auto' (shared memory between ranks on "
                             "one host, TCP otherwise), 'tcp' or 'mpi' (MPI's messages and collectives; under mpirun)")
        if transport == "mpi" and size > 1:
            from ._mpi import open_mpi

            open_mpi()  # the MPI fabric needs MPI initialised (mpi:// has done it already)
        with _lib.secret(lib):
            lib.pg_create(rank, size, self._name.encode(), self._timeout_ms(), bind or None, ifname or None,
                          peer_host or None, transport.encode() if transport in ("tcp", "mpi") else None,
                          ctypes.byref(h))
        self._h = h.value
        self._transport = transport
        self._bind(lib)
        try:
            if size > 1:
                _rendezvous.exchange(store, rank, size, self._h, self._timeout, self._name)
        except BaseException:
            self._close()
            raise
        self._register()

    def _fields(self, store, rank: int, size: int, timeout, group_name: str) -> None:
        self._rank, self._size = rank, size
        self._store = store
        self._timeout = timeout if timeout is not None and timeout.total_seconds() > 0 else _types.default_timeout()
        self._name = group_name or "godist"
        self._seq = 0
        self._coalesced = None
        self._abort_hooks = {}
        self._hooks_ran = False
        self._coalescing_cuda = False
        self._dev = None
        self._closed = False
        self._close_lock = threading.Lock()
        # Under TORCH_DISTRIBUTED_DEBUG=DETAIL ops describe their tensors'
        # shapes (godist._desync) and the fast paths step aside.
        self._detail = _desync.detail_mode()
        self._details = _desync.details if self._detail else _desync.nothing

    def _bind(self, lib) -> None:
        # The ops' entry points (each takes a GodistOp's address), bound once.
        for name in ("allreduce", "broadcast", "reduce", "allgather", "gather", "reduce_scatter", "scatter", "alltoall",
                     "barrier", "monitored_barrier", "send", "recv"):
            setattr(self, "_raw_" + name, getattr(lib.raw, name))

    def _register(self) -> None:
        _flight.configure(self)
        with _live_lock:
            _live.add(self)
            _by_name[self._name] = self

    def split(self, ranks, timeout: datetime.timedelta | None = None, group_name: str = "",
              store=None) -> "Group | None":
        """The child group of ``ranks`` (this group's ranks, in the child's
        rank order, this rank among them) on this group's connections: no
        rendezvous, one exchange among its ranks. Every rank of this group
        splits in the same order, each with its own child's ranks. ``store``
        is the child's (its NCCL communicator meets there); default: this
        group's, under a prefix of the child's name. None, on every rank
        alike, where this group's collectives cannot serve a child (several
        hosts' arenas, MPI's collectives): form it anew through a store."""
        ranks = [int(r) for r in ranks]
        if self._rank not in ranks:
            raise ValueError(f"godist: split: rank {self._rank} is not among the child's ranks {ranks}")
        lib = _lib.load()
        name = group_name or f"{self._name}:split"
        if store is None and self._store is not None:
            store = PrefixStore(f"godist-split/{name}/", self._store)
        child = Group.__new__(Group)
        child._fields(store, ranks.index(self._rank), len(ranks), timeout or self._timeout, name)
        child._transport = self._transport
        h = ctypes.c_uint64()
        try:
            lib.pg_split(self._h, (ctypes.c_int32 * len(ranks))(*ranks), len(ranks), child._name.encode(),
                         child._timeout_ms(), ctypes.byref(h))
        except _errors.GodistError as e:
            if e.code == _errors.UNSUPPORTED:
                return None
            raise
        child._h = h.value
        child._bind(lib)
        child._register()
        return child

    # ----- identity -----------------------------------------------------
    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def _timeout_ms(self) -> int:
        return max(1, int(self._timeout.total_seconds() * 1000))

    def _device_path(self):
        """The path CUDA tensors take (GODIST_CUDA), made on first use."""
        d = self._dev
        if d is None:
            mode = cuda_mode()
            if mode == "auto":
                from ._nccl import nccl_info

                info = nccl_info()
                mode = "nccl" if info.get("available") and info.get("devices", 0) > 0 else "staged"
                if mode == "staged":
                    _log.log(logging.WARNING, "godist: CUDA tensors go through pinned host memory (NCCL: %s)",
                             info.get("reason") or info.get("devices_error") or "no device")
            if mode == "nccl":
                from ._nccl import NcclPath

                d = NcclPath(self)
            else:
                from ._staged import StagedPath

                d = StagedPath(self)
            self._dev = d
        return d

    def _get_sequence_number_for_group(self) -> int:
        seq = ctypes.c_uint64()
        _lib.load().pg_seq(self._h, ctypes.byref(seq))
        return seq.value

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        """The default deadline of the ops issued from now on."""
        ms = _types.timeout_ms(timeout)
        if ms <= 0:
            raise ValueError(f"godist: set_timeout: the timeout must be positive, got {timeout}")
        _lib.load().pg_set_timeout(self._h, ms)
        self._timeout = datetime.timedelta(milliseconds=ms)
        _native.unbind(self)  # bound with the timeout it had: rebound on the next call

    def error(self) -> int:
        """The status code of the error that broke the group (godist._errors;
        OK while it is healthy, CLOSED once closed)."""
        if self._closed:
            return _errors.CLOSED
        code = ctypes.c_int32()
        try:
            _lib.load().pg_error(self._h, ctypes.byref(code))
        except _errors.GodistError as e:  # a handle released under us: closed
            return e.code if e.code != _errors.INVALID else _errors.CLOSED
        return code.value

    @property
    def shared_memory(self) -> bool:
        """Whether this group's collectives run over shared memory."""
        flag = ctypes.c_int32()
        _lib.load().pg_info(self._h, ctypes.byref(flag))
        return bool(flag.value)

    def __repr__(self):
        return f"godist group {self._name!r} (rank {self._rank} of {self._size})"

    # ----- coalescing ---------------------------------------------------
    def _track(self, work):
        """Record work issued between _start_coalescing and _end_coalescing."""
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def _start_coalescing(self, device=None):
        if self._coalesced is not None:
            # torch's _coalescing_manager does not end a block whose body
            # raised: drop what that block left instead of refusing forever.
            _log.log(logging.WARNING, "godist: group %s: a coalescing block was not ended (did its body raise?); "
                     "its ops were dropped", self._name)
            self._coalesced = None
            if self._coalescing_cuda and self._dev is not None and hasattr(self._dev, "end_batch"):
                self._dev._batch = None
        self._coalesced = []
        _native.unbind(self)  # its ops go to the block: through Python until it ends
        dev = torch.device(device) if device is not None else None
        self._coalescing_cuda = dev is not None and dev.type == "cuda"
        if self._coalescing_cuda:
            d = self._device_path()
            if hasattr(d, "start_batch"):
                d.start_batch(dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device()))

    def _end_coalescing(self, device=None):
        works, self._coalesced = self._coalesced, None
        if works is None:
            raise RuntimeError("godist: _end_coalescing called without _start_coalescing")
        if self._coalescing_cuda:
            self._coalescing_cuda = False
            d = self._device_path()
            if hasattr(d, "end_batch"):
                w = d.end_batch()
                return w if w is not None else combine("coalesced", [])
        return combine("coalesced", works)

    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing

    def _dev_active(self) -> bool:
        """Whether this group has a device communicator: its barrier then
        runs on the device, as torch's nccl backend's does."""
        lib = _lib.load()
        return bool(lib.device_has(self._h, -1))

    # ----- lifecycle ----------------------------------------------------
    def _close(self):
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        _native.unbind(self)
        try:
            _lib.load().pg_close(self._h)
        except Exception:
            pass

    def shutdown(self, *args, **kwargs):
        """Close the group gracefully: peers are told this rank is leaving."""
        self._close()

    def _run_abort_hooks(self) -> None:
        """Run the abort hooks (torch's: a flight recorder dump); each hook
        is idempotent by torch's contract, and runs here at most once per
        failure of the group."""
        for hook in list(self._abort_hooks.values()):
            try:
                hook()
            except Exception as e:  # noqa: BLE001 - a hook's failure must not stop the abort
                _log.log(logging.WARNING, "godist: group %s: an abort hook raised: %s", self._name, e)

    def _failed(self, exc) -> None:
        """An op of this group failed (timeout, lost peer, desync): the
        group is broken in Go. Run the abort hooks once, and write torch's
        flight recorder trace if it records this process's groups."""
        if self._hooks_ran:
            return
        self._hooks_ran = True
        self._run_abort_hooks()
        _flight.dump()

    def abort(self, *args, **kwargs):
        """Fail every pending op of this group at once and drop its connections."""
        _native.unbind(self)
        if not self._hooks_ran:
            self._hooks_ran = True
            self._run_abort_hooks()
        if not self._closed:
            try:
                _lib.load().pg_abort(self._h)
            except Exception:
                pass
        self._close()

    def __del__(self):
        try:
            if not self._closed and not _lib._forked:
                self._close()
        except Exception:
            pass


def close_all():
    """Close every live group gracefully (registered with atexit)."""
    with _live_lock:
        groups = list(_live)
    for g in groups:
        g._close()


def _on_failure(name: str, exc) -> None:
    g = _by_name.get(name)
    if g is not None:
        g._failed(exc)


_errors.failure_listeners.append(_on_failure)
