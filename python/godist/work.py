"""Work objects and the completion thread.

An asynchronous op is handed to Go with ``flags=ASYNC`` and held here (with its
buffers). A caller that waits for it settles it on its own thread, waiting
in Go. Once someone watches it instead (``get_future``, ``is_completed``),
``godist_work_watch`` has Go push its handle to a completion queue when it
finishes; one daemon thread per process blocks in ``godist_wait_any`` (the
GIL is released while it waits), collects the outcome, runs the op's
finaliser (copy-backs for non-contiguous outputs) and completes the
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

from . import _errors, _lib
from ._lib import WAIT_AT, fill_wait

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
        # A finished op is settled here, on the calling thread: a caller
        # polling in a loop holds the GIL the completion thread would need
        # (it got it back only every switch interval, 5 ms).
        if not self._done:
            g = self._group
            if g is None or not completer.poll_here(g):
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
            if timeout is not None or g is None or not completer.wait_held(g):
                self._block(timeout)
        if self._exc is not None:
            raise self._exc
        return True

    def _block(self, timeout):
        secs = None
        if isinstance(timeout, datetime.timedelta):
            secs = timeout.total_seconds()
        elif timeout is not None:
            secs = float(timeout)
        if secs is not None and secs <= 0:
            secs = None
        if secs is None and self._group is not None:
            # Wait in Go on this thread instead of for the completion thread.
            completer.wait_here(self._group)
            if self._done:
                return
        ev = self._get_event()
        # A held op reaches the completion thread (which sets ev) only once
        # it is watched.
        self._watch()
        deadline = None if secs is None else time.monotonic() + secs
        while not ev.wait(0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))):
            if deadline is not None and time.monotonic() >= deadline:
                raise _errors.GodistTimeoutError(
                    f"godist: {self._op}: Work.wait timed out after {secs:g}s (the op is still pending)",
                    _errors.TIMEOUT)

    def get_future(self):
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


class _Pending:
    """One Go work handle an op is waiting for."""

    __slots__ = ("group", "handle")

    def __init__(self, group, handle):
        self.group = group
        self.handle = handle


class _Group:
    """An op made of one or more Go works; it completes when all have."""

    __slots__ = ("work", "left", "exc", "source", "finalize", "keep", "handles")

    def __init__(self, work, n, finalize, keep, handles=()):
        self.work, self.left, self.exc, self.source = work, n, None, -1
        self.finalize, self.keep, self.handles = finalize, keep, list(handles)


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


class _Completer:
    """The per-process completion thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held = {}  # handle -> _Group: submitted, nobody watches yet
        self._pending = {}  # handle -> _Pending: Go pushes it when done
        self._early = {}
        self._claimed = set()  # handles settled by a waiting caller instead
        self._thread = None
        self._stopping = False

    def hold(self, group: _Group):
        """Keep an async op's handles (and through them its buffers) until
        a caller waits for it or watches it. Past _HOLD_MAX held handles,
        the oldest ones are watched, so ops nobody waits for still get
        settled and freed."""
        with self._lock:
            for h in group.handles:
                self._held[h] = group
            spill = len(self._held) > _HOLD_MAX
        if spill:
            self._spill()

    def hold_one(self, group: _Group, h: int):
        """hold for a group of the one handle h, as adopt makes: a single
        dict store, atomic under the GIL like wait_held's pop (every use of
        _held is one dict operation), so no lock."""
        held = self._held
        held[h] = group
        if len(held) > _HOLD_MAX:
            self._spill()

    def _spill(self):
        """Watch the older half of the held groups."""
        with self._lock:
            old = list(self._held.values())[: len(self._held) // 2]
        for g in dict.fromkeys(old):
            self.watch(g)

    def watch(self, group: _Group):
        """Have the completion thread settle group when Go completes it."""
        lib = _lib.load()
        with self._lock:
            mine = [h for h in group.handles if self._held.pop(h, None) is not None]
        if mine:
            self.add(group, mine)
            for h in mine:
                lib.work_watch(h)

    def add(self, group: _Group, handles):
        lib = _lib.load()
        ready = []
        with self._lock:
            for h in handles:
                if h in self._early:
                    self._early.pop(h)
                    ready.append(h)
                else:
                    self._pending[h] = _Pending(group, h)
            if not self._stopping and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._loop, name="godist-completion", daemon=True)
                self._thread.start()
        for h in ready:
            self._settle(lib, group, h)

    def wait_held(self, group) -> bool:
        """wait_here for the common case, an op of one Go work that nobody
        watches (the caller waits right after issuing it); reports whether
        it applied. Taking the handle out of _held (one dict operation, atomic
        under the GIL) makes it this thread's alone: watch and wait_here no
        longer find it, and Go pushes only watched handles."""
        handles = group.handles
        if len(handles) != 1 or self._held.pop(handles[0], None) is None:
            return False
        exc, src = _wait_handle(_lib.load(), handles[0])
        group.left = 0
        group.exc = exc
        if src >= 0:
            group.source = src
        _complete_group(group)
        return True

    def wait_here(self, group):
        """Settle group's pending handles on the calling thread, waiting in
        Go (GIL released, in slices so Ctrl-C works); saves the hop through
        the completion thread for a caller that blocks anyway."""
        lib = _lib.load()
        with self._lock:
            held = [h for h in group.handles if self._held.pop(h, None) is not None]
            watched = [h for h in group.handles if self._pending.pop(h, None) is not None]
            self._claimed.update(watched)
        if watched:
            # Handles Go has not pushed yet never will be: the completion
            # thread is not woken for them at all.
            unqueued = [h for h in watched if lib.work_claim(h) == _errors.OK]
            if unqueued:
                with self._lock:
                    self._claimed.difference_update(unqueued)
        for h in held + watched:
            exc, src = _wait_handle(lib, h)
            self._record(group, exc, src)

    def poll_here(self, group) -> bool:
        """Settle group on the calling thread if every one of its Go works
        has finished (a check that does not wait), and report whether it did."""
        lib = _lib.load()
        src = ctypes.c_int32()
        for h in group.handles:
            try:
                if lib.work_wait(h, 0, ctypes.byref(src)) == _errors.NOT_READY:
                    return False
            except Exception:  # the op's error, or a handle settled already: done
                pass
        self.wait_here(group)
        return True

    def _settle(self, lib, group, h):
        # h has completed (Go pushed it): one raw call collects its outcome
        # and frees it.
        exc, src = _wait_handle(lib, h)
        self._record(group, exc, src)

    def _record(self, group, exc, src):
        """One of group's Go works ended (its handle is freed already)."""
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
                with self._lock:
                    p = self._pending.pop(h, None)
                    if p is None:
                        if h in self._claimed:
                            self._claimed.discard(h)
                        else:
                            self._early[h] = True
                        continue
                self._settle(lib, p.group, h)


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


