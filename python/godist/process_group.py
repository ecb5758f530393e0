"""GodistProcessGroup: the group ``init_process_group("godist")`` and
``new_group`` return.

It is a torch ``ProcessGroup`` whose op methods are Python: ``dist.*``
calls reach godist's fast paths (:mod:`godist._fast`) without a trip through
torch's C++ dispatcher, which is what keeps a small all_reduce in single
microseconds. It also carries a real c10d Backend
(:class:`godist.backend.GodistBackend`, torch 2.14+) registered for cpu and
cuda, so everything torch asks of a group's backend works: device routing,
``split_group``, ``shrink_group``, ``get_error``, abort hooks, timeouts.

While pre- or post-collective hooks are registered on the group
(``register_pre_hook``, ``register_post_hook``), and when torch's flight
recorder is asked for in the environment (``TORCH_FR_BUFFER_SIZE`` or
``TORCH_NCCL_TRACE_BUFFER_SIZE`` above 0), every op goes through torch's own
``ProcessGroup`` method instead, which fires the hooks and records the op
before it reaches the same Backend (docs/architecture.md has the costs).
Both routes end in the same :class:`godist._group.Group`: one description of
each op, its checks and its Work.
"""

from __future__ import annotations

import datetime
import json
import inspect
import logging
from sys import _getframe

import torch
import torch.distributed as dist

from . import _fast, _forms, _group, _lib, _log, _native
from ._flight import requested as flight_recorder_requested
from ._group import Group, OnGroup, _live, _live_lock
from ._reconfigure import Unconfigured
from .backend import AVAILABLE as _HAS_BACKEND
from .backend import GodistBackend

_C = torch._C._distributed_c10d
_PG = dist.ProcessGroup
_ARO = _C.AllreduceOptions
# The code of torch's dist.all_reduce, which accepts None from a backend
# that completed a synchronous op ("the backend has sync'ed at CPP level").
_DIST_ALL_REDUCE = inspect.unwrap(dist.distributed_c10d.all_reduce).__code__
_SYNCED = object()
_CUSTOM = dist.ProcessGroup.BackendType.CUSTOM


