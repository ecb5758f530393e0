"""Group: one godist process group in Go, and every op on it.

This is the engine side of a group, shared by both of godist's faces in
torch: :class:`godist.GodistProcessGroup` (the group torch's ``dist.*``
functions call, with the fast paths) and :class:`godist.GodistBackend` (the
``c10d`` Backend torch's own ProcessGroup dispatches to: hooks, the flight
recorder, device routing, split and shrink). Each op method checks its
arguments (:mod:`godist._checks`), describes the tensors' memory to Go in a
:class:`godist._lib.GodistOp` (pointer + length; Go reads and writes it in
place), calls the op's entry point and returns a
:class:`godist.work.GodistWork` (:func:`godist.work.submit`). The common
small cases first try the fast paths of :mod:`godist._fast`. Tensors are kept
alive by the Work until the op completes. CUDA tensors go to the group's
device path (:mod:`godist._nccl` or :mod:`godist._staged`).
"""

from __future__ import annotations

import ctypes
import datetime
import logging
import os
import threading
import weakref

import torch

from . import _checks, _desync, _dump, _errors, _fast, _flight, _lib, _log, _rendezvous, _types
from ._args import _async, _desc, _Outputs
from .work import combine, submit

_live = weakref.WeakSet()
_by_name = weakref.WeakValueDictionary()  # group name -> Group, for failures reported by name


def _on_cuda(x) -> bool:
    """Whether an op's first tensor (x, or the first of a list of lists) is a
    CUDA tensor: the op then goes to the group's device path."""
    while isinstance(x, (list, tuple)):
        if not x:
            return False
        x = x[0]
    return isinstance(x, torch.Tensor) and x.is_cuda


def cuda_mode() -> str:
    """GODIST_CUDA: "auto" (NCCL when it loads and sees a GPU, else staged),
    "nccl" or "staged" (CUDA tensors through pinned host memory over godist's
    CPU transports)."""
    raw = os.environ.get("GODIST_CUDA", "")
    v = raw.strip().lower() or "auto"
    if v not in ("auto", "nccl", "staged"):
        raise ValueError(f"godist: GODIST_CUDA={raw!r}: use 'auto', 'nccl' or 'staged'")
    return v
_live_lock = threading.Lock()


class OnGroup:
    """What GodistProcessGroup and GodistBackend share, both being a torch
    face of a Group held in ``_g``."""

    def __getattr__(self, name):
        # The engine's attributes (_h, _rank, _device_path, shared_memory,
        # ...) for code that reaches the group through either face.
        g = self.__dict__.get("_g")
        if g is None:
            raise AttributeError(name)
        return getattr(g, name)

    def __repr__(self):
        return f"{type(self).__name__}({self._g!r})"

    def getBackendName(self) -> str:
        return "godist"

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self._g.set_timeout(timeout)

    def _get_sequence_number_for_group(self) -> int:
        return self._g._get_sequence_number_for_group()

    def _set_sequence_number_for_group(self) -> None:
        pass

    def _start_coalescing(self, device=None):
        self._g._start_coalescing(device)

    def _end_coalescing(self, device=None):
        return self._g._end_coalescing(device)

    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing


