"""Work objects and their completion.

Go owns the state of every op (capi/work.go): running or done, watched or
not, and which caller collected its outcome (exactly one does:
``godist_work_wait`` frees the handle for the first caller that finds the
op done and tells any other that it is gone). Python keeps one table, the
asynchronous ops not yet collected (``_Completer._ops``, handle -> op),
which holds their buffers alive.

A caller that waits collects its op on its own thread, waiting in Go with
the GIL released. Once someone watches an op instead (``get_future``,
``is_completed``, or past ``_HOLD_MAX`` outstanding ops), Go pushes its handle
to the completion queue when it finishes; one daemon thread per process
blocks in ``godist_wait_any``, collects the op, runs its finaliser
(copy-backs for non-contiguous outputs) and completes the
:class:`GodistWork` (its event and its torch future). Synchronous ops
(``async_op=False``) are waited for on the calling thread and return an
already completed Work.
"""

from __future__ import annotations

import atexit
import ctypes
import datetime
import os
import threading
import time

import torch
import torch.distributed as dist

from . import _errors, _futures, _lib

_WAIT_SLICE_MS = 100
_yield = getattr(os, "sched_yield", lambda: None)
_HOLD_MAX = 4096

# Guards the lazily made parts of every GodistWork (held for a few
# attribute accesses only).
_lazy_lock = threading.Lock()


def _complete_future(fut, outputs, exc):
    if exc is None:
        fut.set_result(outputs)
    else:
        fut.set_exception(exc)


class GodistWork(dist._Work):
    """The Work returned by every godist operation."""

    # The threading.Event and the torch Future are made only when someone
    # needs them (a blocking wait on another thread's completion, or
    # get_future): most works complete before anyone looks.

    # Defaults, shadowed per instance once set.
    _event = None
    _exc = None
    _source = -1
    _fut = None
    _tfut = None  # the future of a half-precision op, holding a TensorList (godist._futures)
    _group = None  # set while the completion thread owns the op

    def __init__(self, op: str, outputs, done: bool = False, source: int = -1):
        super().__init__()
        self._op = op
        self._outputs = outputs
        self._done = done
        if source >= 0:
            self._source = source

    # completion (called once, by the completion thread or the caller)
    def _finish(self, exc=None, source=-1):
        with _lazy_lock:
            self._exc = exc
            self._source = source
            self._done = True
            fut, ev = self._fut, self._event
        # Complete the future before the event: a waiter woken by the event
        # may read the future's value at once.
        if fut is not None:
            _complete_future(fut, self._outputs, exc)
        if ev is not None:
            ev.set()

    def _get_event(self):
        with _lazy_lock:
            if self._event is None:
                self._event = threading.Event()
                if self._done:
                    self._event.set()
            return self._event

    def is_completed(self) -> bool:
        # A finished op is collected here, on the calling thread: a caller
        # polling in a loop holds the GIL the completion thread would need
        # (it got it back only every switch interval, 5 ms).
        if not self._done:
            g = self._group
            if g is None or not completer.collect(g, 0):
                self._watch()
                _yield()  # on a busy core, let the op's thread run
        return self._done

    def is_success(self) -> bool:
        return self._done and self._exc is None

    def exception(self):
        return self._exc

    def wait(self, timeout=None) -> bool:
        """Wait for completion and raise the op's error, if any. A timeout
        (timedelta or seconds; 0 or None means none) that passes first raises
        GodistTimeoutError."""
        if not self._done:
            g = self._group
            if timeout is None and g is not None:
                # Collect it on this thread, waiting in Go.
                completer.collect(g, None)
            if not self._done:
                self._block(timeout)
        if self._exc is not None:
            raise self._exc
        return True

    def _block(self, timeout):
        """Wait for the completion thread to complete this Work."""
        secs = None
        if isinstance(timeout, datetime.timedelta):
            secs = timeout.total_seconds()
        elif timeout is not None:
            secs = float(timeout)
        if secs is not None and secs <= 0:
            secs = None
        ev = self._get_event()
        # An op reaches the completion thread (which sets ev) only once it
        # is watched.
        self._watch()
        deadline = None if secs is None else time.monotonic() + secs
        while not ev.wait(0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))):
            if deadline is not None and time.monotonic() >= deadline:
                raise _errors.GodistTimeoutError(
                    f"godist: {self._op}: Work.wait timed out after {secs:g}s (the op is still pending)",
                    _errors.TIMEOUT)

    def get_future(self):
        if self._tfut is not None:
            return self._tfut
        if self._fut is None and self._exc is None and _futures.wanted(self._outputs):
            # Typed for torch's C++ (the built-in compress hooks); completed
            # by TorchScript, not by this work.
            typed = _futures.finished(self._outputs) if self._done else _futures.pending(self)
            if typed is not None:
                with _lazy_lock:
                    if self._tfut is None:
                        self._tfut = typed
                    return self._tfut
        now = False
        with _lazy_lock:
            fut = self._fut
            if fut is None:
                fut = self._fut = torch.futures.Future()
                now = self._done
        if now:  # outside the lock: callbacks run inside set_result
            _complete_future(fut, self._outputs, self._exc)
        else:
            self._watch()
        return fut

    def _watch(self):
        g = self._group
        if g is not None:
            completer.watch(g)

    def result(self):
        self.wait()
        return self._outputs

    def synchronize(self):
        self.wait()

    def _source_rank(self) -> int:
        self.wait()
        return self._source

    source_rank = _source_rank

    def block_current_stream(self):
        self.wait()


