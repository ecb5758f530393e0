"""The native kernel of ``torch.ops.godist.all_reduce_``: found, compiled
and loaded here, once per process.

The kernel (``csrc/ops.cpp``, shipped with the package) takes the op's
common case straight from torch's dispatcher to the library's
``godist_allreduce``, without Python; everything else it hands to the
Python kernel (:mod:`godist.ops`). It is built on the op's first call, not
at import:

* ``GODIST_NATIVE_OPS=0`` (or ``false``, ``off``, ``no``) turns it off: the
  op stays on the Python kernel.
* The compiled library is cached in ``$GODIST_CACHE/native/`` (default
  ``$XDG_CACHE_HOME/godist``, else ``~/.cache/godist``), in a directory
  named by torch's version and a hash of what went into it (the source,
  ``godist.h``, the compiler command, torch's C++ ABI): a new torch or a
  new godist builds its own.
* A build runs ``$CXX`` (default ``g++``) once (about 15-20 s), with the
  header paths of ``torch.utils.cpp_extension.include_paths()`` and links
  ``libtorch_cpu`` and ``libc10``. Ranks starting together build it once:
  the build holds a lock file (fcntl) and writes a temporary name that it
  renames into place; the others wait for the lock and load the result. A
  failed build is remembered for a few minutes beside the cache entry so
  that every rank of a job does not retry it.
* Loading (``torch.ops.load_library``) registers the kernel for the CPU
  dispatch key of ``godist::all_reduce_`` and defines the ``_native_*``
  setup ops, through which this module hands it its tables: the entry
  point's address, the error buffer's size, the dtype and reduce op codes.
  Groups are bound later, one by one, by the Python kernel (:func:`bind`),
  and unbound whenever their fast path stops applying (:func:`unbind`).

No compiler, a failed build or load, an unwritable cache: the op stays on
the Python kernel, and the reason is logged once (INFO) through the
``godist`` logger. Nothing here raises to the caller.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time

import torch

from . import _log

_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(_DIR, "csrc", "ops.cpp")
HEADER = os.path.join(_DIR, "godist.h")
_LIB_NAME = "godist_ops.so"
_BUILD_TIMEOUT_S = 600
# How long a failed build stops other processes from trying again.
_FAILED_FOR_S = 300

_lock = threading.Lock()
_state = None  # None: not tried; True: loaded; False: off or failed
_why = ""  # why the kernel is not loaded
_path = None
_U64 = 1 << 64


def enabled() -> bool:
    """Whether GODIST_NATIVE_OPS allows the native kernel (it does unless
    set to 0, false, off or no)."""
    return os.environ.get("GODIST_NATIVE_OPS", "").strip().lower() not in ("0", "false", "off", "no")


def loaded() -> bool:
    """Whether the native kernel is loaded in this process."""
    return _state is True


def reason() -> str:
    """Why the native kernel is not loaded ("" if it is, or not tried yet)."""
    return _why


def path() -> str | None:
    """The compiled library loaded, if any."""
    return _path


def cache_root() -> str:
    """Where compiled kernels are kept: $GODIST_CACHE/native, default
    $XDG_CACHE_HOME/godist/native or ~/.cache/godist/native."""
    base = os.environ.get("GODIST_CACHE", "").strip()
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        base = os.path.join(xdg or os.path.join(os.path.expanduser("~"), ".cache"), "godist")
    return os.path.join(base, "native")


def ensure() -> bool:
    """Load the native kernel if it is not loaded yet (building it if
    needed); True if it is loaded. Called by the Python kernel on every
    call: after the first, one global read."""
    if _state is not None:
        return _state
    return _ensure()


def _ensure() -> bool:
    global _state, _why, _path
    with _lock:
        if _state is not None:
            return _state
        if not enabled():
            _state, _why = False, "GODIST_NATIVE_OPS=0"
            _log.log(logging.DEBUG, "godist: torch.ops.godist.all_reduce_ stays on its Python kernel (%s)", _why)
            return False
        try:
            p = _build()
            _load(p)
            _state, _path = True, p
            _log.log(logging.DEBUG, "godist: torch.ops.godist.all_reduce_: native kernel loaded from %s", p)
        except Exception as e:  # noqa: BLE001 - never raise to the op's caller
            _state, _why = False, str(e) or type(e).__name__
            _log.log(logging.INFO, "godist: torch.ops.godist.all_reduce_ stays on its Python kernel: %s", _why)
        return _state


def _compiler() -> list[str]:
    cxx = os.environ.get("CXX", "").strip()
    if cxx:
        return shlex.split(cxx)
    for name in ("g++", "c++"):
        if shutil.which(name):
            return [name]
    raise RuntimeError("no C++ compiler (g++ or c++ on PATH, or $CXX)")


def _key(cxx: list[str], abi: int) -> str:
    h = hashlib.sha256()
    for part in (SOURCE, HEADER):
        with open(part, "rb") as f:
            h.update(f.read())
    h.update(repr((cxx, abi, torch.__version__, getattr(torch.version, "git_version", ""))).encode())
    return f"{torch.__version__.replace('+', '_')}-{h.hexdigest()[:16]}"


def _build() -> str:
    """The compiled library's path, building it if the cache has none."""
    cxx = _compiler()
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    d = os.path.join(cache_root(), _key(cxx, abi))
    out = os.path.join(d, _LIB_NAME)
    if os.path.exists(out):
        return out
    os.makedirs(d, exist_ok=True)
    import fcntl

    failed = os.path.join(d, "failed.log")
    with open(os.path.join(d, "lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            if os.path.exists(out):
                return out
            try:
                if time.time() - os.path.getmtime(failed) < _FAILED_FOR_S:
                    with open(failed, encoding="utf-8", errors="replace") as f:
                        raise RuntimeError(f"a build failed moments ago ({failed}): {f.read()[-2000:]}")
            except FileNotFoundError:
                pass
            _compile(cxx, abi, d, out, failed)
            try:
                os.unlink(failed)
            except FileNotFoundError:
                pass
            return out
        finally:
            fcntl.flock(lk, fcntl.LOCK_UN)


def _compile(cxx: list[str], abi: int, d: str, out: str, failed: str) -> None:
    from torch.utils.cpp_extension import include_paths

    torch_lib = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "lib")
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=d)
    os.close(fd)
    argv = [*cxx, "-O2", "-std=c++20", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            *[f"-I{p}" for p in include_paths()], f"-I{_DIR}", SOURCE, "-o", tmp,
            f"-L{torch_lib}", f"-Wl,-rpath,{torch_lib}", "-ltorch_cpu", "-lc10"]
    _log.log(logging.INFO, "godist: compiling the native kernel of torch.ops.godist.all_reduce_ into %s "
             "(once per torch version; about 15-20 s)", d)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
        if p.returncode != 0:
            msg = f"{shlex.join(argv)} exited {p.returncode}\n{p.stdout}{p.stderr}"
            with open(failed, "w", encoding="utf-8") as f:
                f.write(msg)
            raise RuntimeError("the build failed: " + msg[-2000:])
        os.replace(tmp, out)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the build did not finish in {_BUILD_TIMEOUT_S}s") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _load(p: str) -> None:
    from . import _fast, _lib, _types, ops

    lib = _lib.load()
    torch.ops.load_library(p)
    g = torch.ops.godist
    for dtype, code in _types.DTYPE_CODES.items():
        g._native_dtype(dtype, code)
    for name, rop in ops._OPS.items():
        code = _fast._op_code(rop)
        if code in _fast._SIMPLE:
            g._native_op(name, code)
    # the entry point last: the kernel takes no op before it is set
    g._native_setup(ctypes.cast(lib.raw.allreduce, ctypes.c_void_p).value, _lib.ERRLEN)


