"""GodistProcessGroup: the torch ProcessGroup whose collectives run in Go.

Each method checks its arguments (:mod:`godist._checks`), describes the
tensors' memory to Go (pointer + length; Go reads and writes it in place) and
returns a :class:`godist.work.GodistWork` (the helpers for buffers and for
the fast paths' call block are in :mod:`godist._args`). Tensors are kept
alive by the Work until the op completes. Both the old and the new c10d
method names are defined (see the aliases at the end of the class), so
every torch version and both Python and C++ callers reach them.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import threading
import weakref

import torch
import torch.distributed as dist

from . import _checks, _errors, _lib, _rendezvous, _types
from ._args import (_HAS_ASYNC_FLAG, _SIMPLE, _SUM, _TIMEOUTS, _async, _call, _chunks, _desc, _fast2, _nbytes, _one,
                    _Outputs, _profiling, _sync)
from ._lib import ASYNC, OUT_AT, fill, fill_out
from .work import GodistWork, _Done, adopt, combine, finish_sync, submit

# The all_reduce fast path's names, bound once.
_Tensor, _STRIDED, _DTYPES, _OK = torch.Tensor, torch.strided, _types.DTYPE_CODES, _errors.OK
_HASH_IS_CODE = _types.HASH_IS_CODE

_live = weakref.WeakSet()
_live_lock = threading.Lock()


class GodistProcessGroup(dist.ProcessGroup):
    """A process group backed by godist's Go engine (CPU tensors)."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta | None = None, group_name: str = ""):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._store = store
        self._timeout = timeout if timeout is not None and timeout.total_seconds() > 0 else _types.default_timeout()
        self._name = group_name or "godist"
        self._seq = 0
        self._coalesced = None
        self._closed = False
        self._close_lock = threading.Lock()
        lib = _lib.load()
        h = ctypes.c_uint64()
        bind = os.environ.get("GODIST_BIND_ADDR", "").encode()
        transport = os.environ.get("GODIST_TRANSPORT", "auto").strip().lower()
        if transport not in ("auto", "tcp", ""):
            raise ValueError(f"godist: GODIST_TRANSPORT={transport!r}: use 'auto' (shared memory between ranks on "
                             "one host, TCP otherwise) or 'tcp'")
        lib.pg_create(rank, size, self._name.encode(), self._timeout_ms(), bind or None,
                      b"tcp" if transport == "tcp" else None, ctypes.byref(h))
        self._h = h.value
        raw = lib.raw
        self._call_allreduce, self._call_broadcast = raw.call_allreduce, raw.call_broadcast
        self._call_barrier, self._call_send, self._call_recv = raw.call_barrier, raw.call_send, raw.call_recv
        self._call_allgather, self._call_reduce_scatter = raw.call_allgather, raw.call_reduce_scatter
        self._call_alltoall = raw.call_alltoall
        try:
            if size > 1:
                _rendezvous.exchange(store, rank, size, self._h, self._timeout, self._name)
        except BaseException:
            self._close()
            raise
        with _live_lock:
            _live.add(self)

    # ----- identity -----------------------------------------------------
    def getBackendName(self) -> str:
        return "godist"

    # torch's C++ ProcessGroup keeps the group name on its backends, and a
    # Python ProcessGroup has none: without these trampoline overrides
    # _set_group_name is lost and pg.group_name raises "ProcessGroup name not
    # set" (breaking DeviceMesh, DTensor, functional collectives, FSDP2).
    def setGroupName(self, name: str) -> None:
        self._group_name = name

    def getGroupName(self) -> str:
        return getattr(self, "_group_name", None) or self._name

    def _timeout_ms(self) -> int:
        return max(1, int(self._timeout.total_seconds() * 1000))

    def _get_backend(self, device=None):
        return self

    @property
    def supports_coalescing(self) -> bool:
        return False

    def _get_sequence_number_for_group(self) -> int:
        seq = ctypes.c_uint64()
        _lib.load().pg_seq(self._h, ctypes.byref(seq))
        return seq.value

    def _set_sequence_number_for_group(self) -> None:
        pass

    @property
    def shared_memory(self) -> bool:
        """Whether this group's collectives run over shared memory."""
        flag = ctypes.c_int32()
        _lib.load().pg_info(self._h, ctypes.byref(flag))
        return bool(flag.value)

    def __repr__(self):
        return f"GodistProcessGroup(rank={self._rank}, size={self._size}, group={self._name!r})"

    # ----- coalescing ---------------------------------------------------
    def _track(self, work):
        """Record work issued between _start_coalescing and _end_coalescing."""
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def _start_coalescing(self, device=None):
        if self._coalesced is not None:
            raise RuntimeError("godist: _start_coalescing called while already coalescing")
        self._coalesced = []

    def _end_coalescing(self, device=None):
        works, self._coalesced = self._coalesced, None
        if works is None:
            raise RuntimeError("godist: _end_coalescing called without _start_coalescing")
        return combine("coalesced", works)

    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing

    # ----- lifecycle ----------------------------------------------------
    def _close(self):
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            _lib.load().pg_close(self._h)
        except Exception:
            pass

    def shutdown(self, *args, **kwargs):
        """Close the group gracefully: peers are told this rank is leaving."""
        self._close()

    def abort(self, *args, **kwargs):
        """Fail every pending op of this group at once and drop its connections."""
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

    # ----- helpers ------------------------------------------------------
    def _t(self, opts) -> int:
        return _types.opts_timeout(opts)

    def _bufs(self, pairs):
        return _lib.bufs(pairs)

    def _call2(self, fn, op, inp, out, arg0, arg1, opts):
        """The fast path of a two-buffer op (capi/call_2buf.go): one raw
        call fn with contiguous CPU tensors inp and out (even splits) in
        this thread's godist_call block. The caller checked _fast2(opts)."""
        flags = ASYNC if opts.asyncOp else 0
        ms = _TIMEOUTS.get(opts.timeout)
        view, addr, blk, eb = _lib.call_block()
        fill(view, 0, self._h, inp.data_ptr(), inp.nbytes, arg0, arg1,
             ms if ms is not None else _types.fast_timeout(opts), flags)
        fill_out(view, OUT_AT, out.data_ptr(), out.nbytes)
        rc = fn(addr)
        if not flags or rc != _errors.OK:
            return self._track(finish_sync(op, [out], rc, blk.work, eb))
        return self._track(adopt(op, [out], blk.work, keep=(inp, out)))

    # ----- collectives --------------------------------------------------
    def allreduce(self, tensors, opts=None):
        # The fast path (one raw call, see _sync) written out in full: a
        # small all_reduce's Python side costs about as much as its Go side.
        if _HAS_ASYNC_FLAG and opts is not None and not _lib._forked and not _profiling():
            if type(tensors) is list and len(tensors) == 1:
                t = tensors[0]
                # _checks.fast_dtype, inline
                dt = _DTYPES.get(t.dtype) if isinstance(t, _Tensor) and t.layout is _STRIDED and t.is_cpu \
                    and t.is_contiguous() else None
                rop = opts.reduceOp
                code = hash(rop) if _HASH_IS_CODE else 0 if rop == _SUM else rop.op.value
                if dt is not None and code in _SIMPLE:
                    flags = ASYNC if opts.asyncOp else 0
                    ms = _TIMEOUTS.get(opts.timeout)
                    view, addr, blk, eb = _lib.call_block()
                    fill(view, 0, self._h, t.data_ptr(), t.nbytes, dt, code,
                         ms if ms is not None else _types.fast_timeout(opts), flags)
                    rc = self._call_allreduce(addr)
                    if not flags:
                        if rc == _OK and not blk.work and self._coalesced is None:
                            w = _Done()  # finish_sync's success, inline
                            w._op, w._outputs = "allreduce", tensors
                            return w
                        return self._track(finish_sync("allreduce", tensors, rc, blk.work, eb))
                    if rc != _OK:
                        return self._track(finish_sync("allreduce", tensors, rc, blk.work, eb))
                    return self._track(adopt("allreduce", tensors, blk.work, keep=t))
        op = "allreduce"
        t = _checks.single(op, "tensors", tensors)
        dt = _checks.dtype_code(op, "tensor", t)
        code, factor = _types.reduce_op(getattr(opts, "reduceOp", None))
        outs = _Outputs()
        buf = outs.prep(t)
        b = self._bufs([_desc(buf)])
        timeout, lib, h = self._t(opts), _lib.load(), self._h
        calls = [lambda fl, w: lib.allreduce(h, b, dt, code, factor, timeout, fl, w)]
        return self._track(submit(op, [t], calls, outs.finalizer(), keep=(buf, b), async_op=_async(opts)))

    def allreduce_coalesced(self, tensors, opts=None):
        op = "allreduce_coalesced"
        ts = _checks.tensor_list(op, "tensors", tensors)
        code, factor = _types.reduce_op(getattr(opts, "reduceOp", None))
        outs = _Outputs()
        timeout, lib, h = self._t(opts), _lib.load(), self._h
        calls, keep = [], []
        for i, t in enumerate(ts):
            dt = _checks.dtype_code(op, f"tensors[{i}]", t)
            buf = outs.prep(t)
            b = self._bufs([_desc(buf)])
            keep += [buf, b]
            calls.append(lambda fl, w, b=b, dt=dt: lib.allreduce(h, b, dt, code, factor, timeout, fl, w))
        return self._track(submit(op, ts, calls, outs.finalizer(), keep=keep, async_op=_async(opts)))

    def broadcast(self, tensors, opts=None):
        if _sync(opts):
            t = _one(tensors)
            root = opts.rootRank
            r = None
            if t is not None and opts.rootTensor == 0 and type(root) is int and 0 <= root < self._size:
                r = _call(self._call_broadcast, self._h, t, root, 0, _types.fast_timeout(opts), 0)
            if r is not None:
                return self._track(finish_sync("broadcast", tensors, *r))
        op = "broadcast"
        t = _checks.single(op, "tensors", tensors)
        root = _checks.rank(op, "root rank", getattr(opts, "rootRank", 0), self._size)
        if getattr(opts, "rootTensor", 0) != 0:
            raise ValueError(f"godist: {op}: rootTensor must be 0 with one tensor per rank, got {opts.rootTensor}")
        outs = _Outputs()
        buf = outs.prep(t)
        b = self._bufs([_desc(buf)])
        timeout, lib, h = self._t(opts), _lib.load(), self._h
        calls = [lambda fl, w: lib.broadcast(h, b, root, timeout, fl, w)]
        return self._track(submit(op, [t], calls, outs.finalizer(), keep=(buf, b), async_op=_async(opts)))

    def reduce(self, tensors, opts=None):
        op = "reduce"
        t = _checks.single(op, "tensors", tensors)
        dt = _checks.dtype_code(op, "tensor", t)
        root = _checks.rank(op, "root rank", getattr(opts, "rootRank", 0), self._size)
        code, factor = _types.reduce_op(getattr(opts, "reduceOp", None))
        outs = _Outputs()
        buf = outs.prep(t)
        b = self._bufs([_desc(buf)])
        timeout, lib, h = self._t(opts), _lib.load(), self._h
        calls = [lambda fl, w: lib.reduce(h, b, root, dt, code, factor, timeout, fl, w)]
        return self._track(submit(op, [t], calls, outs.finalizer(), keep=(buf, b), async_op=_async(opts)))

    def _allgather_call(self, inp, out_pairs, timeout):
        lib, h = _lib.load(), self._h
        ib = self._bufs([_desc(inp)])
        ob = self._bufs(out_pairs)
        return (lambda fl, w: lib.allgather(h, ib, ob, len(out_pairs), timeout, fl, w)), (ib, ob)

    def allgather(self, output_tensors, input_tensors, opts=None):
        op = "allgather"
        inp = _checks.single(op, "input_tensors", input_tensors).contiguous()
        if not isinstance(output_tensors, (list, tuple)) or len(output_tensors) != 1:
            raise ValueError(f"godist: {op}: output_tensors must be a list holding one list of tensors")
        out_list = _checks.tensor_list(op, "output_tensors[0]", output_tensors[0], self._size)
        _checks.same_kind(op, "output_tensors[0]", out_list, inp)
        outs = _Outputs()
        bufs = [outs.prep(o) for o in out_list]
        call, keep = self._allgather_call(inp, [_desc(o) for o in bufs], self._t(opts))
        return self._track(submit(op, output_tensors, [call], outs.finalizer(), keep=(inp, bufs, keep), async_op=_async(opts)))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        op = "allgather_coalesced"
        ins = [t.contiguous() for t in _checks.tensor_list(op, "input_list", input_list)]
        if not isinstance(output_lists, (list, tuple)) or len(output_lists) != self._size:
            raise ValueError(f"godist: {op}: output_lists must hold one list per rank ({self._size})")
        outs = _Outputs()
        calls, keep = [], [ins]
        for r, lst in enumerate(output_lists):
            _checks.tensor_list(op, f"output_lists[{r}]", lst, len(ins))
        for i, inp in enumerate(ins):
            col = [output_lists[r][i] for r in range(self._size)]
            _checks.same_kind(op, f"output_lists[*][{i}]", col, inp)
            bufs = [outs.prep(o) for o in col]
            call, k = self._allgather_call(inp, [_desc(o) for o in bufs], self._t(opts))
            calls.append(call)
            keep += [bufs, k]
        return self._track(submit(op, output_lists, calls, outs.finalizer(), keep=keep, async_op=_async(opts)))

    def _gather_into(self, op, output, input, opts):
        out = _checks.tensor(op, "output", output)
        inp = _checks.tensor(op, "input", input).contiguous()
        if out.dtype != inp.dtype:
            raise TypeError(f"godist: {op}: output has dtype {out.dtype} but input has {inp.dtype}")
        if out.numel() != inp.numel() * self._size:
            raise ValueError(f"godist: {op}: output has {out.numel()} elements, expected input's {inp.numel()} "
                             f"x group size {self._size} = {inp.numel() * self._size}")
        outs = _Outputs()
        flat = outs.prep(out)
        call, keep = self._allgather_call(inp, _chunks(flat, self._size), self._t(opts))
        return [call], outs, (inp, flat, keep)

    def all_gather_single(self, output, input, opts=None):
        if _fast2(opts):
            dt = _checks.fast_dtype(input)
            if dt is not None and _checks.fast_dtype(output) == dt and output.numel() == input.numel() * self._size:
                return self._call2(self._call_allgather, "all_gather_into_tensor", input, output, 0, 0, opts)
        calls, outs, keep = self._gather_into("all_gather_into_tensor", output, input, opts)
        return self._track(submit("all_gather_into_tensor", [output], calls, outs.finalizer(), keep=keep, async_op=_async(opts)))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        op = "all_gather_into_tensor_coalesced"
        outputs = _checks.tensor_list(op, "outputs", outputs)
        inputs = _checks.tensor_list(op, "inputs", inputs, len(outputs))
        calls, fins, keep = [], [], []
        for o, i in zip(outputs, inputs):
            c, outs, k = self._gather_into(op, o, i, opts)
            calls += c
            fins.append(outs)
            keep.append(k)
        return self._track(submit(op, outputs, calls, lambda: [f.finalize() for f in fins], keep=keep, async_op=_async(opts)))

    def gather(self, output_tensors, input_tensors, opts=None):
        op = "gather"
        inp = _checks.single(op, "input_tensors", input_tensors).contiguous()
        root = _checks.rank(op, "root rank", getattr(opts, "rootRank", 0), self._size)
        outs = _Outputs()
        pairs, keep = [], [inp]
        if self._rank == root:
            if not isinstance(output_tensors, (list, tuple)) or len(output_tensors) != 1:
                raise ValueError(f"godist: {op}: on the root, output_tensors must be a list holding one list of tensors")
            lst = _checks.tensor_list(op, "output_tensors[0]", output_tensors[0], self._size)
            _checks.same_kind(op, "output_tensors[0]", lst, inp)
            bufs = [outs.prep(o) for o in lst]
            keep.append(bufs)
            pairs = [_desc(o) for o in bufs]
        elif output_tensors and any(len(x) for x in output_tensors):
            raise ValueError(f"godist: {op}: output_tensors must be empty on non-root ranks")
        lib, h, timeout = _lib.load(), self._h, self._t(opts)
        ib, ob = self._bufs([_desc(inp)]), self._bufs(pairs)
        keep += [ib, ob]
        calls = [lambda fl, w: lib.gather(h, ib, ob, len(pairs), root, timeout, fl, w)]
        return self._track(submit(op, output_tensors, calls, outs.finalizer(), keep=keep, async_op=_async(opts)))

    def scatter(self, output_tensors, input_tensors, opts=None):
        op = "scatter"
        out = _checks.single(op, "output_tensors", output_tensors)
        root = _checks.rank(op, "root rank", getattr(opts, "rootRank", 0), self._size)
        outs = _Outputs()
        obuf = outs.prep(out)
        pairs, keep = [], [obuf]
        if self._rank == root:
            if not isinstance(input_tensors, (list, tuple)) or len(input_tensors) != 1:
                raise ValueError(f"godist: {op}: on the root, input_tensors must be a list holding one list of tensors")
            lst = [t.contiguous() for t in _checks.tensor_list(op, "input_tensors[0]", input_tensors[0], self._size)]
            _checks.same_kind(op, "input_tensors[0]", lst, out)
            keep.append(lst)
            pairs = [_desc(t) for t in lst]
        elif input_tensors and any(len(x) for x in input_tensors):
            raise ValueError(f"godist: {op}: input_tensors must be empty on non-root ranks")
        lib, h, timeout = _lib.load(), self._h, self._t(opts)
        ib, ob = self._bufs(pairs), self._bufs([_desc(obuf)])
        keep += [ib, ob]
        calls = [lambda fl, w: lib.scatter(h, ib, len(pairs), ob, root, timeout, fl, w)]
        return self._track(submit(op, output_tensors, calls, outs.finalizer(), keep=keep, async_op=_async(opts)))

    def _reduce_scatter_call(self, op, in_pairs, out, opts, dt):
        code, factor = _types.reduce_op(getattr(opts, "reduceOp", None))
        lib, h, timeout = _lib.load(), self._h, self._t(opts)
        ib, ob = self._bufs(in_pairs), self._bufs([_desc(out)])
        return (lambda fl, w: lib.reduce_scatter(h, ib, len(in_pairs), ob, dt, code, factor, timeout, fl, w)), (ib, ob)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = "reduce_scatter"
        out = _checks.single(op, "output_tensors", output_tensors)
        dt = _checks.dtype_code(op, "output", out)
        if not isinstance(input_tensors, (list, tuple)) or len(input_tensors) != 1:
            raise ValueError(f"godist: {op}: input_tensors must be a list holding one list of tensors")
        lst = [t.contiguous() for t in _checks.tensor_list(op, "input_tensors[0]", input_tensors[0], self._size)]
        _checks.same_kind(op, "input_tensors[0]", lst, out)
        outs = _Outputs()
        obuf = outs.prep(out)
        call, k = self._reduce_scatter_call(op, [_desc(t) for t in lst], obuf, opts, dt)
        return self._track(submit(op, output_tensors, [call], outs.finalizer(), keep=(lst, obuf, k), async_op=_async(opts)))

    def _scatter_from(self, op, output, input, opts):
        out = _checks.tensor(op, "output", output)
        inp = _checks.tensor(op, "input", input).contiguous()
        dt = _checks.dtype_code(op, "output", out)
        if out.dtype != inp.dtype:
            raise TypeError(f"godist: {op}: output has dtype {out.dtype} but input has {inp.dtype}")
        if inp.numel() != out.numel() * self._size:
            raise ValueError(f"godist: {op}: input has {inp.numel()} elements, expected output's {out.numel()} "
                             f"x group size {self._size} = {out.numel() * self._size}")
        outs = _Outputs()
        obuf = outs.prep(out)
        call, k = self._reduce_scatter_call(op, _chunks(inp, self._size), obuf, opts, dt)
        return [call], outs, (inp, obuf, k)

    def reduce_scatter_single(self, output, input, opts=None):
        if _fast2(opts):
            dt = _checks.fast_dtype(input)
            rop = opts.reduceOp
            code = hash(rop) if _HASH_IS_CODE else 0 if rop == _SUM else rop.op.value
            if dt is not None and code in _SIMPLE and _checks.fast_dtype(output) == dt and \
                    input.numel() == output.numel() * self._size:
                return self._call2(self._call_reduce_scatter, "reduce_scatter_tensor", input, output, dt, code, opts)
        calls, outs, keep = self._scatter_from("reduce_scatter_tensor", output, input, opts)
        return self._track(submit("reduce_scatter_tensor", [output], calls, outs.finalizer(), keep=keep, async_op=_async(opts)))

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        op = "reduce_scatter_tensor_coalesced"
        outputs = _checks.tensor_list(op, "outputs", outputs)
        inputs = _checks.tensor_list(op, "inputs", inputs, len(outputs))
        calls, fins, keep = [], [], []
        for o, i in zip(outputs, inputs):
            c, outs, k = self._scatter_from(op, o, i, opts)
            calls += c
            fins.append(outs)
            keep.append(k)
        return self._track(submit(op, outputs, calls, lambda: [f.finalize() for f in fins], keep=keep, async_op=_async(opts)))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        op = "alltoall"
        ins = [t.contiguous() for t in _checks.tensor_list(op, "input_tensors", input_tensors, self._size)]
        outl = _checks.tensor_list(op, "output_tensors", output_tensors, self._size)
        for i, (o, t) in enumerate(zip(outl, ins)):
            if o.dtype != t.dtype:
                raise TypeError(f"godist: {op}: output_tensors[{i}] has dtype {o.dtype} but input_tensors[{i}] has {t.dtype}")
        outs = _Outputs()
        obufs = [outs.prep(o) for o in outl]
        return self._alltoall(op, [_desc(t) for t in ins], [_desc(o) for o in obufs], output_tensors, outs,
                              (ins, obufs), opts)

    def _alltoall(self, op, in_pairs, out_pairs, result, outs, keep, opts):
        lib, h, timeout = _lib.load(), self._h, self._t(opts)
        ib, ob = self._bufs(in_pairs), self._bufs(out_pairs)
        calls = [lambda fl, w: lib.alltoall(h, ib, len(in_pairs), ob, len(out_pairs), timeout, fl, w)]
        return self._track(submit(op, result, calls, outs.finalizer(), keep=(keep, ib, ob), async_op=_async(opts)))

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, opts=None):
        if _fast2(opts) and not output_split_sizes and not input_split_sizes:
            dt = _checks.fast_dtype(input)
            n = self._size
            if dt is not None and _checks.fast_dtype(output) == dt and input.dim() and output.dim() and \
                    input.shape[0] % n == 0 and output.shape[0] % n == 0 and input.nbytes == output.nbytes:
                return self._call2(self._call_alltoall, "all_to_all_single", input, output, 0, 0, opts)
        op = "all_to_all_single"
        out = _checks.tensor(op, "output", output)
        inp = _checks.tensor(op, "input", input).contiguous()
        if out.dtype != inp.dtype:
            raise TypeError(f"godist: {op}: output has dtype {out.dtype} but input has {inp.dtype}")
        outs = _Outputs()
        obuf = outs.prep(out)
        in_pairs = self._split(op, "input", inp, input_split_sizes)
        out_pairs = self._split(op, "output", obuf, output_split_sizes)
        return self._alltoall(op, in_pairs, out_pairs, [output], outs, (inp, obuf), opts)

    def _split(self, op, name, t, splits):
        """(pointer, nbytes) of each rank's rows of t along dim 0."""
        n = self._size
        rows = t.shape[0] if t.dim() > 0 else t.numel()
        row_bytes = (_nbytes(t) // rows) if rows else 0
        if not splits:
            if rows % n:
                raise ValueError(f"godist: {op}: {name} has {rows} rows along dim 0, not divisible by the group size {n}; "
                                 "pass split sizes")
            splits = [rows // n] * n
        splits = list(splits)
        if len(splits) != n:
            raise ValueError(f"godist: {op}: {name}_split_sizes has {len(splits)} entries, expected {n}")
        if any((not isinstance(s, int)) or s < 0 for s in splits):
            raise ValueError(f"godist: {op}: {name}_split_sizes must be non-negative ints, got {splits}")
        if sum(splits) != rows:
            raise ValueError(f"godist: {op}: {name}_split_sizes sum to {sum(splits)} but {name} has {rows} rows")
        base = t.data_ptr() if t.numel() else None
        pairs, off = [], 0
        for s in splits:
            nb = s * row_bytes
            pairs.append(((base + off) if base is not None and nb else None, nb))
            off += nb
        return pairs

    def barrier(self, opts=None):
        r = _call(self._call_barrier, self._h, None, 0, 0, _types.fast_timeout(opts), 0) if _sync(opts) else None
        if r is not None:
            return self._track(finish_sync("barrier", [], *r))
        lib, h, timeout = _lib.load(), self._h, self._t(opts)
        calls = [lambda fl, w: lib.barrier(h, timeout, fl, w)]
        return self._track(submit("barrier", [], calls, async_op=_async(opts)))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """A barrier whose failure names late ranks: on rank 0 the error lists
        the ranks that did not arrive within timeout (all of them with
        wait_all_ranks, else the first); the other ranks fail too."""
        lib, h = _lib.load(), self._h
        ms = _types.timeout_ms(timeout) if timeout is not None else self._timeout_ms()
        calls = [lambda fl, w: lib.monitored_barrier(h, ms, 1 if wait_all_ranks else 0, fl, w)]
        return self._track(submit("monitored_barrier", [], calls, async_op=False))

    # ----- point to point -----------------------------------------------
    def send(self, tensors, dstRank, tag=0):
        t = _one(tensors)
        r = None
        if t is not None and type(dstRank) is int and 0 <= dstRank < self._size and not _lib._forked and not _profiling():
            r = _call(self._call_send, self._h, t, dstRank, tag, 0, 0)
        if r is not None:
            # Sends are eager: done when the call returns.
            return self._track(finish_sync("send", tensors, *r))
        op = "send"
        t = _checks.single(op, "tensors", tensors).contiguous()
        dst = _checks.rank(op, "destination rank", dstRank, self._size)
        lib, h = _lib.load(), self._h
        b = self._bufs([_desc(t)])
        calls = [lambda fl, w: lib.send(h, b, dst, int(tag), 0, fl, w)]
        # Sends are eager: done when the call returns, so no completion hop.
        return self._track(submit(op, [t], calls, keep=(t, b), async_op=False))

    def recv(self, tensors, srcRank, tag=0):
        t = _one(tensors)
        r = None
        if t is not None and type(srcRank) is int and 0 <= srcRank < self._size and not _lib._forked and not _profiling():
            r = _call(self._call_recv, self._h, t, srcRank, tag, 0, 0)
        if r is not None:
            # A message already here completes the receive during the call;
            # otherwise the Work holds its handle like any asynchronous op.
            rc, work, eb = r
            if rc == _errors.OK and work:
                return self._track(adopt("recv", tensors, work, keep=t))
            return self._track(finish_sync("recv", tensors, rc, work, eb, srcRank))
        op = "recv"
        t = _checks.single(op, "tensors", tensors)
        src = _checks.rank(op, "source rank", srcRank, self._size)
        return self._recv(op, t, src, tag)

    def recv_anysource(self, tensors, tag=0):
        t = _checks.single("recv", "tensors", tensors)
        return self._recv("recv", t, -1, tag)

    recvAnysource = recv_anysource

    def _recv(self, op, t, src, tag):
        outs = _Outputs()
        buf = outs.prep(t)
        lib, h = _lib.load(), self._h
        b = self._bufs([_desc(buf)])
        calls = [lambda fl, w: lib.recv(h, b, src, int(tag), 0, fl, w)]
        return self._track(submit(op, [t], calls, outs.finalizer(), keep=(buf, b), async_op=True))

    # ----- names torch used before the 2.13 rename ------------------------
    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single


def close_all():
    """Close every live group gracefully (registered with atexit)."""
    with _live_lock:
        groups = list(_live)
    for g in groups:
        g._close()