class _Group:
    """An op made of one or more Go works; it completes when all have been
    collected."""

    __slots__ = ("work", "left", "exc", "source", "finalize", "keep", "handles", "watched")

    def __init__(self, work, finalize, keep, handles):
        self.work, self.left, self.exc, self.source = work, len(handles), None, -1
        self.finalize, self.keep, self.handles, self.watched = finalize, keep, handles, False


def _complete_group(g: _Group):
    exc = g.exc
    if exc is None and g.finalize is not None:
        try:
            g.finalize()
        except Exception as e:  # pragma: no cover - finalisers are copies
            exc = e
    g.keep = None
    g.work._group = None
    g.work._finish(exc, g.source)


# What _collect reports for a handle that another thread collected.
_GONE = object()


class _Completer:
    """The table of asynchronous ops not yet collected, and the per-process
    completion thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ops = {}  # handle -> _Group, in submission order
        self._limit = _HOLD_MAX
        self._thread = None
        self._stopping = False

    def hold(self, group: _Group):
        """Keep an async op (and through it its buffers) until it is
        collected. Past _HOLD_MAX outstanding ops, the older half is watched,
        so ops nobody waits for still get collected and freed."""
        ops = self._ops
        for h in group.handles:
            ops[h] = group  # one dict operation: atomic under the GIL
        if len(ops) > self._limit:
            old = list(ops.values())[: len(ops) // 2]
            for g in dict.fromkeys(old):
                self.watch(g)
            self._limit = max(_HOLD_MAX, 2 * len(ops))

    def watch(self, group: _Group):
        """Have the completion thread collect group when Go completes it."""
        if group.watched:
            return
        group.watched = True
        with self._lock:
            if not self._stopping and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._loop, name="godist-completion", daemon=True)
                self._thread.start()
        lib = _lib.load()
        for h in group.handles:
            lib.work_watch(h)  # a collected handle is refused: nothing to watch

    def collect(self, group: _Group, timeout_ms) -> bool:
        """Collect group's Go works on this thread, waiting up to timeout_ms
        for each (None: until done, in slices so Ctrl-C works), and report
        whether none is still running. Works another thread collected are
        skipped; the group completes on whichever thread collects its last."""
        for h in group.handles:
            while True:
                r = _collect(h, _WAIT_SLICE_MS if timeout_ms is None else timeout_ms)
                if r is not None:
                    break
                if timeout_ms is not None:
                    return False
            if r is not _GONE:
                self._record(self._ops.pop(h), *r)
        return True

    def _record(self, group, exc, src):
        """One of group's Go works was collected by this thread."""
        if len(group.handles) == 1:  # no other thread records for it
            group.exc, group.left = exc, 0
            if src >= 0:
                group.source = src
            _complete_group(group)
            return
        with self._lock:
            if exc is not None and group.exc is None:
                group.exc = exc
            if src >= 0:
                group.source = src
            group.left -= 1
            done = group.left == 0
        if done:
            _complete_group(group)

    def _loop(self):
        lib = _lib.load()
        cap = 64
        out = (ctypes.c_uint64 * cap)()
        n = ctypes.c_int32()
        while not self._stopping:
            try:
                lib.wait_any(_WAIT_SLICE_MS, out, cap, ctypes.byref(n))
            except _errors.GodistForkError:
                return
            for i in range(n.value):
                h = out[i]
                r = _collect(h, 0)
                if r is not None and r is not _GONE:
                    self._record(self._ops.pop(h), *r)

    def stop(self, timeout: float = 2.0):
        """Stop the completion thread (at interpreter exit, after the groups
        closed). A daemon thread still running Python when the interpreter
        finalizes is ended with pthread_exit, which aborts the process when it
        unwinds through torch's C++ frames (a torch future being completed or
        freed): "terminate called without an active exception"."""
        with self._lock:
            self._stopping = True
            t = self._thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(timeout)


completer = _Completer()
# Registered before godist.close_all (imported later), so it runs after it.
atexit.register(completer.stop)


