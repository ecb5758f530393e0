"""The NCCL path: CUDA tensors of a godist group, through NCCL driven from Go.

Each op method has the signature of the GodistProcessGroup method of the
same name and is called by it when the tensors are CUDA tensors. The op is
described as on CPU (godist._describe, with this path's CudaRules: CUDA
tensors of one device, NCCL's reductions); its calls' GodistOps get the
GODIST_CUDA flag, the device and the caller's current stream, and Go
enqueues the NCCL calls (capi/device.go, libgodist/device.go,
backends/nccl/). Stream semantics follow ProcessGroupNCCL:

* a synchronous op (``async_op=False``) runs on the caller's current stream:
  later work on that stream sees its result, and the CPU never blocks;
* an asynchronous op runs on the communicator's own stream after the work
  queued on the current stream so far; its tensors are kept alive until the
  device has run it, and ``wait()`` makes the caller's current stream wait
  for it (the CPU does not block); ``get_future()`` is a CUDA-aware future.

Communicators are made on first use: the group's (every rank) for
collectives, and one per pair of ranks for point-to-point ops (a batch of
them with one peer included), as ProcessGroupNCCL does. The lead rank's NCCL unique id goes through the group's store.
Go's watchdog fails an op whose device work outlives its timeout (aborting
the communicator) on every rank that waits for it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

import torch

from . import _checks, _describe, _errors, _lib, _types
from ._args import _Outputs
from .work import GodistWork, _Group, completer

_HANDLE = _errors.CAUSES.index("handle")


@functools.cache
def _rules():
    """What the NCCL path reduces, from backends/nccl/calls.go (godist_facts):
    (the torch dtypes it reduces -> their codes, the reduce op codes per
    dtype code, the ops a complex tensor may use through its real view, as
    torch's nccl backend reduces complex tensors)."""
    f = _lib.facts()["nccl"]
    ops = {int(d): frozenset(o) for d, o in f["reduce_ops"].items()}
    reducible = {d: c for d, c in _types.DTYPE_CODES.items() if c in ops}
    return reducible, ops, frozenset(f["complex_ops"])


def _dev_of(op: str, name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"godist: {op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise ValueError(f"godist: {op}: {name} is a {t.layout} tensor; only dense (strided) tensors are supported")
    if not t.is_cuda:
        raise ValueError(f"godist: {op}: {name} is on {t.device}, but the op's other tensors are CUDA tensors; "
                         "pass tensors of one device")
    return t


class CudaRules(_describe.Rules):
    """What the NCCL path takes (godist._describe): dense CUDA tensors, all
    of one device (the first one's, kept here: one instance per op), and
    NCCL's reductions. A complex tensor is reduced through its real view,
    with the ops that allows (as torch's nccl backend does)."""

    flat_scatter = True  # ncclReduceScatter takes one flat input

    def __init__(self):
        self.device = None  # the op's device: its first tensor's
        self._first = ""

    def tensor(self, op, name, t):
        _dev_of(op, name, t)
        if self.device is None:
            self.device, self._first = t.device, name
        elif t.device != self.device:
            raise ValueError(f"godist: {op}: {name} is on {t.device} but {self._first} is on {self.device}: every "
                             "tensor of an op must be on one device")
        return t

    def tensors(self, op, name, ts, length=None):
        return [self.tensor(op, f"{name}[{i}]", t) for i, t in enumerate(_checks.list_any(op, name, ts, length))]

    def single(self, op, name, ts):
        return self.tensor(op, f"{name}[0]", _checks.single_any(op, name, ts))

    def reduction(self, op, name, t, opts):
        code, factor = _describe.reduce_op(opts)
        reducible, ops, complex_ops = _rules()
        if t.is_complex():
            if code not in complex_ops:
                raise ValueError(f"godist: {op}: {_types.OP_NAMES[code]} is not defined on complex tensors")
            t = torch.view_as_real(t)
        dt = reducible.get(t.dtype)
        if dt is None:
            raise TypeError(f"godist: {op}: {name} has dtype {t.dtype}, which NCCL cannot reduce")
        if code not in ops[dt]:
            if not any(code in o for o in ops.values()):
                known = sorted(set().union(*ops.values()))
                raise ValueError(f"godist: {op}: {_types.OP_NAMES[code]} is not supported on CUDA tensors: NCCL "
                                 f"reduces with {', '.join(_types.OP_NAMES[c] for c in known)} only (no bitwise "
                                 "reductions; torch's nccl backend refuses them too)")
            raise ValueError(f"godist: {op}: {_types.OP_NAMES[code]} is not defined on {t.dtype} tensors "
                             "on the NCCL path")
        return {"dtype": dt, "reduce_op": code, "factor": factor}


class CudaWork(GodistWork):
    """The Work of an asynchronous op on CUDA tensors: wait() orders the
    caller's current stream after the op instead of blocking the CPU."""

    def __init__(self, op, outputs, pg, device, contig, side):
        super().__init__(op, outputs)
        self._pg, self._device, self._contig, self._h, self._side = pg, device, contig, 0, side
        self._copied = None  # the event after the copy-backs of non-contiguous outputs, once made

    def _order(self, stream=None):
        """Make stream (default: the current one) wait for the op, and for
        the copy-backs of non-contiguous outputs, which the first call
        enqueues on it; raise the op's error."""
        if stream is None:
            stream = torch.cuda.current_stream(self._device)
        if not self._done and self._h:
            blk = _lib.GodistOp(pg=self._pg._h, work=self._h, stream=stream.cuda_stream)
            eb = _lib._errbuf()
            blk.errbuf, blk.errlen = ctypes.addressof(eb), _lib.ERRLEN
            rc = _lib.load().raw.device_order(ctypes.addressof(blk))
            if rc == _errors.INVALID and eb.cause == _HANDLE:
                self._get_event().wait()  # collected just now: completing
            elif rc != _errors.OK:
                raise _errors.from_buffer(rc, eb)
        if self._exc is not None:
            raise self._exc
        if not self._contig.copies:
            return
        if self._copied is None:
            with torch.cuda.device(self._device), torch.cuda.stream(stream):
                self._contig.finalize()
                self._copied = torch.cuda.Event()
                self._copied.record(stream)
        else:
            stream.wait_event(self._copied)

    def wait(self, timeout=None) -> bool:
        if _BLOCKING_WAIT and not self._done:
            GodistWork.wait(self, timeout)
        self._order()
        return True

    def synchronize(self):
        self._order()

    def block_current_stream(self):
        self._order()

    def get_future(self):
        """A CUDA-aware future, completed at once, whose value is ordered
        after the op on a side stream: only code that uses the value waits
        for the op (as with ProcessGroupNCCL), not the caller's stream (DDP
        asks for the future right after launching each bucket's all-reduce,
        and its backward pass must not queue behind it)."""
        fut = torch.futures.Future(devices=[self._device])
        with torch.cuda.device(self._device), torch.cuda.stream(self._side):
            try:
                self._order(self._side)
            except Exception as e:
                fut.set_exception(e)
                return fut
            fut.set_result(self._outputs)
        return fut


class _SyncWork(GodistWork):
    """The Work of a synchronous op with nothing to run (empty lists)."""

    def __init__(self, op, outputs, device):
        super().__init__(op, outputs, done=True)
        self._device = device

    def get_future(self):
        fut = torch.futures.Future(devices=[self._device])
        with torch.cuda.device(self._device):
            fut.set_result(self._outputs)
        return fut


# GODIST_CUDA_BLOCKING_WAIT=1: wait() of an op on CUDA tensors (which
# torch's frontend calls for every synchronous op) waits on the CPU until
# the device has run the op, so that a failure raises from the op itself.
_BLOCKING_WAIT = os.environ.get("GODIST_CUDA_BLOCKING_WAIT", "0").strip() not in ("", "0")


class SyncCudaWork(GodistWork):
    """The Work of a synchronous op: it runs on the current stream, so later
    work on that stream is ordered after it and wait() need not order
    anything. Go tracks it like an asynchronous op (its handle completes
    when the device has run it, or fails naming the op when it times out or
    its communicator fails): wait() and is_completed() report that failure
    once the watchdog has found it, and with GODIST_CUDA_BLOCKING_WAIT=1
    wait() waits for the outcome, so a timeout raises from the op itself.
    Without it the CPU never waits, as in torch's nccl backend, and a
    failure found later raises from the group's next op, naming this one.
    get_future is a CUDA-aware future of the outputs."""

    def __init__(self, op, outputs, device):
        super().__init__(op, outputs)
        self._device = device

    def wait(self, timeout=None) -> bool:
        if _BLOCKING_WAIT or timeout:
            return super().wait(timeout)
        if self._exc is not None:
            raise self._exc
        return True

    def synchronize(self):
        self.wait()

    def block_current_stream(self):
        self.wait()

    def get_future(self):
        fut = torch.futures.Future(devices=[self._device])
        with torch.cuda.device(self._device):
            if self._exc is not None:
                fut.set_exception(self._exc)
            else:
                fut.set_result(self._outputs)
        return fut


class NcclPath:
    """The op methods of a GodistProcessGroup for CUDA tensors."""

    def __init__(self, pg):
        self._pg = pg
        self._lib = _lib.load()
        self._lock = threading.Lock()
        self._batch = None  # (device, [(entry, block)], keep, outputs, contig) while coalescing
        self._scratch = {}  # device index -> one-element tensor for barrier
        self._ready = set()  # communicators made: -1 for the group's, else the peer of a pair
        self._sides = {}  # device index -> the stream futures of asynchronous ops complete on

    # ----- communicators ------------------------------------------------
    def _ensure(self, device: torch.device, peer: int = -1):
        """Make the communicator an op needs, if there is none yet: the
        group's for collectives, the pair's for point-to-point ops even when
        the group has one (as ProcessGroupNCCL: on one communicator, a send
        issued before a collective on one rank and after it on the other
        would wait for each other)."""
        if peer == self._pg._rank:
            peer = -1  # to itself: the group's communicator (in one NCCL group with the matching call)
        ready = self._ready
        if peer in ready:
            return
        pg, lib = self._pg, self._lib
        with self._lock:
            if peer in ready:
                return
            if peer < 0:
                key, lead = "godist/nccl/group", pg._rank == 0
            else:
                lo, hi = sorted((pg._rank, peer))
                key, lead = f"godist/nccl/p2p/{lo}-{hi}", pg._rank == lo
            if lead:
                uid = _lib.read_bytes(lib.device_id, pg._h, size=128)
                pg._store.set(key, uid)
            else:
                uid = bytes(pg._store.get(key))
            lib.device_open(pg._h, device.index, peer, uid, len(uid))
            ready.add(peer)

    # ----- running an op ------------------------------------------------
    def _run(self, d, rules, async_op=None):
        """Enqueue the calls of description d (godist._describe, made with
        rules, which know its device) on the caller's current stream, or add
        them to the open batch; return its Work."""
        device = rules.device
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if not d.calls:
            return _SyncWork(d.op, [], device)
        pg, ms = self._pg, d.timeout_ms
        calls = [(getattr(pg, "_raw_" + entry), _describe.block(pg._h, ms, fields, op_code=_lib.OP_CODES[entry]))
                 for entry, fields, _ in d.calls]
        if self._batch is not None:
            if self._batch[0] != device:
                raise ValueError(f"godist: {d.op}: coalesced ops on CUDA must share one device "
                                 f"({self._batch[0]} and {device})")
            self._batch[1].extend((e, b, d.peer) for e, b in calls)
            self._batch[2].append(d.keep)
            self._batch[3].extend(d.outputs)
            self._batch[4].copies.extend(d.outs.copies)
            return _Pending(d.op, d.outputs)
        self._ensure(device, d.peer)
        return self._launch(d.op, calls, device, d.outputs, d.keep, d.async_op if async_op is None else async_op,
                            d.outs)

    def _launch(self, op, calls, device, outputs, keep, async_op, contig):
        stream = torch.cuda.current_stream(device).cuda_stream
        flags = _lib.CUDA | (_lib.ASYNC if async_op else 0)
        for _, blk in calls:
            blk.flags, blk.stream, blk.device = flags, stream, device.index
        if len(calls) == 1:
            h = _lib.run(calls[0][0], calls[0][1])
        else:
            h = self._run_batch([b for _, b in calls])
        if not async_op:
            contig.finalize()  # copy-backs on the current stream, after the op
            work = SyncCudaWork(op, outputs, device)
        else:
            side = self._sides.get(device.index)
            if side is None:
                side = self._sides[device.index] = torch.cuda.Stream(device)
            work = CudaWork(op, outputs, self._pg, device, contig, side)
            work._h = h
        if not h:  # nothing left to track (Go gives every device op a handle)
            work._finish()
            return work
        group = _Group(work, None, keep, (h,))
        work._group = group
        completer.hold(group)
        completer.watch(group)  # release the tensors once the device has run the op, collect its outcome
        return work

    def _run_batch(self, blocks):
        arr = (_lib.GodistOp * len(blocks))(*blocks)
        eb = _lib._errbuf()
        for b in arr:
            b.errbuf, b.errlen = ctypes.addressof(eb), _lib.ERRLEN
        rc = self._lib.raw.device_batch(ctypes.addressof(arr), len(blocks))
        if rc != _errors.OK:
            raise _errors.from_buffer(rc, eb)
        return arr[0].work

    # ----- coalescing (batch_isend_irecv, _coalescing_manager) ------------
    def start_batch(self, device):
        self._batch = (device, [], [], [], _Outputs())

    def end_batch(self, async_op=True):
        batch, self._batch = self._batch, None
        if batch is None or not batch[1]:
            return None
        device, calls, keep, outputs, contig = batch
        peers = {-1 if p == self._pg._rank else p for _, _, p in calls}
        self._ensure(device, peers.pop() if len(peers) == 1 and -1 not in peers else -1)
        return self._launch("coalesced", [(e, b) for e, b, _ in calls], device, outputs, keep, async_op, contig)

    # ----- collectives: every op but these is described (see the end of this module) --------
    def barrier(self, opts=None):
        """An all-reduce of one element on the group's device, then the CPU
        waits for it (as torch's nccl backend does)."""
        dev = getattr(opts, "device", None)
        if not isinstance(dev, torch.device) or dev.type != "cuda" or dev.index is None:
            ids = getattr(opts, "device_ids", None) or []
            dev = torch.device("cuda", ids[0] if ids else torch.cuda.current_device())
        t = self._scratch.get(dev.index)
        if t is None:
            t = self._scratch[dev.index] = torch.zeros(1, device=dev)
        rules = CudaRules()
        d = _describe.allreduce(rules, self._pg, [t], opts)
        d.op = "barrier"
        w = self._run(d, rules, async_op=False)
        torch.cuda.current_stream(dev).synchronize()
        GodistWork.wait(w)  # the watchdog's verdict: done, or failed (timed out, aborted)
        return _SyncWork("barrier", [], dev)

    # ----- point to point -----------------------------------------------
    def send(self, tensors, dstRank, tag=0):
        rules = CudaRules()
        d = _describe.send(rules, self._pg, tensors, dstRank, tag)
        if d.peer == self._pg._rank and self._batch is None:
            raise ValueError(f"godist: send: destination rank {d.peer} is this rank (NCCL matches a send to itself "
                             "only with its receive in one batch_isend_irecv)")
        return self._run(d, rules, async_op=True)

    def recv(self, tensors, srcRank, tag=0):
        rules = CudaRules()
        d = _describe.recv(rules, self._pg, tensors, srcRank, tag)
        src = d.peer
        if src == self._pg._rank and self._batch is None:
            raise ValueError(f"godist: recv: source rank {src} is this rank (NCCL matches a receive from itself "
                             "only with its send in one batch_isend_irecv)")
        work = self._run(d, rules, async_op=True)
        work._source = src
        if work._group is not None:
            work._group.source = src  # what the completion thread gives the Work when it completes
        return work

    def recv_anysource(self, tensors, tag=0):
        raise ValueError("godist: recv: NCCL cannot receive from any source on CUDA tensors; name the source rank "
                         "(torch's nccl backend has no recv_anysource either)")


def _described(name):
    """NcclPath's method for op name: its description (godist._describe),
    run on the caller's stream."""
    describe = getattr(_describe, name)

    def method(self, *args, **kwargs):
        rules = CudaRules()
        return self._run(describe(rules, self._pg, *args, **kwargs), rules)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"{name} on CUDA tensors (godist._describe.{name})."
    return method


for _name in _describe.OPS:
    if not hasattr(NcclPath, _name):
        setattr(NcclPath, _name, _described(_name))


class _Pending(GodistWork):
    """The Work of an op issued while coalescing: the coalesced Work that
    end_coalescing returns carries it."""

    def __init__(self, op, outputs):
        super().__init__(op, outputs, done=True)


_info = None


def nccl_info() -> dict:
    """What the NCCL path can load here (version, library, devices), asked
    once per process (making NCCL's unique id starts a thread of NCCL's)."""
    global _info
    if _info is None:
        import json

        _info = json.loads(_lib.read_bytes(_lib.load().nccl_info, size=2048))
    return dict(_info)

