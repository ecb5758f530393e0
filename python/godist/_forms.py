"""Every call form torch's ProcessGroup accepts, turned into (tensors, options).

torch's ``ProcessGroup`` methods have shorthand overloads besides
``op(tensors, opts)``: a bare tensor instead of a one-tensor list, a
``ReduceOp`` in place of the options, a root rank, a timeout
(``pg.allreduce(t)``, ``pg.allreduce([t], ReduceOp.MAX)``,
``pg.broadcast(t, 0)``, ``pg.reduce(t, 0, ReduceOp.MIN)``,
``pg.allgather(outs, t)``, ``pg.barrier(timeout=...)``). godist's groups and
backends accept the same forms; each function here returns the arguments of
the canonical form, which every op path takes. The ``dist.*`` functions
always pass the canonical form, so the fast paths check ``type(opts)`` and
only come here when it differs.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

_C = torch._C._distributed_c10d
_Tensor = torch.Tensor
_OPS = (dist.ReduceOp, dist.ReduceOp.RedOpType)


def _options(cls, what: str, opts, **fields):
    """opts if given (an options object: the op's checks read what they
    need of it), else a fresh cls with fields set (None: left at torch's
    default)."""
    if opts is not None:
        return opts
    o = cls()
    for name, value in fields.items():
        if value is None:
            continue
        if name == "timeout" and not isinstance(value, datetime.timedelta):
            raise TypeError(f"godist: {what}: timeout must be a datetime.timedelta, got {type(value).__name__}")
        setattr(o, name, value)
    return o


def _listed(tensors):
    """A bare tensor as a one-tensor list."""
    return [tensors] if isinstance(tensors, _Tensor) else tensors


def _split_op(opts, op):
    """(opts, op) with a ReduceOp given in the options' place moved to op."""
    if isinstance(opts, _OPS):
        return None, opts
    return opts, op


def _split_int(opts, value):
    """(opts, value) with an int (a root rank) given in the options' place
    moved to value."""
    if isinstance(opts, int) and not isinstance(opts, bool):
        return None, opts
    return opts, value


def _split_timeout(opts, timeout):
    if isinstance(opts, datetime.timedelta):
        return None, opts
    return opts, timeout


def allreduce(tensors, opts=None, op=None, timeout=None):
    opts, op = _split_op(opts, op)
    return _listed(tensors), _options(_C.AllreduceOptions, "allreduce", opts, reduceOp=op, timeout=timeout)


def allreduce_coalesced(tensors, opts=None):
    return _listed(tensors), _options(_C.AllreduceCoalescedOptions, "allreduce_coalesced", opts)


def broadcast(tensors, opts=None, timeout=None):
    opts, root = _split_int(opts, None)
    return _listed(tensors), _options(_C.BroadcastOptions, "broadcast", opts, rootRank=root, timeout=timeout)


def reduce(tensors, opts=None, op=None, timeout=None):
    opts, root = _split_int(opts, None)
    opts, op = _split_op(opts, op)
    return _listed(tensors), _options(_C.ReduceOptions, "reduce", opts, rootRank=root, reduceOp=op,
                                      timeout=timeout)


def allgather(output_tensors, input_tensors, opts=None, timeout=None):
    opts, timeout = _split_timeout(opts, timeout)
    if isinstance(input_tensors, _Tensor):  # allgather(outputs, input)
        output_tensors, input_tensors = [output_tensors], [input_tensors]
    return output_tensors, input_tensors, _options(_C.AllgatherOptions, "allgather", opts, timeout=timeout)


def gather(output_tensors, input_tensors, opts=None, timeout=None):
    opts, root = _split_int(opts, None)
    if isinstance(input_tensors, _Tensor):  # gather(outputs, input, root)
        output_tensors = [list(output_tensors)] if output_tensors else []
        input_tensors = [input_tensors]
    return output_tensors, input_tensors, _options(_C.GatherOptions, "gather", opts, rootRank=root,
                                                   timeout=timeout)


def scatter(output_tensors, input_tensors, opts=None, timeout=None):
    opts, root = _split_int(opts, None)
    if isinstance(output_tensors, _Tensor):  # scatter(output, inputs, root)
        output_tensors = [output_tensors]
        input_tensors = [list(input_tensors)] if input_tensors else []
    return output_tensors, input_tensors, _options(_C.ScatterOptions, "scatter", opts, rootRank=root,
                                                   timeout=timeout)


def reduce_scatter(output_tensors, input_tensors, opts=None, op=None, timeout=None):
    opts, op = _split_op(opts, op)
    if isinstance(output_tensors, _Tensor):  # reduce_scatter(output, inputs, op)
        output_tensors, input_tensors = [output_tensors], [input_tensors]
    return output_tensors, input_tensors, _options(_C.ReduceScatterOptions, "reduce_scatter", opts, reduceOp=op,
                                                   timeout=timeout)


def all_to_all_single(opts=None, timeout=None):
    opts, timeout = _split_timeout(opts, timeout)
    return _options(_C.AllToAllOptions, "all_to_all_single", opts, timeout=timeout)


def barrier(opts=None, timeout=None):
    opts, timeout = _split_timeout(opts, timeout)
    return _options(_C.BarrierOptions, "barrier", opts, timeout=timeout)


def two(cls, what, opts):
    """The options of an op with an input and an output tensor."""
    return _options(cls, what, opts)
