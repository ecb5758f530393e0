"""Futures whose value torch's C++ can read as a TensorList.

A ``torch.futures.Future`` made in Python holds a Python object: its
constructor takes no type. torch's C++ mostly copes (DDP's reducer unwraps
Python lists), but the built-in DDP compress hooks (``FP16_COMPRESS``,
``BF16_COMPRESS``: torch/csrc/distributed/c10d/default_comm_hooks.cpp)
assert that the future of the half-precision all_reduce they issue holds a
C++ TensorList. For the works of half-precision tensors godist therefore
makes the future through TorchScript, which types what it returns:
``torch._C.fork`` of a finished work's tensors, and for a pending work a
scripted ``torch.jit.fork`` of ``godist::_await_work``, which completes on
one of torch's inter-op threads when the op does (or fails with its error).

Only those works take this path (it costs a thread of torch's pool while the
op runs); where TorchScript is missing the future holds a Python list, as
every other work's does.
"""

import itertools
import threading
import warnings
from typing import List

import torch

HALF = (torch.float16, torch.bfloat16)

_pending = {}  # id -> GodistWork, until its _await_work runs
_ids = itertools.count(1)
_lock = threading.Lock()
_launch = None  # the scripted _fork_await, made on first use

_lib = torch.library.Library("godist", "FRAGMENT")
_lib.define("_await_work(int id) -> Tensor[]")


def _await_work(id: int):
    work = _pending.pop(id)
    work.wait()
    return list(work._outputs)


_lib.impl("_await_work", _await_work, "CompositeExplicitAutograd")


def _awaited(id: int) -> List[torch.Tensor]:
    return torch.ops.godist._await_work(id)


def _fork_await(id: int) -> torch.jit.Future[List[torch.Tensor]]:
    return torch.jit.fork(_awaited, id)


def _same(x):
    return x


def wanted(outputs) -> bool:
    """Whether a work of outputs gets a TensorList future: a list of
    half-precision tensors (what the compress hooks all_reduce)."""
    return (isinstance(outputs, list) and len(outputs) > 0
            and all(isinstance(t, torch.Tensor) and t.dtype in HALF for t in outputs))


def finished(outputs):
    """A completed future holding outputs as a TensorList, or None."""
    try:
        return torch._C.fork(_same, outputs)
    except (AttributeError, RuntimeError):
        return None


def pending(work):
    """A future that completes with work's outputs as a TensorList when
    work does, or None."""
    global _launch
    try:
        with _lock:
            if _launch is None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # torch.jit.script is deprecated in torch 2.15
                    _launch = torch.jit.script(_fork_await)
        id = next(_ids)
        _pending[id] = work
        return _launch(id)
    except (AttributeError, RuntimeError):
        return None
