"""GodistBackend: godist as a c10d Backend inside torch's ProcessGroup.

torch's C++ ProcessGroup routes each op to the Backend registered for the
tensors' device, around its pre/post hooks and the flight recorder; split,
shrink, error state, abort hooks and timeouts are asked of the Backend.
:class:`GodistBackend` answers all of it for a godist group
(:class:`godist._group.Group`), on torch 2.14 and later (earlier torch
cannot subclass ``c10d.Backend`` in Python: ``AVAILABLE`` is False there).

Every godist group has one: the groups ``init_process_group("godist")`` and
``new_group`` make (:class:`godist.GodistProcessGroup`) register theirs for
cpu and cuda; ``init_process_group("cpu:godist,cuda:nccl")``, ``split_group``
and ``shrink_group`` put one under a ProcessGroup torch builds; and users
composing groups themselves construct one::

    pg = dist.ProcessGroup(store, rank, size)
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM,
                         godist.GodistBackend(store, rank, size, timeout))
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from . import _errors, _forms, _reconfigure
from ._group import Group, OnGroup
from ._reconfigure import Unconfigured
from .work import combine

_C = torch._C._distributed_c10d
_Base = getattr(_C, "Backend", object)
_ErrorType = getattr(_C, "ErrorType", None)

# Status codes of a broken group as torch's ErrorType names them.
_ERROR_TYPES = {_errors.OK: "SUCCESS", _errors.TIMEOUT: "TIMEOUT", _errors.PEER: "REMOTE_ERROR"}

SHRINK_ABORT = getattr(dist.distributed_c10d, "SHRINK_ABORT", 1)


def _subclassable() -> bool:
    """Whether this torch lets Python subclass c10d's Backend (2.14+)."""
    if _Base is object:
        return False
    try:
        class _Probe(_Base):
            pass

        _Probe(0, 1)
        return True
    except TypeError:
        return False


AVAILABLE = _subclassable()


