"""The staged CUDA path: collectives on CUDA tensors without NCCL.

Where NCCL is missing or refused (``GODIST_CUDA=staged``), an op on CUDA
tensors runs over godist's CPU transports: its inputs are copied into
pinned host tensors on the caller's current CUDA stream, the CPU only waits
for that copy (an event on the stream, not the whole device), the process
group's own CPU method runs on the host tensors, and the returned
:class:`StagedWork` copies the outputs back into the CUDA tensors on the
stream that is current when it is waited for. Two ranks sharing one GPU
work, since nothing here touches NCCL.

Every device-specific step (pinned allocation, copies on a stream, events,
the current stream, futures) goes through a small device object:
:class:`CudaDevice` for real CUDA tensors, :class:`HostDevice` a stand-in on
CPU tensors so the staging logic runs (and is tested) without a GPU.

Pinned buffers come from ``torch.empty(..., pin_memory=True)``, which is
torch's caching host allocator: freed blocks are reused by size, and a
block used by a non-blocking copy is not handed out again until that copy
has finished on its stream (the copy records an event on it). The Work also
keeps its host buffers until it is dropped or its copy back is seen to
have finished.
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

# ----- devices ------------------------------------------------------------

class CudaDevice:
    """The device steps of the staged path on CUDA."""

    kind = "cuda"

    def host_like(self, t: torch.Tensor) -> torch.Tensor:
        """A contiguous pinned host tensor of t's shape and dtype."""
        return torch.empty(t.shape, dtype=t.dtype, pin_memory=True)

    def current_device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device())

    def current_stream(self, device: torch.device):
        return torch.cuda.current_stream(device)

    def copy(self, dst: torch.Tensor, src: torch.Tensor, stream) -> None:
        """Enqueue dst.copy_(src) on stream, without waiting for it."""
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)

    def record(self, stream):
        ev = torch.cuda.Event()
        ev.record(stream)
        return ev

    def synchronize(self, event) -> None:
        event.synchronize()

    def query(self, event) -> bool:
        return event.query()

    def wait_event(self, stream, event) -> None:
        stream.wait_event(event)

    def stream_context(self, stream):
        return torch.cuda.stream(stream)

    def future(self, device: torch.device):
        # A CUDA-aware future: completing it records an event on the
        # current stream; its waiters' streams wait for that event.
        return torch.futures.Future(devices=[device])


class _NoContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class HostDevice:
    """The staged path's device steps done on CPU tensors: plain host
    buffers, synchronous copies, events that are always complete. What the
    staging logic is tested with where there is no GPU."""

    kind = "cpu"

    def host_like(self, t: torch.Tensor) -> torch.Tensor:
        return torch.empty(t.shape, dtype=t.dtype)

    def current_device(self) -> torch.device:
        return torch.device("cpu")

    def current_stream(self, device: torch.device):
        return None

    def copy(self, dst: torch.Tensor, src: torch.Tensor, stream) -> None:
        dst.copy_(src)

    def record(self, stream):
        return None

    def synchronize(self, event) -> None:
        pass

    def query(self, event) -> bool:
        return True

    def wait_event(self, stream, event) -> None:
        pass

    def stream_context(self, stream):
        return _NoContext()

    def future(self, device: torch.device):
        return torch.futures.Future()


# ----- one op's staging ---------------------------------------------------