def submit(op: str, outputs, calls, finalize=None, keep=None, async_op=True) -> GodistWork:
    """Run one op made of Go calls. ``calls`` is a list of functions, each
    taking (flags, work_ptr) and calling one exported function. Returns a
    GodistWork, completed already when async_op is False.

    While torch's profiler runs, the op shows in it as ``godist:<op>`` (its
    submission; the whole op when synchronous): Python process groups are
    called directly, so torch's own c10d profiler events never fire for them."""
    if torch._C._autograd._profiler_enabled():
        with torch.profiler.record_function(f"godist:{op}"):
            return _submit(op, outputs, calls, finalize, keep, async_op)
    return _submit(op, outputs, calls, finalize, keep, async_op)


def _submit(op, outputs, calls, finalize, keep, async_op):
    lib = _lib.load()
    work = GodistWork(op, outputs)
    handles = []
    # 0: a synchronous caller; Go returns the outcome of an op that
    # completed during the call (inline collectives, sends) with no handle.
    # ASYNC: Go does not report completion until the work is watched
    # (get_future, is_completed); a caller that waits settles it on its own
    # thread.
    flags = _lib.ASYNC if async_op else 0
    try:
        for call in calls:
            h = ctypes.c_uint64()
            call(flags, ctypes.byref(h))
            if h.value:
                handles.append(h.value)
    except Exception:
        # Already submitted parts still run; wait for them so no Go op writes
        # into memory Python may free, then re-raise.
        for h in handles:
            _wait_handle(lib, h)
        raise
    group = _Group(work, len(handles), finalize, keep, handles)
    if not handles:
        _complete_group(group)
        return work
    if async_op:
        work._group = group
        completer.hold(group)
        return work
    for h in handles:
        exc, src = _wait_handle(lib, h)
        if exc is not None and group.exc is None:
            group.exc = exc
        if src >= 0:
            group.source = src
    _complete_group(group)
    if group.exc is not None:
        raise group.exc
    return work


def adopt(op: str, outputs, handle: int, keep=None) -> GodistWork:
    """The Work of an op submitted by a raw call that is still running: held
    like any asynchronous op (see submit)."""
    work = _Live()
    work._op = op
    work._outputs = outputs
    group = _Group(work, 1, None, keep, (handle,))
    work._group = group
    completer.hold_one(group, handle)
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
    time of a GodistWork: 0.4 against 0.8 µs, of a small op's 7 µs or so."""

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
        exc, src = _wait_handle(_lib.load(), handle)
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


def _wait_handle(lib, h):
    """Wait for a Go work (in slices, so Ctrl-C works), free its handle and
    return (error or None, source rank). An interrupt leaves it allocated:
    the op may still be writing into its buffers. One raw call per slice
    (godist_call_work_wait through this thread's godist_call block)."""
    if _lib._forked:
        raise _lib._forked_error()
    view, addr, blk, eb = _lib.call_block()
    wait = lib.raw.call_work_wait
    rc = _errors.NOT_READY
    while rc == _errors.NOT_READY:
        fill_wait(view, WAIT_AT, _WAIT_SLICE_MS, 0, h)
        rc = wait(addr)
    if rc == _errors.OK:
        return None, blk.arg0
    return _errors.from_buffer(rc, eb), -1


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