class GodistProcessGroup(OnGroup, _PG):
    """A process group backed by godist's Go engine."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta | None = None, group_name: str = "",
                 *, group: Group | None = None, enable_reconfigure: bool = False):
        if group is not None and store is not None and _HAS_BACKEND:
            # torch (2.14+) reads a split child's store (get_group_store);
            # before 2.14 a Python subclass cannot take this constructor.
            super().__init__(store, rank, size)
        else:
            super().__init__(rank, size)
        if group is None:
            make = Unconfigured if enable_reconfigure and _HAS_BACKEND else Group
            group = make(store, rank, size, timeout, group_name)
        self._g = group
        self._hook_ids = set()
        # torch's route needs the Backend (2.14+): before that there is none
        self._fr = _HAS_BACKEND and flight_recorder_requested()
        self._hooked = self._fr
        # The Group the fast path reaches in one attribute read; None while
        # hooked (allreduce, the most frequent op, checks nothing else).
        self._fast_g = None if self._hooked else group
        self._backend = None
        if _HAS_BACKEND:
            b = GodistBackend(group=self._g)
            for dev in ("cpu", "cuda"):
                self._register_backend(torch.device(dev), _CUSTOM, b)
            self._set_default_backend(_CUSTOM)
            self._backend = b

    # ----- identity -----------------------------------------------------
    # rank and size follow the group a reconfigure forms
    def rank(self) -> int:
        return self._g._rank

    def size(self) -> int:
        return self._g._size

    if not _HAS_BACKEND:
        # torch keeps a group's name on its backends; before 2.14 this group
        # has none, so it keeps the name itself (DeviceMesh, DTensor,
        # functional collectives and FSDP2 read it).
        def setGroupName(self, name: str) -> None:
            self._group_name = name

        def getGroupName(self) -> str:
            return getattr(self, "_group_name", None) or self._g._name

        def _get_backend(self, device=None):
            return self

    @property
    def supports_coalescing(self) -> bool:
        return True

    # ----- hooks --------------------------------------------------------
    # The Group bound in the native kernel of torch.ops.godist.all_reduce_
    # (godist._native), if any.
    _native_g = None

    def _rehook(self) -> None:
        self._hooked = self._fr or (_HAS_BACKEND and bool(self._hook_ids))
        self._fast_g = None if self._hooked else self._g
        # The fast path's conditions changed (hooks, reconfigure): the native
        # kernel forgets the group until the Python kernel binds it again.
        old, self._native_g = self._native_g, None
        if old is not None:
            _native.unbind(old)
        _native.unbind(self._g)

    def register_pre_hook(self, hook_id, hook) -> None:
        _PG.register_pre_hook(self, hook_id, hook)
        self._hook_ids.add(("pre", int(hook_id)))
        self._rehook()

    def register_post_hook(self, hook_id, hook) -> None:
        _PG.register_post_hook(self, hook_id, hook)
        self._hook_ids.add(("post", int(hook_id)))
        self._rehook()

    def unregister_pre_hook(self, hook_id) -> None:
        _PG.unregister_pre_hook(self, hook_id)
        self._hook_ids.discard(("pre", int(hook_id)))
        self._rehook()

    def unregister_post_hook(self, hook_id) -> None:
        _PG.unregister_post_hook(self, hook_id)
        self._hook_ids.discard(("post", int(hook_id)))
        self._rehook()

    # ----- new groups from this one ---------------------------------------
    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None, device_types=None):
        """torch's ProcessGroup.split_group. The child is formed on this
        group's connections (no rendezvous) and is a GodistProcessGroup, with
        the fast paths; a rank outside ``ranks`` (in no child group) gets None
        (torch's C++ trampoline for a Python backend's ``split`` cannot
        return None)."""
        ranks = [int(r) for r in ranks]
        b = self._backend
        if b is not None and self.rank() not in ranks:
            b._splits += 1  # as split does, so that unnamed children match
            return None
        types = {torch.device(d).type for d in device_types} if device_types is not None else None
        if b is not None and type(self._g) is Group and (types is None or types == {"cpu", "cuda"}):
            n = b._splits
            b._splits += 1
            name = group_name or f"{self._g._name}:split:{n}"
            g = self._g.split(ranks, timeout or getattr(opts, "_timeout", None) or self._g._timeout, name)
            if g is not None:
                child = GodistProcessGroup(g._store, g._rank, g._size, group=g)
                child._set_group_name(name)
                if group_desc:
                    child._set_group_desc(group_desc)
                return child
            b._splits -= 1  # torch's split below reaches split, which counts it
        kwargs = {} if device_types is None else {"device_types": device_types}
        return _PG.split_group(self, ranks, timeout, opts, group_name, group_desc, **kwargs)

    # ----- reconfigure (torch 2.15) ---------------------------------------
    @property
    def supports_reconfigure(self) -> bool:
        return self._backend is not None

    def get_reconfigure_handle(self) -> str:
        return self._needs_backend("get_reconfigure_handle").get_reconfigure_handle()

    def reconfigure(self, opts):
        w = self._needs_backend("reconfigure").reconfigure(opts)
        self._g = self._backend._g
        self._rehook()
        return w

    def _needs_backend(self, what: str):
        if self._backend is None:
            raise RuntimeError(f"godist: {what} needs torch 2.14 or later (this is torch {torch.__version__})")
        return self._backend

    # ----- lifecycle ----------------------------------------------------
    def shutdown(self, *args, **kwargs):
        """Close the group gracefully: peers are told this rank is leaving."""
        if self._backend is not None:
            self._backend.shutdown()
        else:
            self._g.shutdown()

    def abort(self, *args, **kwargs):
        """Fail every pending op of this group at once and drop its connections."""
        self._g.abort()

    # ----- ops ----------------------------------------------------------
    # Each takes every call form of torch's ProcessGroup (godist._forms);
    # while hooked, torch's own method runs it (hooks, flight recorder),
    # which reaches the same Group through the registered GodistBackend.
    def allreduce(self, tensors, opts=None, op=None, timeout=None):
        g = self._fast_g
        if g is not None and type(opts) is _ARO:
            # torch's dist.all_reduce takes None for a synchronous op the
            # backend completed (it then skips Work.wait): no Work to make.
            if _getframe(1).f_code is _DIST_ALL_REDUCE:
                w = _fast.allreduce(g, tensors, opts, _SYNCED)
                if w is _SYNCED:
                    return None
            else:
                w = _fast.allreduce(g, tensors, opts)
            return w if w is not None else g._allreduce(tensors, opts)
        if type(opts) is not _ARO:
            tensors, opts = _forms.allreduce(tensors, opts, op, timeout)
        if self._hooked:
            return _PG.allreduce(self, tensors, opts)
        return self._g.allreduce(tensors, opts)

    def allreduce_coalesced(self, tensors, opts=None):
        tensors, opts = _forms.allreduce_coalesced(tensors, opts)
        if self._hooked:
            return _PG.allreduce_coalesced(self, tensors, opts)
        return self._g.allreduce_coalesced(tensors, opts)

    def broadcast(self, tensors, opts=None, timeout=None):
        tensors, opts = _forms.broadcast(tensors, opts, timeout)
        if self._hooked:
            return _PG.broadcast(self, tensors, opts)
        return self._g.broadcast(tensors, opts)

    def reduce(self, tensors, opts=None, op=None, timeout=None):
        tensors, opts = _forms.reduce(tensors, opts, op, timeout)
        if self._hooked:
            return _PG.reduce(self, tensors, opts)
        return self._g.reduce(tensors, opts)

    def allgather(self, output_tensors, input_tensors, opts=None, timeout=None):
        output_tensors, input_tensors, opts = _forms.allgather(output_tensors, input_tensors, opts, timeout)
        if self._hooked:
            return _PG.allgather(self, output_tensors, input_tensors, opts)
        return self._g.allgather(output_tensors, input_tensors, opts)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        opts = _forms.two(_C.AllgatherOptions, "allgather_coalesced", opts)
        if self._hooked:
            return _PG.allgather_coalesced(self, output_lists, input_list, opts)
        return self._g.allgather_coalesced(output_lists, input_list, opts)

    def all_gather_single(self, output, input, opts=None):
        opts = _forms.two(_C.AllgatherOptions, "all_gather_single", opts)
        if self._hooked:
            return _PG.all_gather_single(self, output, input, opts)
        return self._g.all_gather_single(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = _forms.two(_C.AllgatherOptions, "all_gather_single_coalesced", opts)
        if self._hooked:
            return _PG.all_gather_single_coalesced(self, outputs, inputs, opts)
        return self._g.all_gather_single_coalesced(outputs, inputs, opts)

    def gather(self, output_tensors, input_tensors, opts=None, timeout=None):
        output_tensors, input_tensors, opts = _forms.gather(output_tensors, input_tensors, opts, timeout)
        if self._hooked:
            return _PG.gather(self, output_tensors, input_tensors, opts)
        return self._g.gather(output_tensors, input_tensors, opts)

    def scatter(self, output_tensors, input_tensors, opts=None, timeout=None):
        output_tensors, input_tensors, opts = _forms.scatter(output_tensors, input_tensors, opts, timeout)
        if self._hooked:
            return _PG.scatter(self, output_tensors, input_tensors, opts)
        return self._g.scatter(output_tensors, input_tensors, opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None, op=None, timeout=None):
        output_tensors, input_tensors, opts = _forms.reduce_scatter(output_tensors, input_tensors, opts, op, timeout)
        if self._hooked:
            return _PG.reduce_scatter(self, output_tensors, input_tensors, opts)
        return self._g.reduce_scatter(output_tensors, input_tensors, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = _forms.two(_C.ReduceScatterOptions, "reduce_scatter_single", opts)
        if self._hooked:
            return _PG.reduce_scatter_single(self, output, input, opts)
        return self._g.reduce_scatter_single(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = _forms.two(_C.ReduceScatterOptions, "reduce_scatter_single_coalesced", opts)
        if self._hooked:
            return _PG.reduce_scatter_single_coalesced(self, outputs, inputs, opts)
        return self._g.reduce_scatter_single_coalesced(outputs, inputs, opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = _forms.two(_C.AllToAllOptions, "alltoall", opts)
        if self._hooked:
            return _PG.alltoall(self, output_tensors, input_tensors, opts)
        return self._g.alltoall(output_tensors, input_tensors, opts)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, opts=None):
        opts = _forms.all_to_all_single(opts)
        if self._hooked:
            return _PG.all_to_all_single(self, output, input, list(output_split_sizes or []),
                                         list(input_split_sizes or []), opts)
        return self._g.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def barrier(self, opts=None, timeout=None):
        opts = _forms.barrier(opts, timeout)
        if self._hooked:
            return _PG.barrier(self, opts)
        return self._g.barrier(opts)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """A barrier whose failure names late ranks: on rank 0 the error lists
        the ranks that did not arrive within timeout (all of them with
        wait_all_ranks, else the first); the other ranks fail too."""
        return self._g.monitored_barrier(timeout=timeout, wait_all_ranks=wait_all_ranks)

    def send(self, tensors, dstRank, tag=0):
        tensors = _forms._listed(tensors)
        if self._hooked:
            return _PG.send(self, tensors, dstRank, tag)
        return self._g.send(tensors, dstRank, tag)

    def recv(self, tensors, srcRank, tag=0):
        tensors = _forms._listed(tensors)
        if self._hooked:
            return _PG.recv(self, tensors, srcRank, tag)
        return self._g.recv(tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag=0):
        tensors = _forms._listed(tensors)
        if self._hooked:
            return _PG.recv_anysource(self, tensors, tag)
        return self._g.recv_anysource(tensors, tag)

    recvAnysource = recv_anysource

    # ----- names torch used before the 2.13 rename ------------------------
    # From 2.13 on, torch's C++ ProcessGroup forwards each old name to the
    # new one itself (and the new to the old: a Python override of an old
    # name would then run again for every op while hooked).
    if not hasattr(_PG, "all_to_all_single"):
        _allgather_base = all_gather_single
        allgather_into_tensor_coalesced = all_gather_single_coalesced
        _reduce_scatter_base = reduce_scatter_single
        reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
        alltoall_base = all_to_all_single


def group_of(group) -> Group:
    """The godist Group behind ``group`` (default: the world): a
    GodistProcessGroup, a GodistBackend, or a ProcessGroup with a
    GodistBackend for cpu."""
    if group is None:
        group = dist.group.WORLD
    g = group
    if not isinstance(g, (GodistProcessGroup, GodistBackend, Group)):
        try:
            g = group._get_backend(torch.device("cpu"))
        except Exception:
            g = None
    if isinstance(g, (GodistProcessGroup, GodistBackend)):
        g = g._g
    if not isinstance(g, Group):
        raise TypeError(f"godist needs a godist group, got {type(group).__name__}")
    return g


def topology(group: dist.ProcessGroup | None = None) -> dict:
    """Where the ranks of ``group`` (default: the world) run, how this rank
    reaches each and which algorithms its collectives take: ``{"hosts":
    [[0, 1], [2, 3]], "offload": "shm+tcp", "via": ["self", "shm", "tcp",
    "tcp"], "algorithms": "all_reduce and broadcast: ..."}``. ``hosts``
    lists the ranks by host; ``offload`` names what carries the collectives
    (``"shm"``: every rank on one host; ``"shm+tcp"``: shared memory inside
    each host, TCP between; ``""``: the transport alone); ``via[r]`` is
    ``"self"``, ``"shm"``, ``"tcp"`` or ``"mpi"``; ``algorithms`` says, by
    op and size, what runs (the choices of libgodist/algo; ``""`` for a
    group of one)."""
    g = group_of(group)
    if g._closed:
        raise ValueError("the group is closed")
    state = json.loads(_lib.read_bytes(_lib.load().pg_state, g._h, size=1 << 14))
    return {"hosts": state["hosts"], "offload": state["offload"], "via": state["via"],
            "algorithms": state.get("algorithms", "")}


def dump_state(group: dist.ProcessGroup | None = None) -> list[dict]:
    """Snapshot of godist groups on this rank, for debugging a hang: for
    each group (``group``, else every live one) its name, rank, the last
    collective that completed here, the one running (and for how long) and
    those queued, as dicts; each is also logged at WARNING. Compare the
    ranks' snapshots to see which rank is behind. With
    ``GODIST_DUMP_ON_SIGNAL=1`` every rank logs the same on SIGUSR1 (``kill
    -USR1 <pid>``), even while stuck in a collective."""
    if group is None:
        with _live_lock:
            groups = sorted(_live, key=lambda g: g._h)
    else:
        groups = [group_of(group)]
    out = []
    for g in groups:
        if g._closed:
            continue
        lib = _lib.load()
        state = json.loads(_lib.read_bytes(lib.pg_state, g._h, size=1 << 14))
        out.append(state)
        _log.log(logging.WARNING, "%s", state["summary"])
    return out


close_all = _group.close_all