class GodistBackend(OnGroup, _Base):
    """A c10d Backend whose ops run on a godist group.

    ``GodistBackend(store, rank, size, timeout)`` forms a new group through
    ``store`` (every rank calls it, as for any group);
    ``GodistBackend(group=g)`` serves an existing :class:`godist._group.Group`.
    """

    def __init__(self, store=None, rank: int | None = None, size: int | None = None,
                 timeout: datetime.timedelta | None = None, group_name: str = "", *, group: Group | None = None,
                 enable_reconfigure: bool = False):
        if not AVAILABLE:
            raise RuntimeError(f"godist: GodistBackend needs torch 2.14 or later (a Python subclass of c10d's "
                               f"Backend); this is torch {torch.__version__}. Use GodistProcessGroup there.")
        if group is None:
            if store is None or rank is None or size is None:
                raise TypeError("godist: GodistBackend(store, rank, size, timeout) or GodistBackend(group=...)")
            make = Unconfigured if enable_reconfigure else Group
            group = make(store, rank, size, timeout, group_name)
        super().__init__(group._rank, group._size)
        self._g = group
        self._splits = 0
        self._members = None  # _reconfigure.Membership, made by the first get_reconfigure_handle
        self._base_name = group._name

    # ----- identity and capabilities (none may raise) ----------------------
    @property
    def options(self):
        o = _Base.Options("godist", self._g._timeout)
        o.group_name = self._g._name
        return o

    @property
    def supports_splitting(self) -> bool:
        return True

    @property
    def supports_shrinking(self) -> bool:
        return True

    @property
    def supports_coalescing(self) -> bool:
        # batch_isend_irecv and _coalescing_manager then bracket their ops
        # with start/end_coalescing: on CUDA tensors the ops go to NCCL as
        # one group (a send and a receive between two ranks must, or they
        # can wait on each other).
        return True

    @property
    def supports_reconfigure(self) -> bool:
        return True

    @property
    def supports_window(self) -> bool:
        return False

    @property
    def supports_abort_hooks(self) -> bool:
        return True

    @property
    def supports_completion_hooks(self) -> bool:
        return False

    @property
    def _supports_time_estimate(self) -> bool:
        return False

    def supports_tensor_alloc(self, device=None) -> bool:
        return False

    def eager_connect_single_device(self, device=None) -> None:
        pass  # connected at creation

    def _membership(self) -> _reconfigure.Membership:
        m = self._members
        if m is None:
            m = self._members = _reconfigure.Membership(self._g._store)
        return m

    def get_reconfigure_handle(self) -> str:
        """This rank's handle for dist._reconfigure (the same every call)."""
        return self._membership().handle

    def reconfigure(self, opts):
        """Form a new group of the members whose handles opts.handles lists
        (a list: ranks by position; a set: ranks chosen by godist); every
        later op runs on it. Synchronous: returns a completed Work. On
        failure the group stays as it was."""
        m = self._membership()
        uuid, rank, ordered, timeout = m.plan(opts)
        old = self._g
        timeout = timeout or old._timeout
        store = m.meeting_store(uuid, ordered, timeout) if len(ordered) > 1 else None
        self._g = Group(store, rank, len(ordered), timeout, f"{self._base_name}:rc{uuid}")
        m.used.add(uuid)
        old._close()
        return combine("reconfigure", [])

    def new_window(self, tensor=None):
        raise RuntimeError("godist: this backend has no one-sided windows")

    # ----- state --------------------------------------------------------
    def get_error(self):
        code = self._g.error()
        name = _ERROR_TYPES.get(code, "COMM_ERROR")
        return getattr(_ErrorType, name)

    def abort(self) -> None:
        self._g.abort()

    def shutdown(self) -> None:
        self._g.shutdown()
        if self._members is not None:
            self._members.close()

    def register_abort_hook(self, hook_id: int, hook) -> None:
        self._g._abort_hooks[int(hook_id)] = hook

    def unregister_abort_hook(self, hook_id: int) -> None:
        self._g._abort_hooks.pop(int(hook_id), None)

    # ----- new groups from this one -----------------------------------------
    def split(self, store, ranks, opts=None):
        """The backend of the child group of ``ranks`` (this group's ranks,
        in the child's rank order). Its ranks meet under a key of their own
        in this group's store (the store torch passes along cannot be used
        from Python once the call returns to C++)."""
        ranks = [int(r) for r in ranks]
        me = self._g._rank
        n = self._splits
        self._splits += 1
        if me not in ranks:
            # torch's C++ trampoline cannot return None from a Python
            # backend (it crashes); GodistProcessGroup.split_group keeps
            # such ranks away, a GodistBackend under torch's own
            # ProcessGroup cannot.
            raise RuntimeError(
                f"godist: split_group: rank {me} is in none of the child groups; on a group that torch's own "
                "ProcessGroup wraps (init_process_group('cpu:godist,...')), every rank must be in one of the "
                "split groups (list each rank once), or use dist.new_group")
        timeout = getattr(opts, "_timeout", None) or self._g._timeout
        name = getattr(opts, "group_name", "") or f"{self._g._name}:split:{n}"
        if type(self._g) is Group:
            # On this group's connections: no rendezvous.
            child = self._g.split(ranks, timeout, name)
            if child is not None:
                return GodistBackend(group=child)
        child_store = dist.PrefixStore(f"godist-split/{name}/", self._g._store)
        return GodistBackend(child_store, ranks.index(me), len(ranks), timeout, name)

    def shrink(self, ranks_to_exclude, shrink_flags: int = 0, opts_override=None):
        """The backend of this group without ``ranks_to_exclude``: the
        surviving ranks form it through this group's store, in their old
        order. With SHRINK_ABORT this group's pending ops fail at once
        first (and this group is closed)."""
        excluded = {int(r) for r in ranks_to_exclude}
        g = self._g
        if g._rank in excluded:
            raise ValueError(f"godist: shrink: rank {g._rank} is among the ranks to exclude {sorted(excluded)}")
        if shrink_flags & SHRINK_ABORT:
            g.abort()
        survivors = [r for r in range(g._size) if r not in excluded]
        n = g._shrinks = getattr(g, "_shrinks", 0) + 1
        timeout = getattr(opts_override, "_timeout", None) or g._timeout
        name = getattr(opts_override, "group_name", "") or f"{g._name}:shrink:{n}"
        store = dist.PrefixStore(f"godist-shrink/{n}/", g._store)
        return GodistBackend(store, survivors.index(g._rank), len(survivors), timeout, name)

    # ----- ops: every call form torch's Backend takes ---------------------
    def allreduce(self, tensors, opts=None, op=None, timeout=None):
        if type(opts) is not _C.AllreduceOptions:
            tensors, opts = _forms.allreduce(tensors, opts, op, timeout)
        return self._g.allreduce(tensors, opts)

    def allreduce_coalesced(self, tensors, opts=None):
        return self._g.allreduce_coalesced(*_forms.allreduce_coalesced(tensors, opts))

    def broadcast(self, tensors, opts=None, timeout=None):
        return self._g.broadcast(*_forms.broadcast(tensors, opts, timeout))

    def reduce(self, tensors, opts=None, op=None, timeout=None):
        return self._g.reduce(*_forms.reduce(tensors, opts, op, timeout))

    def allgather(self, output_tensors, input_tensors, opts=None, timeout=None):
        return self._g.allgather(*_forms.allgather(output_tensors, input_tensors, opts, timeout))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self._g.allgather_coalesced(output_lists, input_list, _forms.two(_C.AllgatherOptions,
                                                                               "allgather_coalesced", opts))

    def all_gather_single(self, output, input, opts=None):
        return self._g.all_gather_single(output, input, _forms.two(_C.AllgatherOptions, "all_gather_single", opts))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._g.all_gather_single_coalesced(outputs, inputs, _forms.two(_C.AllgatherOptions,
                                                                               "all_gather_single_coalesced", opts))

    def gather(self, output_tensors, input_tensors, opts=None, timeout=None):
        return self._g.gather(*_forms.gather(output_tensors, input_tensors, opts, timeout))

    def scatter(self, output_tensors, input_tensors, opts=None, timeout=None):
        return self._g.scatter(*_forms.scatter(output_tensors, input_tensors, opts, timeout))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None, op=None, timeout=None):
        return self._g.reduce_scatter(*_forms.reduce_scatter(output_tensors, input_tensors, opts, op, timeout))

    def reduce_scatter_single(self, output, input, opts=None):
        return self._g.reduce_scatter_single(output, input, _forms.two(_C.ReduceScatterOptions,
                                                                       "reduce_scatter_single", opts))

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._g.reduce_scatter_single_coalesced(outputs, inputs, _forms.two(
            _C.ReduceScatterOptions, "reduce_scatter_single_coalesced", opts))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        return self._g.alltoall(output_tensors, input_tensors, _forms.two(_C.AllToAllOptions, "alltoall", opts))

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, opts=None):
        return self._g.all_to_all_single(output, input, output_split_sizes, input_split_sizes,
                                         _forms.all_to_all_single(opts))

    def barrier(self, opts=None, timeout=None):
        return self._g.barrier(_forms.barrier(opts, timeout))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return self._g.monitored_barrier(timeout=timeout, wait_all_ranks=wait_all_ranks)

    def send(self, tensors, dstRank, tag=0):
        return self._g.send(_forms._listed(tensors), dstRank, tag)

    def recv(self, tensors, srcRank, tag=0):
        return self._g.recv(_forms._listed(tensors), srcRank, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._g.recv_anysource(_forms._listed(tensors), tag)

    recvAnysource = recv_anysource
    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single