def _signed(h: int) -> int:
    """A uint64 handle as the int64 a schema's int holds."""
    return h - _U64 if h >= 1 << 63 else h


_timeout_ms = None


def bind(key: str, pg, tensor) -> None:
    """After the Python kernel ran an all_reduce on pg (the group called
    key) for tensor: bind the group in the native kernel's table if its fast
    path applies now (a godist group, not hooked, not coalescing, not under
    TORCH_DISTRIBUTED_DEBUG=DETAIL, open, in the process that loaded the
    library), so that its next calls skip Python."""
    global _timeout_ms
    if _state is not True or not tensor.is_cpu:
        return
    from . import _fast, _lib
    from .process_group import GodistProcessGroup

    if not isinstance(pg, GodistProcessGroup) or _lib._forked:
        return
    g = pg._fast_g
    if g is None or g._detail or g._coalesced is not None or g._closed or key in g._native_keys:
        return
    name = key
    if not key:
        # the default group: bound under the name the registry resolves
        # to it (a check of the same object in C++ on every call)
        name = pg.group_name
        try:
            if torch.distributed.distributed_c10d._resolve_process_group(name) is not pg:
                return
        except Exception:  # noqa: BLE001 - not registered: stays on the Python kernel
            return
    if _timeout_ms is None:
        _timeout_ms = _fast._timeout(torch.distributed.AllreduceOptions())
    if torch.ops.godist._native_bind(key, name, _signed(g._h), _timeout_ms):
        g._native_keys = g._native_keys | {key}
        pg._native_g = g


def unbind(g) -> None:
    """Drop every binding to the godist Group g (godist._group.Group): its
    fast path's conditions changed (hooks, flight recorder, reconfigure,
    coalescing, set_timeout, close, abort); the next call goes through the
    Python kernel, which binds it again if they allow."""
    h = getattr(g, "_h", 0)
    if _state is not True or not h:  # not loaded; a group not formed yet (enable_reconfigure=True)
        return
    g._native_keys = frozenset()
    try:
        torch.ops.godist._native_unbind_handle(_signed(h))
    except Exception:  # noqa: BLE001 - at interpreter exit
        pass


def bound() -> list[str]:
    """The group names bound in the native kernel (tests)."""
    return list(torch.ops.godist._native_bound()) if _state is True else []


def counts() -> dict:
    """What became of the native kernel's calls so far: ``done`` (completed
    in the kernel), ``finished`` (an error, or an op Go queued, handed to
    Python to raise or wait for), ``python`` (handed to the Python kernel)."""
    c = list(torch.ops.godist._native_counts()) if _state is True else [0, 0, 0]
    return dict(zip(("done", "finished", "python"), c))
