"""The fast paths: one library call for the common forms of the small ops.

A small all_reduce's Python side costs about as much as its Go side, so the
common cases skip the general path of :mod:`godist._group` (checks,
a fresh :class:`godist._lib.GodistOp`, :func:`godist.work.submit`): they
take dense contiguous CPU tensors of a supported dtype, no profiler, and
torch telling us whether the call is synchronous (``opts.asyncOp``), write
this thread's godist_op block with one ``struct.pack_into``
(:func:`godist._lib.op_block`) and make one raw call. A synchronous one
returns a completed Work. Each function returns None when its case does not
apply, and the caller takes the general path, whose checks explain what is
wrong.
"""

from __future__ import annotations

import struct

import torch
import torch.distributed as dist

from . import _errors, _lib, _types
from ._lib import ASYNC, OUT_AT, TAG_AT, fill, fill_out, fill_tag
from .work import _Done, adopt, finish_sync

_Tensor, _STRIDED, _DTYPES, _OK = torch.Tensor, torch.strided, _types.DTYPE_CODES, _errors.OK
_profiling = torch._C._autograd._profiler_enabled
_HAS_ASYNC_FLAG = hasattr(dist.AllreduceOptions(), "asyncOp")
_SUM = dist.ReduceOp.SUM
_SIMPLE = frozenset(range(_types.PREMUL_SUM))  # the reduce ops without a factor


def _hash_is_code() -> bool:
    """Whether hash() of an options object's reduceOp is its op code, for
    every op (torch defines ReduceOp.__hash__ as the code): the fast paths
    then read the code with one call instead of a comparison and two
    attribute reads."""
    try:
        for code, name in _types.OP_NAMES.items():
            if code not in _SIMPLE:
                continue
            o = dist.AllreduceOptions()
            o.reduceOp = getattr(dist.ReduceOp, name)
            if hash(o.reduceOp) != code:
                return False
        return hash(dist._make_nccl_premul_sum(2.0)) not in _SIMPLE
    except Exception:
        return False


_HASH_IS_CODE = _hash_is_code()


def _op_code(rop) -> int:
    """The code of a reduceOp (a PREMUL_SUM's is not in _SIMPLE)."""
    return hash(rop) if _HASH_IS_CODE else 0 if rop == _SUM else rop.op.value


_TIMEOUTS: dict = {}


def _timeout(opts) -> int:
    """The options' timeout in milliseconds, cached by value (ops keep
    passing the same few)."""
    td = opts.timeout
    ms = _TIMEOUTS.get(td)
    if ms is None:
        ms = _types.timeout_ms(td)
        if len(_TIMEOUTS) < 64:
            _TIMEOUTS[td] = ms
    return ms


def _dtype(t):
    """The dtype code of a dense, contiguous CPU tensor of a supported dtype,
    else None."""
    if isinstance(t, _Tensor) and t.layout is _STRIDED and t.is_cpu and t.is_contiguous():
        return _DTYPES.get(t.dtype)
    return None


def _usable(pg, opts) -> bool:
    """Whether a fast path may run for an op with these options (not under
    TORCH_DISTRIBUTED_DEBUG=DETAIL, whose descriptions the general path
    writes)."""
    return _HAS_ASYNC_FLAG and opts is not None and not _lib._forked and not _profiling() and not pg._detail


def _one(tensors):
    """The tensor of a one-tensor list if the fast paths can take it, else None."""
    if type(tensors) is list and len(tensors) == 1:
        t = tensors[0]
        if _dtype(t) is not None:
            return t
    return None


def _call(fn, pg, t, timeout_ms, flags, root=0, peer=0, tag=0, dt=-1):
    """One raw entry point fn on tensor t (None: no buffer) of dtype code dt
    through this thread's block, as (status, work handle, error buffer);
    None if an argument does not fit its field."""
    view, addr, blk, eb = _lib.op_block()
    try:
        fill(view, 0, pg, t.data_ptr() if t is not None else 0, t.nbytes if t is not None else 0, timeout_ms, flags,
             dt, 0, root, peer)
        fill_tag(view, TAG_AT, tag)
    except struct.error:
        return None
    return fn(addr), blk.work, eb


