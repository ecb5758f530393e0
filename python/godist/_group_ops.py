"""The ops of a :class:`godist._group.Group`: every collective and
point-to-point op, as the group's methods.

Each op method takes the op's fast path (:mod:`godist._fast`) when its case
applies; else CUDA tensors go to the group's device path
(``self._device_path()``: :mod:`godist._nccl` or :mod:`godist._staged`),
and CPU tensors are checked and described by :mod:`godist._describe` (the
description every device path shares) and run by :meth:`GroupOps._run`:
each call's :class:`godist._lib.GodistOp` (pointer + length of each buffer;
Go reads and writes them in place) goes to its entry point through
:func:`godist.work.submit`, which returns the
:class:`godist.work.GodistWork`. Tensors are kept alive by the Work until
the op completes.
"""

from __future__ import annotations

import torch

from . import _describe, _fast, _lib, _types
from ._args import _async
from ._describe import CPU as _CPU
from .work import submit


def _on_cuda(x) -> bool:
    """Whether an op's first tensor (x, or the first of a list of lists) is a
    CUDA tensor: the op then goes to the group's device path."""
    while isinstance(x, (list, tuple)):
        if not x:
            return False
        x = x[0]
    return isinstance(x, torch.Tensor) and x.is_cuda


class GroupOps:
    """The op methods of Group (which holds the handle, rank, size and
    the device path they use)."""

    # ----- running an op ------------------------------------------------
    def _run(self, d, async_op=None):
        """Submit the calls of description d (godist._describe) and return
        its Work (async_op: the op's own choice, else the options')."""
        ms, h, block = _types.opts_timeout(d.opts), self._h, _describe.block
        if self._detail:  # TORCH_DISTRIBUTED_DEBUG=DETAIL: each call describes its tensors
            calls = [(getattr(self, "_raw_" + entry), block(h, ms, fields, **self._details(d.op, **named)))
                     for entry, fields, named in d.calls]
        elif len(d.calls) == 1:
            entry, fields, _ = d.calls[0]
            calls = [(getattr(self, "_raw_" + entry), block(h, ms, fields))]
        else:
            calls = [(getattr(self, "_raw_" + entry), block(h, ms, fields)) for entry, fields, _ in d.calls]
        return self._track(submit(d.op, d.outputs, calls, d.outs.finalizer(), keep=d.keep,
                                  async_op=_async(d.opts) if async_op is None else async_op))

    def _op(self, opts, timeout_ms=None, **fields):
        """A GodistOp on this group with no buffers (the barriers): the
        options' timeout (or timeout_ms), and fields."""
        return _lib.GodistOp(pg=self._h, timeout_ms=_types.opts_timeout(opts) if timeout_ms is None else timeout_ms,
                             **fields)

    # ----- collectives --------------------------------------------------
    def allreduce(self, tensors, opts=None):
        w = _fast.allreduce(self, tensors, opts)
        if w is not None:
            return w
        return self._allreduce(tensors, opts)

    def _allreduce(self, tensors, opts):
        """allreduce past its fast path."""
        if _on_cuda(tensors):
            return self._device_path().allreduce(tensors, opts)
        return self._run(_describe.allreduce(_CPU, self, tensors, opts))

    def allreduce_coalesced(self, tensors, opts=None):
        if _on_cuda(tensors):
            return self._device_path().allreduce_coalesced(tensors, opts)
        return self._run(_describe.allreduce_coalesced(_CPU, self, tensors, opts))

    def broadcast(self, tensors, opts=None):
        w = _fast.broadcast(self, tensors, opts)
        if w is not None:
            return w
        if _on_cuda(tensors):
            return self._device_path().broadcast(tensors, opts)
        return self._run(_describe.broadcast(_CPU, self, tensors, opts))

    def reduce(self, tensors, opts=None):
        if _on_cuda(tensors):
            return self._device_path().reduce(tensors, opts)
        return self._run(_describe.reduce(_CPU, self, tensors, opts))

    def allgather(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(input_tensors):
            return self._device_path().allgather(output_tensors, input_tensors, opts)
        return self._run(_describe.allgather(_CPU, self, output_tensors, input_tensors, opts))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        if _on_cuda(input_list):
            return self._device_path().allgather_coalesced(output_lists, input_list, opts)
        return self._run(_describe.allgather_coalesced(_CPU, self, output_lists, input_list, opts))

    def all_gather_single(self, output, input, opts=None):
        w = _fast.all_gather_single(self, output, input, opts)
        if w is not None:
            return w
        if _on_cuda(input):
            return self._device_path().all_gather_single(output, input, opts)
        return self._run(_describe.all_gather_single(_CPU, self, output, input, opts))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        if _on_cuda(inputs):
            return self._device_path().all_gather_single_coalesced(outputs, inputs, opts)
        return self._run(_describe.all_gather_single_coalesced(_CPU, self, outputs, inputs, opts))

    def gather(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(input_tensors):
            return self._device_path().gather(output_tensors, input_tensors, opts)
        return self._run(_describe.gather(_CPU, self, output_tensors, input_tensors, opts))

    def scatter(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(output_tensors):
            return self._device_path().scatter(output_tensors, input_tensors, opts)
        return self._run(_describe.scatter(_CPU, self, output_tensors, input_tensors, opts))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(output_tensors):
            return self._device_path().reduce_scatter(output_tensors, input_tensors, opts)
        return self._run(_describe.reduce_scatter(_CPU, self, output_tensors, input_tensors, opts))

    def reduce_scatter_single(self, output, input, opts=None):
        w = _fast.reduce_scatter_single(self, output, input, opts)
        if w is not None:
            return w
        if _on_cuda(output):
            return self._device_path().reduce_scatter_single(output, input, opts)
        return self._run(_describe.reduce_scatter_single(_CPU, self, output, input, opts))

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        if _on_cuda(outputs):
            return self._device_path().reduce_scatter_single_coalesced(outputs, inputs, opts)
        return self._run(_describe.reduce_scatter_single_coalesced(_CPU, self, outputs, inputs, opts))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(input_tensors):
            return self._device_path().alltoall(output_tensors, input_tensors, opts)
        return self._run(_describe.alltoall(_CPU, self, output_tensors, input_tensors, opts))

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, opts=None):
        w = _fast.all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts)
        if w is not None:
            return w
        if _on_cuda(input):
            return self._device_path().all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)
        return self._run(_describe.all_to_all_single(_CPU, self, output, input, output_split_sizes,
                                                     input_split_sizes, opts))

    def barrier(self, opts=None):
        if self._dev is not None and hasattr(self._dev, "barrier") and self._dev_active():
            return self._dev.barrier(opts)
        w = _fast.barrier(self, opts)
        if w is not None:
            return w
        return self._track(submit("barrier", [], [(self._raw_barrier, self._op(opts))], async_op=_async(opts)))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """A barrier whose failure names late ranks: on rank 0 the error lists
        the ranks that did not arrive within timeout (all of them with
        wait_all_ranks, else the first); the other ranks fail too."""
        ms = _types.timeout_ms(timeout) if timeout is not None else self._timeout_ms()
        calls = [(self._raw_monitored_barrier, self._op(None, timeout_ms=ms, wait_all=1 if wait_all_ranks else 0))]
        return self._track(submit("monitored_barrier", [], calls, async_op=False))

    # ----- point to point -----------------------------------------------
    def send(self, tensors, dstRank, tag=0):
        w = _fast.send(self, tensors, dstRank, tag)
        if w is not None:
            return w
        if _on_cuda(tensors):
            return self._device_path().send(tensors, dstRank, tag)
        # Sends are eager: done when the call returns, so no completion hop.
        return self._run(_describe.send(_CPU, self, tensors, dstRank, tag), async_op=False)

    def recv(self, tensors, srcRank, tag=0):
        w = _fast.recv(self, tensors, srcRank, tag)
        if w is not None:
            return w
        if _on_cuda(tensors):
            return self._device_path().recv(tensors, srcRank, tag)
        return self._run(_describe.recv(_CPU, self, tensors, srcRank, tag), async_op=True)

    def recv_anysource(self, tensors, tag=0):
        if _on_cuda(tensors):
            return self._device_path().recv_anysource(tensors, tag)
        return self._run(_describe.recv_anysource(_CPU, self, tensors, tag), async_op=True)

    recvAnysource = recv_anysource

    # ----- names torch used before the 2.13 rename ------------------------
    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single