class _Stage:
    """The host side of one op: every device tensor of its arguments gets a
    host stand-in; those read by the op are copied in before it runs, those
    it writes are copied back when its Work is waited for."""

    __slots__ = ("op", "dev", "device", "first", "ins", "outs")

    def __init__(self, op: str, dev):
        self.op, self.dev = op, dev
        self.device = None  # the device of the first tensor seen
        self.first = ""     # its argument's name
        self.ins = []       # (host, device tensor): copied in now
        self.outs = []      # (device tensor, host): copied back at wait

    def _check(self, name: str, t) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"godist: {self.op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.layout != torch.strided:
            raise ValueError(f"godist: {self.op}: {name} is a {t.layout} tensor; only dense (strided) tensors are "
                             "supported")
        kind = self.dev.kind
        if self.device is None:
            if t.device.type != kind:
                raise ValueError(f"godist: {self.op}: {name} is on device {t.device}; the staged {kind} path takes "
                                 f"{kind} tensors only")
            self.device, self.first = t.device, name
        elif t.device != self.device:
            mixed = {t.device.type, self.device.type} == {"cpu", "cuda"}
            what = ("CPU and CUDA tensors cannot be mixed in one op" if mixed
                    else "every tensor of an op must be on the same device")
            raise ValueError(f"godist: {self.op}: {name} is on device {t.device} but {self.first} is on "
                             f"{self.device}: {what}")
        return t

    def map(self, name: str, obj, copy_in: bool, copy_out: bool):
        """obj (a tensor, or lists of them, nested) with each tensor replaced
        by a contiguous host tensor of its shape and dtype."""
        if isinstance(obj, (list, tuple)):
            return [self.map(f"{name}[{i}]", x, copy_in, copy_out) for i, x in enumerate(obj)]
        if obj is None:
            return None
        t = self._check(name, obj)
        h = self.dev.host_like(t)
        if copy_in:
            self.ins.append((h, t))
        if copy_out:
            self.outs.append((t, h))
        return h

    def inout(self, name, obj):
        return self.map(name, obj, True, True)

    def input(self, name, obj):
        return self.map(name, obj, True, False)

    def output(self, name, obj):
        return self.map(name, obj, False, True)


class StagedWork(dist.Work):
    """The Work of a staged op: the CPU op's Work plus the copy back of its
    outputs into the CUDA tensors, enqueued on the stream current when it
    is waited for (or, through get_future, current when the future was
    asked for) and done once."""

    def __init__(self, op: str, work, outputs, copies, dev, device):
        super().__init__()
        self._op = op
        self._work = work          # the CPU op's Work
        self._outputs = outputs    # what the future holds: the caller's tensors
        self._copies = copies      # (device tensor, host) pairs to copy back
        self._dev = dev
        self._device = device
        self._lock = threading.Lock()
        self._copied = False       # copy back enqueued
        self._stream = None        # ... on this stream
        self._event = None         # ... recorded after it
        self._fut = None
        self._fut_exc = None       # an error of the copy back itself

    # combine() (coalescing) reads a work's _exc and _outputs.
    @property
    def _exc(self):
        return self._fut_exc if self._fut_exc is not None else self._cpu_exception()

    def _cpu_exception(self):
        exc = getattr(self._work, "exception", None)
        return exc() if callable(exc) else None

    def _copy_back(self, stream) -> None:
        """Enqueue the copy back on stream once; a later stream waits for
        the first one's copy (on the device, not the CPU)."""
        with self._lock:
            if not self._copied:
                for dst, src in self._copies:
                    self._dev.copy(dst, src, stream)
                self._event = self._dev.record(stream) if self._copies else None
                self._stream = stream
                self._copied = True
                return
        if self._event is not None and stream is not None and stream != self._stream:
            self._dev.wait_event(stream, self._event)

    def wait(self, timeout=None) -> bool:
        """Wait for the CPU op (raising its error) and enqueue the copy back
        of its outputs on the current stream."""
        if timeout is None:
            self._work.wait()
        else:
            self._work.wait(timeout)
        self._copy_back(self._dev.current_stream(self._device))
        return True

    def is_completed(self) -> bool:
        """Whether the op is over: the CPU op failed, or it succeeded and its
        outputs are back on the device. A finished CPU op's copy back is
        enqueued here on the current stream if nobody did yet."""
        if not self._copied:
            if not self._work.is_completed():
                return False
            if self._cpu_exception() is not None:
                return True
            self._copy_back(self._dev.current_stream(self._device))
        if self._event is None or self._dev.query(self._event):
            self._copies = ()  # the copies are done: the host buffers may go
            return True
        return False

    def is_success(self) -> bool:
        return self.is_completed() and self._exc is None

    def exception(self):
        return self._exc

    def get_future(self):
        """A future completed with the output tensors once the CPU op is done
        and their copy back is enqueued (on the stream current now), or with
        the op's error."""
        with self._lock:
            if self._fut is not None:
                return self._fut
            fut = self._fut = self._dev.future(self._device)
        stream = self._dev.current_stream(self._device)

        def done(_):
            exc = self._cpu_exception()
            if exc is None:
                try:
                    with self._dev.stream_context(stream):
                        self._copy_back(stream)
                        fut.set_result(self._outputs)
                    return
                except Exception as e:  # noqa: BLE001 - handed to the future's waiters
                    exc = self._fut_exc = e
            fut.set_exception(exc)

        self._work.get_future().add_done_callback(done)
        return fut

    def result(self):
        self.wait()
        return self._outputs

    def synchronize(self):
        self.wait()

    def block_current_stream(self):
        self.wait()

    def _source_rank(self) -> int:
        self.wait()
        return self._work._source_rank()

    source_rank = _source_rank