def _collect(h: int, timeout_ms: int):
    """Wait up to timeout_ms for Go work h and collect it: (error or None,
    source rank) if this call collected it, _GONE if another caller had,
    None if it is still running. One raw call through this thread's wait
    block."""
    if _lib._forked:
        raise _lib._forked_error()
    addr, blk, eb = _lib.wait_block(_WAIT_SLICE_MS)
    blk.work, blk.timeout_ms = h, timeout_ms
    rc = _lib.load().raw.work_wait(addr)
    if rc == _errors.OK:
        return None, blk.source
    if rc == _errors.NOT_READY:
        return None
    if rc == _errors.INVALID and eb.cause == _HANDLE:
        return _GONE
    return _errors.from_buffer(rc, eb), -1


_HANDLE = _errors.CAUSES.index("handle")


def _wait_handle(h: int):
    """Wait for a Go work nobody else collects (in slices, so Ctrl-C
    works) and return (error or None, source rank). An interrupt leaves it
    uncollected: the op may still be writing into its buffers."""
    while True:
        r = _collect(h, _WAIT_SLICE_MS)
        if r is not None:
            return (_errors.GodistInvalidError(f"godist: work {h} was collected twice", _errors.INVALID), -1) \
                if r is _GONE else r


def submit(op: str, outputs, calls, finalize=None, keep=None, async_op=True) -> GodistWork:
    """Run one op made of Go calls: ``calls`` is a list of (entry point,
    :class:`godist._lib.GodistOp`) pairs, one per Go work. Returns a
    GodistWork, completed already when async_op is False.

    While torch's profiler runs, the op shows in it as ``godist:<op>`` (its
    submission; the whole op when synchronous): Python process groups are
    called directly, so torch's own c10d profiler events never fire for them."""
    if torch._C._autograd._profiler_enabled():
        with torch.profiler.record_function(f"godist:{op}"):
            return _submit(op, outputs, calls, finalize, keep, async_op)
    return _submit(op, outputs, calls, finalize, keep, async_op)


def _submit(op, outputs, calls, finalize, keep, async_op):
    work = GodistWork(op, outputs)
    handles = []
    # Without ASYNC, Go returns the outcome of an op that completed during
    # the call (inline collectives, sends) and no handle. With it, Go
    # reports completion to the completion thread only once the work is
    # watched; a caller that waits collects it on its own thread.
    flags = _lib.ASYNC if async_op else 0
    try:
        for fn, blk in calls:
            blk.flags = flags
            h = _lib.run(fn, blk)
            if h:
                handles.append(h)
    except Exception:
        # Already submitted parts still run; wait for them so no Go op writes
        # into memory Python may free, then re-raise.
        for h in handles:
            _wait_handle(h)
        raise
    group = _Group(work, finalize, keep, handles)
    if not handles:
        _complete_group(group)
        return work
    if async_op:
        work._group = group
        completer.hold(group)
        return work
    for h in handles:
        exc, src = _wait_handle(h)
        if exc is not None and group.exc is None:
            group.exc = exc
        if src >= 0:
            group.source = src
    _complete_group(group)
    if group.exc is not None:
        raise group.exc
    return work


def adopt(op: str, outputs, handle: int, keep=None) -> GodistWork:
    """The Work of an op submitted by a fast path and still running: held
    like any asynchronous op (see submit)."""
    work = _Live()
    work._op = op
    work._outputs = outputs
    group = _Group(work, None, keep, (handle,))
    work._group = group
    completer.hold(group)
    return work


class _Live(GodistWork):
    """The Work adopt returns, of an op still running: made by pybind's
    __init__ alone, as _Done (below), with _done false until _finish."""

    _done = False
    __init__ = dist._Work.__init__


class _Done(GodistWork):
    """A Work complete when it is made: what a synchronous fast path returns
    when its op finished during the call. Its __init__ is pybind's alone
    (the caller sets _op and _outputs), which makes it in about half the
    time of a GodistWork."""

    _done = True
    __init__ = dist._Work.__init__


def finish_sync(op: str, outputs, rc: int, handle: int, errbuf, source: int = -1) -> GodistWork:
    """The end of a synchronous fast path, after a raw call without ASYNC:
    raise the call's error, else wait for the op if Go queued it behind
    earlier asynchronous ones (handle: its handle, 0 when it finished during
    the call), and return a completed Work."""
    if rc != _errors.OK:
        raise _errors.from_buffer(rc, errbuf)
    if handle:
        exc, src = _wait_handle(handle)
        if exc is not None:
            raise exc
        if src >= 0:
            source = src
    w = _Done()
    w._op = op
    w._outputs = outputs
    if source >= 0:
        w._source = source
    return w


def combine(op: str, works) -> GodistWork:
    """One Work that completes when all of works have (the first error wins);
    its future's value is the concatenation of their output lists."""
    outputs = []
    for w in works:
        outputs.extend(w._outputs if isinstance(w._outputs, list) else [w._outputs])
    out = GodistWork(op, outputs)
    if not works:
        out._finish()
        return out
    lock = threading.Lock()
    left = [len(works)]

    def one_done(_fut):
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            exc = next((w._exc for w in works if w._exc is not None), None)
            out._finish(exc)

    for w in works:
        w.get_future().add_done_callback(one_done)
    return out
