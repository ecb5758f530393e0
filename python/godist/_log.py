"""godist's logging: the ``godist`` logger, and Go's messages routed into it.

The level comes from ``GODIST_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR or
OFF), else from torch's own settings the way torch users expect
(``TORCH_DISTRIBUTED_DEBUG=DETAIL`` means DEBUG and ``INFO`` means INFO;
``TORCH_CPP_LOG_LEVEL``), else WARNING. When the application has not
configured logging, godist prints its records to stderr itself at that
level; otherwise they propagate to the application's handlers. Every
message names the rank (``[rank 3]``).

Go keeps its records in a bounded queue (libgodist/glog) at the level set
here, and one daemon thread per process drains it into the logger: no Go
thread ever calls into Python.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import struct
import threading

logger = logging.getLogger("godist")

_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "WARN": logging.WARNING,
           "ERROR": logging.ERROR, "FATAL": logging.CRITICAL, "CRITICAL": logging.CRITICAL, "OFF": 100}
_OFF = 100

_rank = os.environ.get("RANK")
_thread = None
_stop = threading.Event()
_lock = threading.Lock()
_handler = None
# The library's table, as godist._lib's load hands it to setup; None before
# the library loads and in a forked child, which must not call into Go.
_go = None


def _after_fork_in_child():
    global _go
    _go = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def level_from_env(env=os.environ) -> tuple[int, str]:
    """The level the environment asks for, and which variable said so."""
    v = env.get("GODIST_LOG_LEVEL", "").strip().upper()
    if v:
        if v in _LEVELS:
            return _LEVELS[v], "GODIST_LOG_LEVEL"
        if v.isdigit():
            return int(v), "GODIST_LOG_LEVEL"
        raise ValueError(f"godist: GODIST_LOG_LEVEL={env['GODIST_LOG_LEVEL']!r}: use DEBUG, INFO, WARNING, ERROR or OFF")
    v = env.get("TORCH_DISTRIBUTED_DEBUG", "").strip().upper()
    if v == "DETAIL":
        return logging.DEBUG, "TORCH_DISTRIBUTED_DEBUG"
    if v == "INFO":
        return logging.INFO, "TORCH_DISTRIBUTED_DEBUG"
    v = env.get("TORCH_CPP_LOG_LEVEL", "").strip().upper()
    if v in _LEVELS:
        return _LEVELS[v], "TORCH_CPP_LOG_LEVEL"
    return logging.WARNING, ""


def set_rank(rank: int) -> None:
    """Name this process's rank in its messages (the first group's rank,
    unless RANK says otherwise)."""
    global _rank
    if _rank is None:
        _rank = str(rank)


def prefix() -> str:
    return f"[rank {_rank}] " if _rank is not None else ""


def log(level: int, msg: str, *args) -> None:
    """Log a message of the Python side under the ``godist`` logger."""
    if logger.isEnabledFor(level):
        logger.log(level, prefix() + msg, *args)


class _Formatter(logging.Formatter):
    def __init__(self):
        super().__init__("%(asctime)s godist %(levelname)s %(message)s")


def setup(lib) -> None:
    """Set the levels and start draining Go's records (once, when the
    library loads). An invalid GODIST_LOG_LEVEL raises ValueError, after
    logging is set up at WARNING: the library stays usable, and Go's records
    are still drained."""
    global _thread, _handler, _go
    try:
        level, _ = level_from_env()
        bad = None
    except ValueError as e:
        level, bad = logging.WARNING, e
    with _lock:
        if logger.level == logging.NOTSET:
            logger.setLevel(level)
        if _handler is None and not logger.handlers and not logging.getLogger().handlers:
            # Nobody configured logging: print godist's records at its level.
            _handler = logging.StreamHandler()
            _handler.setFormatter(_Formatter())
            logger.addHandler(_handler)
            logger.propagate = False
        _go = lib
        effective = logger.getEffectiveLevel()
        lib.log_level(effective if effective < _OFF else _OFF)
        if _thread is None:
            _stop.clear()
            _thread = threading.Thread(target=_drain_loop, args=(lib,), name="godist-log", daemon=True)
            _thread.start()
    if bad is not None:
        raise bad


def set_level(level: int | str) -> None:
    """Change godist's level at run time, for Go's records too: a name
    ("DEBUG") or a number of :mod:`logging`."""
    if isinstance(level, str):
        if level.upper() not in _LEVELS:
            raise ValueError(f"godist: unknown log level {level!r}: use DEBUG, INFO, WARNING, ERROR or OFF")
        level = _LEVELS[level.upper()]
    logger.setLevel(level)
    lib = _go
    if lib is not None:
        lib.log_level(min(level, _OFF))


_REC = struct.Struct("<iI")


def _emit(raw: bytes) -> None:
    off = 0
    while off + 8 <= len(raw):
        level, n = _REC.unpack_from(raw, off)
        msg = raw[off + 8: off + 8 + n].decode("utf-8", "replace")
        off += 8 + n
        if logger.isEnabledFor(level):
            logger.log(level, prefix() + msg)


def _drain_loop(lib) -> None:
    buf = ctypes.create_string_buffer(1 << 16)
    n = ctypes.c_int64()
    while not _stop.is_set():
        try:
            if lib.log_drain(200, buf, len(buf), ctypes.byref(n)) != 0:
                return
        except Exception:  # a forked child, or the interpreter finalizing
            return
        if n.value:
            _emit(buf.raw[: n.value])


def flush(lib=None) -> None:
    """Emit every record Go has queued (at exit, and for tests)."""
    lib = lib or _go
    if lib is None:  # not loaded, or a forked child
        return
    buf = ctypes.create_string_buffer(1 << 16)
    n = ctypes.c_int64()
    while lib.log_drain(0, buf, len(buf), ctypes.byref(n)) == 0 and n.value:
        _emit(buf.raw[: n.value])


def stop(timeout: float = 1.0) -> None:
    """Stop the drain thread and emit what is left (at interpreter exit)."""
    global _thread
    _stop.set()
    t, _thread = _thread, None
    if t is not None and t.is_alive() and t is not threading.current_thread():
        t.join(timeout)
    try:
        flush()
    except Exception:
        pass


# Registered when godist is first imported, so it runs after the groups
# closed (atexit runs last-registered first) and their last words show.
atexit.register(stop)