class Group:
    """A godist process group: its Go handle and its ops."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta | None = None, group_name: str = ""):
        self._rank, self._size = rank, size
        self._store = store
        self._timeout = timeout if timeout is not None and timeout.total_seconds() > 0 else _types.default_timeout()
        self._name = group_name or "godist"
        self._seq = 0
        self._coalesced = None
        self._abort_hooks = {}
        self._hooks_ran = False
        self._coalescing_cuda = False
        self._dev = None
        self._closed = False
        self._close_lock = threading.Lock()
        # Under TORCH_DISTRIBUTED_DEBUG=DETAIL ops describe their tensors'
        # shapes (godist._desync) and the fast paths step aside.
        self._detail = _desync.detail_mode()
        self._details = _desync.details if self._detail else _desync.nothing
        lib = _lib.load()
        _log.set_rank(rank)
        _dump.on_signal(lib)
        h = ctypes.c_uint64()
        bind = os.environ.get("GODIST_BIND_ADDR", "").encode()
        ifname = os.environ.get("GODIST_SOCKET_IFNAME", "").encode()
        peer_host = (_rendezvous.store_host(store) or "").encode() if size > 1 else b""
        transport = os.environ.get("GODIST_TRANSPORT", "auto").strip().lower()
        if transport not in ("auto", "tcp", "mpi", ""):
            raise ValueError(f"godist: GODIST_TRANSPORT={transport!r}: use 'auto' (shared memory between ranks on "
                             "one host, TCP otherwise), 'tcp' or 'mpi' (MPI's messages and collectives; under mpirun)")
        if transport == "mpi" and size > 1:
            from ._mpi import open_mpi

            open_mpi()  # the MPI fabric needs MPI initialised (mpi:// has done it already)
        with _lib.secret(lib):
            lib.pg_create(rank, size, self._name.encode(), self._timeout_ms(), bind or None, ifname or None,
                          peer_host or None, transport.encode() if transport in ("tcp", "mpi") else None,
                          ctypes.byref(h))
        self._h = h.value
        # The ops' entry points (each takes a GodistOp's address), bound once.
        for name in ("allreduce", "broadcast", "reduce", "allgather", "gather", "reduce_scatter", "scatter", "alltoall",
                     "barrier", "monitored_barrier", "send", "recv"):
            setattr(self, "_raw_" + name, getattr(lib.raw, name))
        try:
            if size > 1:
                _rendezvous.exchange(store, rank, size, self._h, self._timeout, self._name)
        except BaseException:
            self._close()
            raise
        with _live_lock:
            _live.add(self)
            _by_name[self._name] = self

    # ----- identity -----------------------------------------------------
    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def _timeout_ms(self) -> int:
        return max(1, int(self._timeout.total_seconds() * 1000))

    def _device_path(self):
        """The path CUDA tensors take (GODIST_CUDA), made on first use."""
        d = self._dev
        if d is None:
            mode = cuda_mode()
            if mode == "auto":
                from ._nccl import nccl_info

                info = nccl_info()
                mode = "nccl" if info.get("available") and info.get("devices", 0) > 0 else "staged"
                if mode == "staged":
                    _log.log(logging.WARNING, "godist: CUDA tensors go through pinned host memory (NCCL: %s)",
                             info.get("reason") or info.get("devices_error") or "no device")
            if mode == "nccl":
                from ._nccl import NcclPath

                d = NcclPath(self)
            else:
                from ._staged import StagedPath

                d = StagedPath(self)
            self._dev = d
        return d

    def _get_sequence_number_for_group(self) -> int:
        seq = ctypes.c_uint64()
        _lib.load().pg_seq(self._h, ctypes.byref(seq))
        return seq.value

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        """The default deadline of the ops issued from now on."""
        ms = _types.timeout_ms(timeout)
        if ms <= 0:
            raise ValueError(f"godist: set_timeout: the timeout must be positive, got {timeout}")
        _lib.load().pg_set_timeout(self._h, ms)
        self._timeout = datetime.timedelta(milliseconds=ms)

    def error(self) -> int:
        """The status code of the error that broke the group (godist._errors;
        OK while it is healthy, CLOSED once closed)."""
        if self._closed:
            return _errors.CLOSED
        code = ctypes.c_int32()
        try:
            _lib.load().pg_error(self._h, ctypes.byref(code))
        except _errors.GodistError as e:  # a handle released under us: closed
            return e.code if e.code != _errors.INVALID else _errors.CLOSED
        return code.value

    @property
    def shared_memory(self) -> bool:
        """Whether this group's collectives run over shared memory."""
        flag = ctypes.c_int32()
        _lib.load().pg_info(self._h, ctypes.byref(flag))
        return bool(flag.value)

    def __repr__(self):
        return f"godist group {self._name!r} (rank {self._rank} of {self._size})"

    # ----- coalescing ---------------------------------------------------
    def _track(self, work):
        """Record work issued between _start_coalescing and _end_coalescing."""
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def _start_coalescing(self, device=None):
        if self._coalesced is not None:
            # torch's _coalescing_manager does not end a block whose body
            # raised: drop what that block left instead of refusing forever.
            _log.log(logging.WARNING, "godist: group %s: a coalescing block was not ended (did its body raise?); "
                     "its ops were dropped", self._name)
            self._coalesced = None
            if self._coalescing_cuda and self._dev is not None and hasattr(self._dev, "end_batch"):
                self._dev._batch = None
        self._coalesced = []
        dev = torch.device(device) if device is not None else None
        self._coalescing_cuda = dev is not None and dev.type == "cuda"
        if self._coalescing_cuda:
            d = self._device_path()
            if hasattr(d, "start_batch"):
                d.start_batch(dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device()))

    def _end_coalescing(self, device=None):
        works, self._coalesced = self._coalesced, None
        if works is None:
            raise RuntimeError("godist: _end_coalescing called without _start_coalescing")
        if self._coalescing_cuda:
            self._coalescing_cuda = False
            d = self._device_path()
            if hasattr(d, "end_batch"):
                w = d.end_batch()
                return w if w is not None else combine("coalesced", [])
        return combine("coalesced", works)

    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing

    def _dev_active(self) -> bool:
        """Whether this group has a device communicator: its barrier then
        runs on the device, as torch's nccl backend's does."""
        lib = _lib.load()
        return bool(lib.device_has(self._h, -1))

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

    def _run_abort_hooks(self) -> None:
        """Run the abort hooks (torch's: a flight recorder dump); each hook
        is idempotent by torch's contract, and runs here at most once per
        failure of the group."""
        for hook in list(self._abort_hooks.values()):
            try:
                hook()
            except Exception as e:  # noqa: BLE001 - a hook's failure must not stop the abort
                _log.log(logging.WARNING, "godist: group %s: an abort hook raised: %s", self._name, e)

    def _failed(self, exc) -> None:
        """An op of this group failed (timeout, lost peer, desync): the
        group is broken in Go. Run the abort hooks once, and write torch's
        flight recorder trace if it records this process's groups."""
        if self._hooks_ran:
            return
        self._hooks_ran = True
        self._run_abort_hooks()
        _flight.dump()

    def abort(self, *args, **kwargs):
        """Fail every pending op of this group at once and drop its connections."""
        if not self._hooks_ran:
            self._hooks_ran = True
            self._run_abort_hooks()
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


def close_all():
    """Close every live group gracefully (registered with atexit)."""
    with _live_lock:
        groups = list(_live)
    for g in groups:
        g._close()


def _on_failure(name: str, exc) -> None:
    g = _by_name.get(name)
    if g is not None:
        g._failed(exc)


_errors.failure_listeners.append(_on_failure)