def allreduce(pg, tensors, opts, synced=None):
    """all_reduce of one tensor with a reduce op other than PREMUL_SUM,
    written out in full: the smallest and most frequent op. A synchronous
    op that completed returns ``synced`` when it is given (a caller that
    needs no Work), else a completed Work."""
    if _HAS_ASYNC_FLAG and opts is not None and not _lib._forked and not _profiling() and type(tensors) is list \
            and len(tensors) == 1 and not pg._detail:
        t = tensors[0]
        dt = _DTYPES.get(t.dtype) if isinstance(t, _Tensor) and t.layout is _STRIDED and t.is_cpu \
            and t.is_contiguous() else None
        rop = opts.reduceOp
        code = hash(rop) if _HASH_IS_CODE else 0 if rop == _SUM else rop.op.value  # _op_code, inline
        if dt is not None and code in _SIMPLE:
            flags = ASYNC if opts.asyncOp else 0
            ms = _TIMEOUTS.get(opts.timeout)
            view, addr, blk, eb = _lib.op_block()
            fill(view, 0, pg._h, t.data_ptr(), t.nbytes, ms if ms is not None else _timeout(opts), flags, dt, code,
                 0, 0)
            rc = pg._raw_allreduce(addr)
            if not flags:
                if rc == _OK and not blk.work and pg._coalesced is None:
                    if synced is not None:
                        return synced
                    w = _Done()  # finish_sync's success, inline
                    w._op, w._outputs = "allreduce", tensors
                    return w
                return pg._track(finish_sync("allreduce", tensors, rc, blk.work, eb))
            if rc != _OK:
                return pg._track(finish_sync("allreduce", tensors, rc, blk.work, eb))
            return pg._track(adopt("allreduce", tensors, blk.work, keep=t))
    return None


def broadcast(pg, tensors, opts):
    """A synchronous broadcast of one tensor."""
    if _usable(pg, opts) and not opts.asyncOp:
        t = _one(tensors)
        root = opts.rootRank
        if t is not None and opts.rootTensor == 0 and type(root) is int and 0 <= root < pg._size:
            r = _call(pg._raw_broadcast, pg._h, t, _timeout(opts), 0, root=root, dt=_DTYPES[t.dtype])
            if r is not None:
                return pg._track(finish_sync("broadcast", tensors, *r))
    return None


def barrier(pg, opts):
    """A synchronous barrier."""
    if _usable(pg, opts) and not opts.asyncOp:
        r = _call(pg._raw_barrier, pg._h, None, _timeout(opts), 0)
        if r is not None:
            return pg._track(finish_sync("barrier", [], *r))
    return None


def send(pg, tensors, dst, tag):
    """A send of one tensor. Sends are eager: done when the call returns."""
    t = _one(tensors)
    if t is not None and type(dst) is int and 0 <= dst < pg._size and not _lib._forked and not _profiling():
        r = _call(pg._raw_send, pg._h, t, 0, 0, peer=dst, tag=tag)
        if r is not None:
            return pg._track(finish_sync("send", tensors, *r))
    return None


def recv(pg, tensors, src, tag):
    """A receive of one tensor from one rank. A message already here
    completes it during the call; otherwise the Work holds its handle like
    any asynchronous op."""
    t = _one(tensors)
    if t is not None and type(src) is int and 0 <= src < pg._size and not _lib._forked and not _profiling():
        r = _call(pg._raw_recv, pg._h, t, 0, 0, peer=src, tag=tag)
        if r is not None:
            rc, work, eb = r
            if rc == _OK and work:
                return pg._track(adopt("recv", tensors, work, keep=t))
            return pg._track(finish_sync("recv", tensors, rc, work, eb, src))
    return None


def _two(pg, fn, op, inp, out, dt, code, opts):
    """A two-buffer op on contiguous CPU tensors inp and out, split evenly
    (capi/ops.go), synchronous or asynchronous."""
    flags = ASYNC if opts.asyncOp else 0
    view, addr, blk, eb = _lib.op_block()
    fill(view, 0, pg._h, inp.data_ptr(), inp.nbytes, _timeout(opts), flags, dt, code, 0, 0)
    fill_out(view, OUT_AT, out.data_ptr(), out.nbytes)
    rc = fn(addr)
    if not flags or rc != _OK:
        return pg._track(finish_sync(op, [out], rc, blk.work, eb))
    return pg._track(adopt(op, [out], blk.work, keep=(inp, out)))


def all_gather_single(pg, output, input, opts):
    """all_gather_into_tensor."""
    if _usable(pg, opts):
        dt = _dtype(input)
        if dt is not None and _dtype(output) == dt and output.numel() == input.numel() * pg._size:
            return _two(pg, pg._raw_allgather, "all_gather_into_tensor", input, output, dt, 0, opts)
    return None


def reduce_scatter_single(pg, output, input, opts):
    """reduce_scatter_tensor with a reduce op other than PREMUL_SUM."""
    if _usable(pg, opts):
        dt = _dtype(input)
        code = _op_code(opts.reduceOp)
        if dt is not None and code in _SIMPLE and _dtype(output) == dt and input.numel() == output.numel() * pg._size:
            return _two(pg, pg._raw_reduce_scatter, "reduce_scatter_tensor", input, output, dt, code, opts)
    return None


def all_to_all_single(pg, output, input, output_split_sizes, input_split_sizes, opts):
    """all_to_all_single without split sizes."""
    if _usable(pg, opts) and not output_split_sizes and not input_split_sizes:
        dt = _dtype(input)
        n = pg._size
        if dt is not None and _dtype(output) == dt and input.dim() and output.dim() and \
                input.shape[0] % n == 0 and output.shape[0] % n == 0 and input.nbytes == output.nbytes:
            return _two(pg, pg._raw_alltoall, "all_to_all_single", input, output, dt, 0, opts)
    return None
