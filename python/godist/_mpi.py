"""Starting godist under an MPI launcher (mpirun of Open MPI or MPICH).

``import godist`` registers the rendezvous scheme ``mpi://``::

    dist.init_process_group("godist", init_method="mpi://")

The handler initialises MPI through godist's shim for the launcher's
implementation (godist_mpi_open), takes the rank and world size from
MPI_COMM_WORLD, starts a TCP store on rank 0 and broadcasts its
``host:port`` over MPI; the other ranks connect to it. The store's address
is ``GODIST_MPI_STORE_ADDR`` if set, else ``MASTER_ADDR``, else 127.0.0.1
when the launcher says every rank is on this host, else this host's name
resolved.

Under an MPI launcher ``import godist`` also sets ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE`` from the launcher's variables (when not set already),
as torchrun would, and makes the error of torch's default ``env://``
rendezvous (no RANK or MASTER_ADDR) say to pass ``init_method="mpi://"``.

MPI is initialised once per process and finalised at exit, after godist's
groups are closed, only if godist initialised it.
"""

from __future__ import annotations

import ctypes
import datetime
import importlib
import json
import os
import socket
import threading
from urllib.parse import parse_qs, urlparse

from . import _lib, _log

SCHEME = "mpi"
BCAST_BYTES = 256  # the fixed buffer rank 0 broadcasts "host:port" in
_ERROR_MARK = "!"  # a broadcast that starts with it carries rank 0's error instead

# The launcher's variables: (rank, size, local rank, local size), Open MPI first.
_OMPI = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
_HYDRA = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")  # MPICH's Hydra (PMI_ID in -pmi-port mode)

_lock = threading.Lock()
_info: dict | None = None
_finalized = False

_default_timeout = datetime.timedelta(minutes=30)


def shim_dir() -> str:
    """Where godist's MPI shims are (libgodist_mpi_<impl>.so)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi")


def launcher(env=None) -> str | None:
    """The MPI launcher that started this process by its variables:
    "openmpi", "mpich" (Hydra or another PMI launcher) or None."""
    env = os.environ if env is None else env
    if "OMPI_COMM_WORLD_SIZE" in env:
        return "openmpi"
    if any(k in env for k in ("PMI_SIZE", "PMI_RANK", "PMI_ID", "MPI_LOCALNRANKS")):
        return "mpich"
    return None


def set_local_env(env=None) -> None:
    """LOCAL_RANK and LOCAL_WORLD_SIZE from the launcher's variables, where
    they are not set already (scripts pick their device from them as under
    torchrun)."""
    env = os.environ if env is None else env
    for names in (_OMPI, _HYDRA):
        local_rank, local_size = env.get(names[2]), env.get(names[3])
        if local_rank is not None and local_size is not None:
            env.setdefault("LOCAL_RANK", local_rank)
            env.setdefault("LOCAL_WORLD_SIZE", local_size)
            return


def _local_size(env=None) -> int | None:
    env = os.environ if env is None else env
    for names in (_OMPI, _HYDRA):
        v = env.get(names[3])
        if v is not None:
            try:
                return int(v)
            except ValueError:
                return None
    return None


def open_mpi() -> dict:
    """Initialise MPI once (godist_mpi_open) and return what it reports."""
    global _info
    with _lock:
        if _info is not None:
            return _info
        if _finalized:
            raise RuntimeError("godist: MPI was finalised in this process (godist.mpi_finalize); MPI cannot be "
                               "initialised again")
        lib = _lib.load()
        if not hasattr(lib.raw, "mpi_open"):
            raise RuntimeError(f"godist: {_lib.library_path()} has no MPI support (no godist_mpi_open); rebuild it "
                               "with `make lib`")
        if launcher() == "mpich":
            # MPICH's UCX layer warns at exit about messages a closing group
            # sent to peers that had closed already (godist's farewells).
            os.environ.setdefault("UCX_LOG_LEVEL", "error")
        raw = _lib.read_bytes(lib.mpi_open, shim_dir().encode(), size=4096)
        _info = json.loads(raw)
        _log.logger.debug("godist: MPI opened: %s", _info)
        return _info


def mpi_info() -> dict | None:
    """What godist's MPI initialisation reported (implementation, shim, the
    MPI library loaded before it, library version, thread level, whether godist initialised MPI, rank,
    size, tag upper bound, processor name), or None before
    ``init_process_group(init_method="mpi://")`` opened MPI."""
    with _lock:
        return None if _info is None else dict(_info)


def mpi_finalize() -> None:
    """Finalise MPI if godist initialised it (the Go side leaves MPI that
    someone else initialised alone). Call it after every godist group is
    destroyed; idempotent. MPI cannot be initialised again afterwards. Runs
    by itself at exit."""
    global _finalized
    with _lock:
        if _info is None or _finalized:
            return
        _finalized = True
        _lib.load().mpi_finalize()


def _at_exit() -> None:
    """Registered by ``import godist`` before godist's groups are closed at
    exit, so it runs after them (atexit runs last-registered first)."""
    if _info is None or _finalized or not _info.get("initialized_by_godist"):
        return
    try:
        mpi_finalize()
    except Exception as e:  # noqa: BLE001 - at exit: report, do not raise
        _warn(f"godist: MPI_Finalize at exit failed: {e}")


def _warn(msg: str) -> None:
    import warnings

    warnings.warn(msg, RuntimeWarning, stacklevel=2)


def store_addr(size: int, env=None) -> str:
    """The address rank 0's store is reached at (see the module's doc)."""
    env = os.environ if env is None else env
    for var in ("GODIST_MPI_STORE_ADDR", "MASTER_ADDR"):
        v = env.get(var, "").strip()
        if v:
            return v
    if size == 1 or _local_size(env) == size:
        return "127.0.0.1"  # every rank on this host
    host = socket.gethostname()
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def _bcast(lib, payload: bytes | None, rank: int) -> str:
    buf = ctypes.create_string_buffer(BCAST_BYTES)
    if rank == 0:
        assert payload is not None
        payload = payload[:BCAST_BYTES - 1]
        ctypes.memmove(buf, payload, len(payload))
    lib.mpi_bcast(ctypes.addressof(buf), BCAST_BYTES, 0)
    return buf.value.decode("utf-8", "replace")


def _query_int(query: dict, name: str) -> int | None:
    v = query.get(name)
    if not v:
        return None
    n = int(v[-1])
    return None if n < 0 else n


def _rendezvous_handler(url: str, timeout: datetime.timedelta = _default_timeout, **kwargs):
    """torch's rendezvous protocol: yields (store, rank, world_size) once."""
    from .store import TCPStore

    query = parse_qs(urlparse(url).query)
    want_rank, want_size = _query_int(query, "rank"), _query_int(query, "world_size")
    info = open_mpi()
    rank, size = int(info["rank"]), int(info["size"])
    if want_rank is not None and want_rank != rank:
        raise ValueError(f"godist: mpi:// rendezvous: rank={want_rank} was passed, but MPI says this process is rank "
                         f"{rank}; pass rank=-1 (or leave it out) to take MPI's")
    if want_size is not None and want_size != size:
        raise ValueError(f"godist: mpi:// rendezvous: world_size={want_size} was passed, but MPI_COMM_WORLD has "
                         f"{size} ranks; pass world_size=-1 (or leave it out) to take MPI's")
    set_local_env()
    lib = _lib.load()
    store = None
    if rank == 0:
        host = store_addr(size)
        try:
            store = TCPStore(host, 0, world_size=size, is_master=True, timeout=timeout, wait_for_workers=False)
            payload = f"{host}:{store.port}"
        except Exception as e:  # tell the other ranks instead of leaving them in MPI_Bcast
            _bcast(lib, f"{_ERROR_MARK}rank 0 could not start the store on {host}: {e}".encode(), 0)
            raise
        got = _bcast(lib, payload.encode(), 0)
    else:
        got = _bcast(lib, None, rank)
        if got.startswith(_ERROR_MARK):
            raise RuntimeError(f"godist: mpi:// rendezvous: {got[1:]}")
        host, _, port = got.rpartition(":")
        try:
            store = TCPStore(host, int(port), world_size=size, is_master=False, timeout=timeout)
        except Exception as e:
            raise RuntimeError(f"godist: mpi:// rendezvous: rank {rank} could not reach rank 0's store at {got} "
                               f"({e}); if that address is wrong for this host, set GODIST_MPI_STORE_ADDR (or "
                               "MASTER_ADDR) to one every rank can reach") from e
    _log.logger.debug("godist: mpi:// rendezvous: rank %d of %d, store at %s", rank, size, got)
    yield store, rank, size
    raise RuntimeError("Unable to perform re-rendezvous using mpi:// method")


