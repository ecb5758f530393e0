"""How an op's tensors and arguments reach the library: buffer descriptors
(pointer, length), contiguous stand-ins for non-contiguous outputs, and the
fast paths' godist_call block (capi/call.go, capi/call_2buf.go).

The fast paths (dense contiguous CPU tensors, no profiler, torch telling us
whether the call is synchronous) fill this thread's godist_call block and
make one raw library call; a synchronous one returns a completed Work.
Everything else takes the general path through :func:`godist.work.submit`.
"""

from __future__ import annotations

import struct

import torch
import torch.distributed as dist

from . import _checks, _lib, _types
from ._lib import fill


def _nbytes(t: torch.Tensor) -> int:
    return t.nbytes


def _desc(t: torch.Tensor):
    return (t.data_ptr() if t.numel() else None, _nbytes(t))


class _Outputs:
    """Contiguous stand-ins for non-contiguous output tensors, copied back
    when the op succeeds."""

    def __init__(self):
        self.copies = []

    def prep(self, t: torch.Tensor) -> torch.Tensor:
        if t.is_contiguous():
            return t
        tmp = t.contiguous()
        self.copies.append((t, tmp))
        return tmp

    def finalize(self):
        for dst, src in self.copies:
            dst.copy_(src)

    def finalizer(self):
        return self.finalize if self.copies else None


def _async(opts) -> bool:
    return bool(getattr(opts, "asyncOp", True)) if opts is not None else True


# The fast paths' conditions (see the module's docstring).
_profiling = torch._C._autograd._profiler_enabled
_HAS_ASYNC_FLAG = hasattr(dist.AllreduceOptions(), "asyncOp")
_SUM, _SIMPLE, _TIMEOUTS = _types._SUM, _types._SIMPLE, _types._TIMEOUTS


def _fast2(opts) -> bool:
    """Whether the two-buffer fast paths may run (sync or async)."""
    return _HAS_ASYNC_FLAG and opts is not None and not _lib._forked and not _profiling()


def _sync(opts) -> bool:
    """Whether a synchronous fast path may run."""
    return _fast2(opts) and not opts.asyncOp


def _one(tensors):
    """The tensor of a one-tensor list if the fast paths can take it, else None."""
    if type(tensors) is list and len(tensors) == 1:
        t = tensors[0]
        if _checks.fast_dtype(t) is not None:
            return t
    return None


def _call(fn, pg, t, arg0, arg1, timeout_ms, flags):
    """One raw godist_call_* function fn on tensor t (None: no buffer)
    through this thread's godist_call block, as (status, work handle, error
    buffer); None if an argument does not fit its field (the caller takes
    the general path)."""
    view, addr, blk, eb = _lib.call_block()
    try:
        if t is None:
            fill(view, 0, pg, 0, 0, arg0, arg1, timeout_ms, flags)
        else:
            fill(view, 0, pg, t.data_ptr(), t.nbytes, arg0, arg1, timeout_ms, flags)
    except struct.error:
        return None
    return fn(addr), blk.work, eb


def _chunks(flat: torch.Tensor, n: int):
    """n equal byte ranges of a contiguous tensor as (pointer, nbytes)."""
    nb = _nbytes(flat) // n if n else 0
    base = flat.data_ptr() if flat.numel() else None
    return [((base + i * nb) if base is not None and nb else None, nb) for i in range(n)]