# ----- the ops -------------------------------------------------------------

class StagedPath:
    """Collectives on CUDA tensors staged through host memory over the CPU
    methods of ``pg`` (a :class:`godist.GodistProcessGroup`). Its methods
    have the names and signatures of the process group's."""

    def __init__(self, pg, device=None):
        self._pg = pg
        self._dev = device if device is not None else CudaDevice()

    def _stage(self, op: str) -> _Stage:
        return _Stage(op, self._dev)

    def _run(self, st: _Stage, outputs, call):
        """Copy st's inputs to the host on the current stream, wait for that
        copy alone, run call() (the CPU op on the host tensors) and return
        its StagedWork."""
        dev = self._dev
        device = st.device if st.device is not None else dev.current_device()
        stream = dev.current_stream(device)
        if st.ins:
            for h, t in st.ins:
                dev.copy(h, t, stream)
            dev.synchronize(dev.record(stream))
        pg = self._pg
        coalesced = getattr(pg, "_coalesced", None)
        mark = len(coalesced) if coalesced is not None else 0
        work = call()
        staged = StagedWork(st.op, work, outputs, st.outs, dev, device)
        # Inside _start/_end_coalescing the CPU op recorded its own Work:
        # the group's combined Work must be this one, which copies back.
        coalesced = getattr(pg, "_coalesced", None)
        if coalesced is not None and len(coalesced) > mark and coalesced[-1] is work:
            coalesced[-1] = staged
        return staged

    # ----- collectives ----------------------------------------------------
    def allreduce(self, tensors, opts=None):
        st = self._stage("allreduce")
        h = st.inout("tensors", tensors)
        return self._run(st, tensors, lambda: self._pg.allreduce(h, opts))

    def allreduce_coalesced(self, tensors, opts=None):
        st = self._stage("allreduce_coalesced")
        h = st.inout("tensors", tensors)
        return self._run(st, tensors, lambda: self._pg.allreduce_coalesced(h, opts))

    def broadcast(self, tensors, opts=None):
        st = self._stage("broadcast")
        root = getattr(opts, "rootRank", 0)
        # Only the root's values are read; everyone's are written.
        h = st.inout("tensors", tensors) if root == self._pg.rank() else st.output("tensors", tensors)
        return self._run(st, tensors, lambda: self._pg.broadcast(h, opts))

    def reduce(self, tensors, opts=None):
        st = self._stage("reduce")
        root = getattr(opts, "rootRank", 0)
        # Only the root's tensor is written.
        h = st.inout("tensors", tensors) if root == self._pg.rank() else st.input("tensors", tensors)
        return self._run(st, tensors, lambda: self._pg.reduce(h, opts))

    def allgather(self, output_tensors, input_tensors, opts=None):
        st = self._stage("allgather")
        hi = st.input("input_tensors", input_tensors)
        ho = st.output("output_tensors", output_tensors)
        return self._run(st, output_tensors, lambda: self._pg.allgather(ho, hi, opts))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        st = self._stage("allgather_coalesced")
        hi = st.input("input_list", input_list)
        ho = st.output("output_lists", output_lists)
        return self._run(st, output_lists, lambda: self._pg.allgather_coalesced(ho, hi, opts))

    def all_gather_single(self, output, input, opts=None):
        st = self._stage("all_gather_into_tensor")
        hi = st.input("input", input)
        ho = st.output("output", output)
        return self._run(st, [output], lambda: self._pg.all_gather_single(ho, hi, opts))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        st = self._stage("all_gather_into_tensor_coalesced")
        hi = st.input("inputs", inputs)
        ho = st.output("outputs", outputs)
        return self._run(st, outputs, lambda: self._pg.all_gather_single_coalesced(ho, hi, opts))

    def gather(self, output_tensors, input_tensors, opts=None):
        st = self._stage("gather")
        hi = st.input("input_tensors", input_tensors)
        ho = st.output("output_tensors", output_tensors)
        return self._run(st, output_tensors, lambda: self._pg.gather(ho, hi, opts))

    def scatter(self, output_tensors, input_tensors, opts=None):
        st = self._stage("scatter")
        hi = st.input("input_tensors", input_tensors)
        ho = st.output("output_tensors", output_tensors)
        return self._run(st, output_tensors, lambda: self._pg.scatter(ho, hi, opts))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        st = self._stage("reduce_scatter")
        hi = st.input("input_tensors", input_tensors)
        ho = st.output("output_tensors", output_tensors)
        return self._run(st, output_tensors, lambda: self._pg.reduce_scatter(ho, hi, opts))

    def reduce_scatter_single(self, output, input, opts=None):
        st = self._stage("reduce_scatter_tensor")
        hi = st.input("input", input)
        ho = st.output("output", output)
        return self._run(st, [output], lambda: self._pg.reduce_scatter_single(ho, hi, opts))

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        st = self._stage("reduce_scatter_tensor_coalesced")
        hi = st.input("inputs", inputs)
        ho = st.output("outputs", outputs)
        return self._run(st, outputs, lambda: self._pg.reduce_scatter_single_coalesced(ho, hi, opts))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        st = self._stage("alltoall")
        hi = st.input("input_tensors", input_tensors)
        ho = st.output("output_tensors", output_tensors)
        return self._run(st, output_tensors, lambda: self._pg.alltoall(ho, hi, opts))

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, opts=None):
        st = self._stage("all_to_all_single")
        hi = st.input("input", input)
        ho = st.output("output", output)
        return self._run(st, [output], lambda: self._pg.all_to_all_single(ho, hi, output_split_sizes,
                                                                          input_split_sizes, opts))

    def barrier(self, opts=None):
        # No tensors: the work queued on the current stream is finished
        # first (as for any staged op's inputs), then the ranks meet on CPU.
        st = self._stage("barrier")
        dev = self._dev
        dev.synchronize(dev.record(dev.current_stream(dev.current_device())))
        return self._run(st, [], lambda: self._pg.barrier(opts))

    # ----- point to point -------------------------------------------------
    def send(self, tensors, dstRank, tag=0):
        st = self._stage("send")
        h = st.input("tensors", tensors)
        return self._run(st, tensors, lambda: self._pg.send(h, dstRank, tag))

    def recv(self, tensors, srcRank, tag=0):
        st = self._stage("recv")
        h = st.output("tensors", tensors)
        return self._run(st, tensors, lambda: self._pg.recv(h, srcRank, tag))

    def recv_anysource(self, tensors, tag=0):
        st = self._stage("recv")
        h = st.output("tensors", tensors)
        return self._run(st, tensors, lambda: self._pg.recv_anysource(h, tag))

    recvAnysource = recv_anysource


__all__ = ["StagedPath", "StagedWork", "CudaDevice", "HostDevice"]
