"""The ops of a :class:`godist._group.Group`: every collective and
point-to-point op, as the group's methods.

Each op method checks its arguments (:mod:`godist._checks`), describes the
tensors' memory to Go in a :class:`godist._lib.GodistOp` (pointer + length;
Go reads and writes it in place), calls the op's entry point and returns a
:class:`godist.work.GodistWork` (:func:`godist.work.submit`). The common
small cases first try the fast paths of :mod:`godist._fast`. Tensors are kept
alive by the Work until the op completes. CUDA tensors go to the group's
device path (``self._device_path()``: :mod:`godist._nccl` or
:mod:`godist._staged`).
"""

from __future__ import annotations

import torch

from . import _checks, _fast, _lib, _types
from ._args import _async, _desc, _Outputs
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

    # ----- helpers ------------------------------------------------------
    # Every op: check its arguments (_checks), describe its buffers in
    # GodistOps (_op), and submit them (work.submit). The fast paths of
    # the common small cases are in _fast.

    def _op(self, opts, timeout_ms=None, ins=None, outs=None, **fields):
        """A GodistOp on this group: the options' timeout (or timeout_ms),
        the lists ins and outs of (pointer, nbytes) pairs, and fields."""
        op = _lib.GodistOp(pg=self._h, timeout_ms=_types.opts_timeout(opts) if timeout_ms is None else timeout_ms,
                           **fields)
        if ins is not None:
            op.ins, op.nins = _lib.buf_list(ins)
        if outs is not None:
            op.outs, op.nouts = _lib.buf_list(outs)
        return op

    def _reduction(self, op, name, t, opts):
        """The dtype, reduce op and factor fields of an op on tensor t."""
        code, factor = _types.reduce_op(getattr(opts, "reduceOp", None))
        return {"dtype": _checks.dtype_code(op, name, t), "reduce_op": code, "factor": factor}

    def _submit(self, op, outputs, calls, outs=None, keep=None, async_op=True):
        fin = outs.finalizer() if outs is not None else None
        return self._track(submit(op, outputs, calls, fin, keep=keep, async_op=async_op))

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
        op = "allreduce"
        t = _checks.single(op, "tensors", tensors)
        red = self._reduction(op, "tensor", t, opts)
        outs = _Outputs()
        buf = outs.prep(t)
        calls = [(self._raw_allreduce, self._op(opts, buf=_desc(buf), **red, **self._details(op, tensor=t)))]
        return self._submit(op, [t], calls, outs, keep=buf, async_op=_async(opts))

    def allreduce_coalesced(self, tensors, opts=None):
        if _on_cuda(tensors):
            return self._device_path().allreduce_coalesced(tensors, opts)
        op = "allreduce_coalesced"
        ts = _checks.tensor_list(op, "tensors", tensors)
        outs = _Outputs()
        calls, keep = [], []
        for i, t in enumerate(ts):
            red = self._reduction(op, f"tensors[{i}]", t, opts)
            buf = outs.prep(t)
            keep.append(buf)
            calls.append((self._raw_allreduce, self._op(opts, buf=_desc(buf), **red,
                                                        **self._details(op, **{f"tensors[{i}]": t}))))
        return self._submit(op, ts, calls, outs, keep=keep, async_op=_async(opts))

    def broadcast(self, tensors, opts=None):
        w = _fast.broadcast(self, tensors, opts)
        if w is not None:
            return w
        if _on_cuda(tensors):
            return self._device_path().broadcast(tensors, opts)
        op = "broadcast"
        t = _checks.single(op, "tensors", tensors)
        root = _checks.rank(op, "root rank", getattr(opts, "rootRank", 0), self._size)
        if getattr(opts, "rootTensor", 0) != 0:
            raise ValueError(f"godist: {op}: rootTensor must be 0 with one tensor per rank, got {opts.rootTensor}")
        outs = _Outputs()
        buf = outs.prep(t)
        calls = [(self._raw_broadcast, self._op(opts, buf=_desc(buf), root=root, dtype=_types.dtype_or_bytes(t),
                                                **self._details(op, tensor=t)))]
        return self._submit(op, [t], calls, outs, keep=buf, async_op=_async(opts))

    def reduce(self, tensors, opts=None):
        if _on_cuda(tensors):
            return self._device_path().reduce(tensors, opts)
        op = "reduce"
        t = _checks.single(op, "tensors", tensors)
        red = self._reduction(op, "tensor", t, opts)
        root = _checks.rank(op, "root rank", getattr(opts, "rootRank", 0), self._size)
        outs = _Outputs()
        buf = outs.prep(t)
        calls = [(self._raw_reduce, self._op(opts, buf=_desc(buf), root=root, **red, **self._details(op, tensor=t)))]
        return self._submit(op, [t], calls, outs, keep=buf, async_op=_async(opts))

    def allgather(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(input_tensors):
            return self._device_path().allgather(output_tensors, input_tensors, opts)
        op = "allgather"
        inp = _checks.single(op, "input_tensors", input_tensors).contiguous()
        if not isinstance(output_tensors, (list, tuple)) or len(output_tensors) != 1:
            raise ValueError(f"godist: {op}: output_tensors must be a list holding one list of tensors")
        out_list = _checks.tensor_list(op, "output_tensors[0]", output_tensors[0], self._size)
        _checks.same_kind(op, "output_tensors[0]", out_list, inp)
        outs = _Outputs()
        bufs = [outs.prep(o) for o in out_list]
        calls = [(self._raw_allgather, self._op(opts, buf=_desc(inp), outs=[_desc(o) for o in bufs],
                                                dtype=_types.dtype_or_bytes(inp),
                                                **self._details(op, output_tensors=out_list, input_tensor=inp)))]
        return self._submit(op, output_tensors, calls, outs, keep=(inp, bufs), async_op=_async(opts))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        if _on_cuda(input_list):
            return self._device_path().allgather_coalesced(output_lists, input_list, opts)
        op = "allgather_coalesced"
        ins = [t.contiguous() for t in _checks.tensor_list(op, "input_list", input_list)]
        if not isinstance(output_lists, (list, tuple)) or len(output_lists) != self._size:
            raise ValueError(f"godist: {op}: output_lists must hold one list per rank ({self._size})")
        for r, lst in enumerate(output_lists):
            _checks.tensor_list(op, f"output_lists[{r}]", lst, len(ins))
        outs = _Outputs()
        calls, keep = [], [ins]
        for i, inp in enumerate(ins):
            col = [output_lists[r][i] for r in range(self._size)]
            _checks.same_kind(op, f"output_lists[*][{i}]", col, inp)
            bufs = [outs.prep(o) for o in col]
            keep.append(bufs)
            calls.append((self._raw_allgather, self._op(opts, buf=_desc(inp), outs=[_desc(o) for o in bufs],
                                                        dtype=_types.dtype_or_bytes(inp),
                                                        **self._details(op, **{f"output_lists[*][{i}]": col,
                                                                               f"input_list[{i}]": inp}))))
        return self._submit(op, output_lists, calls, outs, keep=keep, async_op=_async(opts))

    def _gather_into(self, op, output, input, opts, outs):
        """all_gather_into_tensor's checks and call (outs: the Outputs)."""
        out = _checks.tensor(op, "output", output)
        inp = _checks.tensor(op, "input", input).contiguous()
        if out.dtype != inp.dtype:
            raise TypeError(f"godist: {op}: output has dtype {out.dtype} but input has {inp.dtype}")
        if out.numel() != inp.numel() * self._size:
            raise ValueError(f"godist: {op}: output has {out.numel()} elements, expected input's {inp.numel()} "
                             f"x group size {self._size} = {inp.numel() * self._size}")
        flat = outs.prep(out)
        return (self._raw_allgather, self._op(opts, buf=_desc(inp), out=_desc(flat), dtype=_types.dtype_or_bytes(inp),
                                              **self._details(op, output=out, input=inp))), (inp, flat)

    def all_gather_single(self, output, input, opts=None):
        w = _fast.all_gather_single(self, output, input, opts)
        if w is not None:
            return w
        if _on_cuda(input):
            return self._device_path().all_gather_single(output, input, opts)
        outs = _Outputs()
        call, keep = self._gather_into("all_gather_into_tensor", output, input, opts, outs)
        return self._submit("all_gather_into_tensor", [output], [call], outs, keep=keep, async_op=_async(opts))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        if _on_cuda(inputs):
            return self._device_path().all_gather_single_coalesced(outputs, inputs, opts)
        op = "all_gather_into_tensor_coalesced"
        outputs = _checks.tensor_list(op, "outputs", outputs)
        inputs = _checks.tensor_list(op, "inputs", inputs, len(outputs))
        outs = _Outputs()
        calls, keep = zip(*[self._gather_into(op, o, i, opts, outs) for o, i in zip(outputs, inputs)]) or ((), ())
        return self._submit(op, outputs, list(calls), outs, keep=keep, async_op=_async(opts))

    def gather(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(input_tensors):
            return self._device_path().gather(output_tensors, input_tensors, opts)
        op = "gather"
        inp = _checks.single(op, "input_tensors", input_tensors).contiguous()
        root = _checks.rank(op, "root rank", getattr(opts, "rootRank", 0), self._size)
        outs = _Outputs()
        bufs = []
        if self._rank == root:
            if not isinstance(output_tensors, (list, tuple)) or len(output_tensors) != 1:
                raise ValueError(f"godist: {op}: on the root, output_tensors must be a list holding one list of tensors")
            lst = _checks.tensor_list(op, "output_tensors[0]", output_tensors[0], self._size)
            _checks.same_kind(op, "output_tensors[0]", lst, inp)
            bufs = [outs.prep(o) for o in lst]
        elif output_tensors and any(len(x) for x in output_tensors):
            raise ValueError(f"godist: {op}: output_tensors must be empty on non-root ranks")
        calls = [(self._raw_gather, self._op(opts, buf=_desc(inp), outs=[_desc(o) for o in bufs], root=root,
                                             dtype=_types.dtype_or_bytes(inp), **self._details(op, input_tensor=inp)))]
        return self._submit(op, output_tensors, calls, outs, keep=(inp, bufs), async_op=_async(opts))

    def scatter(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(output_tensors):
            return self._device_path().scatter(output_tensors, input_tensors, opts)
        op = "scatter"
        out = _checks.single(op, "output_tensors", output_tensors)
        root = _checks.rank(op, "root rank", getattr(opts, "rootRank", 0), self._size)
        outs = _Outputs()
        obuf = outs.prep(out)
        lst = []
        if self._rank == root:
            if not isinstance(input_tensors, (list, tuple)) or len(input_tensors) != 1:
                raise ValueError(f"godist: {op}: on the root, input_tensors must be a list holding one list of tensors")
            lst = [t.contiguous() for t in _checks.tensor_list(op, "input_tensors[0]", input_tensors[0], self._size)]
            _checks.same_kind(op, "input_tensors[0]", lst, out)
        elif input_tensors and any(len(x) for x in input_tensors):
            raise ValueError(f"godist: {op}: input_tensors must be empty on non-root ranks")
        calls = [(self._raw_scatter, self._op(opts, out=_desc(obuf), ins=[_desc(t) for t in lst], root=root,
                                              dtype=_types.dtype_or_bytes(out),
                                              **self._details(op, output_tensor=out)))]
        return self._submit(op, output_tensors, calls, outs, keep=(obuf, lst), async_op=_async(opts))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(output_tensors):
            return self._device_path().reduce_scatter(output_tensors, input_tensors, opts)
        op = "reduce_scatter"
        out = _checks.single(op, "output_tensors", output_tensors)
        red = self._reduction(op, "output", out, opts)
        if not isinstance(input_tensors, (list, tuple)) or len(input_tensors) != 1:
            raise ValueError(f"godist: {op}: input_tensors must be a list holding one list of tensors")
        lst = [t.contiguous() for t in _checks.tensor_list(op, "input_tensors[0]", input_tensors[0], self._size)]
        _checks.same_kind(op, "input_tensors[0]", lst, out)
        outs = _Outputs()
        obuf = outs.prep(out)
        calls = [(self._raw_reduce_scatter, self._op(opts, out=_desc(obuf), ins=[_desc(t) for t in lst], **red,
                                                     **self._details(op, output=out, input_tensors=lst)))]
        return self._submit(op, output_tensors, calls, outs, keep=(lst, obuf), async_op=_async(opts))

    def _scatter_from(self, op, output, input, opts, outs):
        """reduce_scatter_tensor's checks and call (outs: the Outputs)."""
        out = _checks.tensor(op, "output", output)
        inp = _checks.tensor(op, "input", input).contiguous()
        red = self._reduction(op, "output", out, opts)
        if out.dtype != inp.dtype:
            raise TypeError(f"godist: {op}: output has dtype {out.dtype} but input has {inp.dtype}")
        if inp.numel() != out.numel() * self._size:
            raise ValueError(f"godist: {op}: input has {inp.numel()} elements, expected output's {out.numel()} "
                             f"x group size {self._size} = {out.numel() * self._size}")
        obuf = outs.prep(out)
        return (self._raw_reduce_scatter, self._op(opts, buf=_desc(inp), out=_desc(obuf), **red,
                                                   **self._details(op, output=out, input=inp))), (inp, obuf)

    def reduce_scatter_single(self, output, input, opts=None):
        w = _fast.reduce_scatter_single(self, output, input, opts)
        if w is not None:
            return w
        if _on_cuda(output):
            return self._device_path().reduce_scatter_single(output, input, opts)
        outs = _Outputs()
        call, keep = self._scatter_from("reduce_scatter_tensor", output, input, opts, outs)
        return self._submit("reduce_scatter_tensor", [output], [call], outs, keep=keep, async_op=_async(opts))

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        if _on_cuda(outputs):
            return self._device_path().reduce_scatter_single_coalesced(outputs, inputs, opts)
        op = "reduce_scatter_tensor_coalesced"
        outputs = _checks.tensor_list(op, "outputs", outputs)
        inputs = _checks.tensor_list(op, "inputs", inputs, len(outputs))
        outs = _Outputs()
        calls, keep = zip(*[self._scatter_from(op, o, i, opts, outs) for o, i in zip(outputs, inputs)]) or ((), ())
        return self._submit(op, outputs, list(calls), outs, keep=keep, async_op=_async(opts))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if _on_cuda(input_tensors):
            return self._device_path().alltoall(output_tensors, input_tensors, opts)
        op = "alltoall"
        ins = [t.contiguous() for t in _checks.tensor_list(op, "input_tensors", input_tensors, self._size)]
        outl = _checks.tensor_list(op, "output_tensors", output_tensors, self._size)
        for i, (o, t) in enumerate(zip(outl, ins)):
            if o.dtype != t.dtype:
                raise TypeError(f"godist: {op}: output_tensors[{i}] has dtype {o.dtype} but input_tensors[{i}] has {t.dtype}")
        outs = _Outputs()
        obufs = [outs.prep(o) for o in outl]
        dt = _types.dtype_or_bytes(ins[0]) if ins and all(t.dtype == ins[0].dtype for t in ins) else -1
        calls = [(self._raw_alltoall, self._op(opts, ins=[_desc(t) for t in ins], outs=[_desc(o) for o in obufs],
                                               dtype=dt))]
        return self._submit(op, output_tensors, calls, outs, keep=(ins, obufs), async_op=_async(opts))

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, opts=None):
        w = _fast.all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts)
        if w is not None:
            return w
        if _on_cuda(input):
            return self._device_path().all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)
        op = "all_to_all_single"
        out = _checks.tensor(op, "output", output)
        inp = _checks.tensor(op, "input", input).contiguous()
        if out.dtype != inp.dtype:
            raise TypeError(f"godist: {op}: output has dtype {out.dtype} but input has {inp.dtype}")
        outs = _Outputs()
        obuf = outs.prep(out)
        ins = _checks.rows(op, "input", inp, input_split_sizes, self._size)
        outl = _checks.rows(op, "output", obuf, output_split_sizes, self._size)
        calls = [(self._raw_alltoall, self._op(opts, ins=ins, outs=outl, dtype=_types.dtype_or_bytes(inp)))]
        return self._submit(op, [output], calls, outs, keep=(inp, obuf), async_op=_async(opts))

    def barrier(self, opts=None):
        if self._dev is not None and hasattr(self._dev, "barrier") and self._dev_active():
            return self._dev.barrier(opts)
        w = _fast.barrier(self, opts)
        if w is not None:
            return w
        return self._submit("barrier", [], [(self._raw_barrier, self._op(opts))], async_op=_async(opts))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """A barrier whose failure names late ranks: on rank 0 the error lists
        the ranks that did not arrive within timeout (all of them with
        wait_all_ranks, else the first); the other ranks fail too."""
        ms = _types.timeout_ms(timeout) if timeout is not None else self._timeout_ms()
        calls = [(self._raw_monitored_barrier, self._op(None, timeout_ms=ms, wait_all=1 if wait_all_ranks else 0))]
        return self._submit("monitored_barrier", [], calls, async_op=False)

    # ----- point to point -----------------------------------------------
    def send(self, tensors, dstRank, tag=0):
        w = _fast.send(self, tensors, dstRank, tag)
        if w is not None:
            return w
        if _on_cuda(tensors):
            return self._device_path().send(tensors, dstRank, tag)
        op = "send"
        t = _checks.single(op, "tensors", tensors).contiguous()
        dst = _checks.rank(op, "destination rank", dstRank, self._size)
        calls = [(self._raw_send, self._op(None, buf=_desc(t), peer=dst, tag=_checks.tag(op, tag)))]
        # Sends are eager: done when the call returns, so no completion hop.
        return self._submit(op, [t], calls, keep=t, async_op=False)

    def recv(self, tensors, srcRank, tag=0):
        w = _fast.recv(self, tensors, srcRank, tag)
        if w is not None:
            return w
        if _on_cuda(tensors):
            return self._device_path().recv(tensors, srcRank, tag)
        op = "recv"
        t = _checks.single(op, "tensors", tensors)
        src = _checks.rank(op, "source rank", srcRank, self._size)
        return self._recv(op, t, src, tag)

    def recv_anysource(self, tensors, tag=0):
        if _on_cuda(tensors):
            return self._device_path().recv_anysource(tensors, tag)
        t = _checks.single("recv", "tensors", tensors)
        return self._recv("recv", t, -1, tag)

    recvAnysource = recv_anysource

    def _recv(self, op, t, src, tag):
        outs = _Outputs()
        buf = outs.prep(t)
        calls = [(self._raw_recv, self._op(None, buf=_desc(buf), peer=src, tag=_checks.tag(op, tag)))]
        return self._submit(op, [t], calls, outs, keep=buf, async_op=True)

    # ----- names torch used before the 2.13 rename ------------------------
    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single