def _env_hint(env=None) -> str | None:
    """The advice appended to env://'s error under an MPI launcher."""
    env = os.environ if env is None else env
    which = launcher(env)
    if which is None or (env.get("RANK") and env.get("MASTER_ADDR")):
        return None
    var = "OMPI_COMM_WORLD_SIZE" if which == "openmpi" else next(
        k for k in ("PMI_SIZE", "PMI_RANK", "PMI_ID", "MPI_LOCALNRANKS") if k in env)
    return (f" -- godist: this process was started by an MPI launcher ({var}={env[var]}) without RANK/MASTER_ADDR, "
            "so torch's default env:// rendezvous cannot work: pass init_method=\"mpi://\" to "
            "init_process_group (import godist registers it) to take the rank and world size from MPI")


def _wrap_env(handler):
    def env_handler(url, *args, **kwargs):
        it = handler(url, *args, **kwargs)
        try:
            first = next(it)
        except ValueError as e:
            hint = _env_hint()
            if hint is None:
                raise
            raise ValueError(f"{e}{hint}") from e
        yield first
        yield from it

    env_handler._godist_mpi_hint = True  # type: ignore[attr-defined]
    env_handler.__wrapped__ = handler  # type: ignore[attr-defined]
    return env_handler


def register() -> None:
    """Register mpi:// with torch, and under an MPI launcher wrap env:// so
    that its error names mpi:// and set LOCAL_RANK/LOCAL_WORLD_SIZE.
    Idempotent."""
    try:
        rdzv = importlib.import_module("torch.distributed.rendezvous")
    except ImportError:
        return
    handlers = getattr(rdzv, "_rendezvous_handlers", None)
    if handlers is None or SCHEME not in handlers:
        try:
            rdzv.register_rendezvous_handler(SCHEME, _rendezvous_handler)
        except RuntimeError:  # registered meanwhile
            pass
    if launcher() is None:
        return
    set_local_env()
    if handlers is not None:
        env = handlers.get("env")
        if env is not None and not getattr(env, "_godist_mpi_hint", False):
            handlers["env"] = _wrap_env(env)
