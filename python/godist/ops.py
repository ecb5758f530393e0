"""Collectives as torch custom ops: ``torch.ops.godist.*``.

What inference frameworks call their private CPU kernels through, for any
process group (godist's, or any other backend's), any dtype, reduce op and
layout, and inside ``torch.compile`` graphs without a graph break::

    import godist.ops  # registers the ops

    torch.ops.godist.all_reduce_(t, "sum", "")           # in place; "" = the default group
    out = torch.ops.godist.all_gather(t, group_name)     # ranks' tensors stacked on dim 0
    out = torch.ops.godist.reduce_scatter(t, "sum", "")  # dim 0 split across ranks

A group is named as torch names it (``group.group_name``; ``""`` is the
default group). The reduce op is a name: sum, avg, product, min, max, band,
bor, bxor. Each op runs on the group's own ProcessGroup method, so a godist
group takes its small-op fast path.

``all_reduce_`` also has a native kernel for CPU tensors (csrc/ops.cpp,
compiled and loaded on the op's first call by :mod:`godist._native`): on a
godist group it calls the library without Python, and hands every case it
does not take to the Python kernel below (op ``godist::_all_reduce_py_``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from . import _native
from ._native import ensure as _native_ensure

__all__ = ["all_reduce_", "all_gather", "reduce_scatter", "resolve_group", "reduce_op"]

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "product": dist.ReduceOp.PRODUCT,
    "prod": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "band": dist.ReduceOp.BAND,
    "bor": dist.ReduceOp.BOR,
    "bxor": dist.ReduceOp.BXOR,
}


def reduce_op(name: str):
    """torch's ReduceOp for one of the names the ops take."""
    try:
        return _OPS[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"godist: unknown reduce op {name!r} (use one of {sorted(_OPS)})") from None


_world = dist.distributed_c10d._world


def resolve_group(group_name: str):
    """The ProcessGroup named group_name ("" for the default group)."""
    if not group_name:
        pg = _world.default_pg
        if pg is None:
            raise RuntimeError("godist: torch.ops.godist.*: call dist.init_process_group first")
        return pg
    try:
        return dist.distributed_c10d._resolve_process_group(group_name)
    except Exception as e:
        raise ValueError(f"godist: no process group is named {group_name!r} ({e})") from None


def _check(op: str, t: Tensor) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"godist: {op}: expected a tensor, got {type(t).__name__}")


_ALLREDUCE_OPTS: dict = {}


def _allreduce_opts(op: str):
    o = _ALLREDUCE_OPTS.get(op)
    if o is None:
        o = dist.AllreduceOptions()
        o.reduceOp = reduce_op(op)
        if hasattr(o, "asyncOp"):
            o.asyncOp = False  # the op waits at once: a godist group's synchronous fast path
        _ALLREDUCE_OPTS[op] = o
    return o


def all_reduce_(tensor: Tensor, op: str, group_name: str) -> None:
    """Reduces tensor in place across the ranks of the group."""
    _native_ensure()  # the native kernel (godist._native), loaded on the first call, takes CPU tensors from then on
    _all_reduce_py(tensor, op, group_name)


def _all_reduce_py(tensor: Tensor, op: str, group_name: str) -> None:
    """all_reduce_'s Python kernel: every case the native kernel does not
    take itself reaches it (op godist::_all_reduce_py_), and all of them
    when the native kernel is not loaded. A group whose fast path applies is
    bound in the native kernel after the op, so its next calls skip Python."""
    _check("all_reduce_", tensor)
    opts = _allreduce_opts(op)
    pg = resolve_group(group_name)
    if tensor.is_contiguous():
        pg.allreduce([tensor], opts).wait()
        if _native.loaded():
            _native.bind(group_name, pg, tensor)
        return
    flat = tensor.contiguous()
    pg.allreduce([flat], opts).wait()
    tensor.copy_(flat)


def _native_finish(tensor: Tensor, rc: int, work: int, errbuf: int) -> None:
    """The native kernel's op that did not complete during its call: raise
    its error (status rc, the error buffer at address errbuf), or wait for
    it (work: its handle, Go having queued it behind asynchronous ops), as
    the Python fast path does."""
    from . import _lib
    from .work import finish_sync

    finish_sync("allreduce", [tensor], rc, work & 0xFFFFFFFFFFFFFFFF, _lib.ErrorBuf.from_address(errbuf))


def all_gather(tensor: Tensor, group_name: str) -> Tensor:
    """Every rank's tensor, in rank order, concatenated along dim 0 (a 0-d
    tensor becomes one element per rank)."""
    _check("all_gather", tensor)
    pg = resolve_group(group_name)
    inp = tensor.contiguous().reshape(-1) if tensor.dim() == 0 else tensor.contiguous()
    out = inp.new_empty((pg.size() * inp.shape[0],) + tuple(inp.shape[1:]))
    dist.all_gather_into_tensor(out, inp, group=pg)
    return out


def reduce_scatter(tensor: Tensor, op: str, group_name: str) -> Tensor:
    """This rank's slice of the reduction: dim 0 of tensor (a multiple of
    the group's size) split evenly across the ranks."""
    _check("reduce_scatter", tensor)
    pg = resolve_group(group_name)
    n = pg.size()
    if tensor.dim() == 0 or tensor.shape[0] % n:
        raise ValueError(f"godist: reduce_scatter: dim 0 of the input ({tuple(tensor.shape)}) must be a multiple "
                         f"of the group's size {n}")
    out = tensor.new_empty((tensor.shape[0] // n,) + tuple(tensor.shape[1:]))
    dist.reduce_scatter_tensor(out, tensor.contiguous(), op=reduce_op(op), group=pg)
    return out


def _size(group_name: str) -> int:
    return resolve_group(group_name).size()


def _all_gather_fake(tensor: Tensor, group_name: str) -> Tensor:
    inp = tensor.reshape(-1) if tensor.dim() == 0 else tensor
    return inp.new_empty((_size(group_name) * inp.shape[0],) + tuple(inp.shape[1:]))


def _reduce_scatter_fake(tensor: Tensor, op: str, group_name: str) -> Tensor:
    return tensor.new_empty((tensor.shape[0] // _size(group_name),) + tuple(tensor.shape[1:]))


# Defined with explicit schemas on a torch.library.Library (a few µs per
# call; torch.library.custom_op's wrapper costs about four times that).
_lib = torch.library.Library("godist", "DEF")
_lib.define("all_reduce_(Tensor(a!) tensor, str op, str group_name) -> ()")
_lib.define("all_gather(Tensor tensor, str group_name) -> Tensor")
_lib.define("reduce_scatter(Tensor tensor, str op, str group_name) -> Tensor")
# The native kernel's fallbacks (godist._native, csrc/ops.cpp), called
# from C++.
_lib.define("_all_reduce_py_(Tensor(a!) tensor, str op, str group_name) -> ()")
_lib.define("_native_finish(Tensor tensor, int rc, int work, int errbuf) -> ()")
for _name, _fn in (("all_reduce_", all_reduce_), ("all_gather", all_gather), ("reduce_scatter", reduce_scatter),
                   ("_all_reduce_py_", _all_reduce_py), ("_native_finish", _native_finish)):
    _lib.impl(_name, _fn, "CompositeExplicitAutograd")
torch.library.register_fake("godist::all_reduce_", lambda tensor, op, group_name: None, lib=_lib)
torch.library.register_fake("godist::all_gather", _all_gather_fake, lib=_lib)
torch.library.register_fake("godist::reduce_scatter", _reduce_scatter_fake, lib=_lib)
