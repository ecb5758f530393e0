"""godist's own library as this host loads it: its build, its NCCL path,
and the transports (shared memory, TCP) a group created here could use,
from the library's own probes (capi/info.go)."""

from __future__ import annotations

import json
import os


def _json_call(fn, *args) -> dict:
    """The JSON object a function of capi/info.go writes; its empty strings
    become None."""
    from .. import _lib

    return {k: None if v == "" else v for k, v in json.loads(_lib.read_bytes(fn, *args)).items()}


def _library() -> tuple[dict, object]:
    from .. import _lib

    out = {"path": _lib.library_path(), "loaded": False, "error": None, "abi_version": None,
           "abi_expected": _lib.ABI_VERSION, "build": None}
    try:
        try:
            lib = _lib.load()
        except ValueError:
            # The library loaded and logging is set up at WARNING, but
            # GODIST_LOG_LEVEL is invalid (the settings section reports it).
            lib = _lib.load()
        out["build"] = _json_call(lib.build_info)
    except (ImportError, OSError, AttributeError) as e:
        out["error"] = f"{type(e).__name__}: {e}" if isinstance(e, AttributeError) else str(e)
        if isinstance(e, AttributeError):
            out["error"] += " (the library is older than this package: rebuild it with `make lib`)"
        return out, None
    out.update(loaded=True, abi_version=lib.abi_version())
    return out, lib


def _nccl_path(lib) -> dict:
    """What godist's NCCL path loads here and where CUDA tensors go
    (godist._nccl.nccl_info, plus ``cuda_tensors``)."""
    from .._group import cuda_mode

    if lib is None:
        info = {"available": False, "reason": "the godist library cannot be loaded", "devices": 0}
    else:
        try:
            info = _json_call(lib.nccl_info)
        except Exception as e:  # noqa: BLE001 - reported, never raised
            info = {"available": False, "reason": f"godist_nccl_info failed: {e}", "devices": 0}
    try:
        mode = cuda_mode()
    except ValueError:
        mode = None
    usable = info.get("available") and info.get("devices", 0) > 0
    info["cuda_tensors"] = {"auto": "nccl" if usable else "staged", "nccl": "nccl", "staged": "staged"}.get(mode)
    return info


def _transport_setting() -> str:
    return os.environ.get("GODIST_TRANSPORT", "auto").strip().lower() or "auto"


def _shm_space(d: str) -> dict:
    try:
        st = os.statvfs(d)
        return {"free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}
    except OSError:
        return {"free_bytes": None, "total_bytes": None}


def shm_report(lib, directory: str | None = None) -> dict:
    """Whether a group created here could use shared memory in directory
    (None: the default, /dev/shm), with the shared-memory backend's own
    probe, and the directory's space."""
    p = _json_call(lib.probe_shm, directory.encode() if directory else None)
    tr = _transport_setting()
    p.update(_shm_space(p["dir"]), enabled=tr == "auto")
    p["note"] = (f"GODIST_TRANSPORT={tr}: groups do not use shared memory" if tr in ("tcp", "mpi") else
                 "used when every rank of a group is on this host and sees the same directory")
    return p


def _transports(lib) -> dict:
    bind = os.environ.get("GODIST_BIND_ADDR", "")
    ifname = os.environ.get("GODIST_SOCKET_IFNAME", "")
    master = os.environ.get("MASTER_ADDR", "")
    if lib is None:
        return {"selected": _transport_setting(), "shm": None, "tcp": None}
    tcp = _json_call(lib.probe_tcp, bind.encode() or None, ifname.encode() or None, master.encode() or None)
    if not tcp["usable"]:
        tcp["note"] = "groups cannot be created until this is fixed"
    elif tcp["listen"] is None:
        tcp["note"] = "ranks on one host connect over loopback; ranks on other hosts dial the addresses above"
    elif tcp["choice"] == "loopback":
        tcp["note"] = ("every rank of a group whose store is on this host's loopback runs here and connects over "
                       "loopback; no other host can reach these ports")
    else:
        tcp["note"] = ("every rank, on this host or another, dials the addresses above" +
                       ("" if master or bind or ifname else
                        "; a group's store on another host (MASTER_ADDR) would choose the interface of the route "
                        "to it"))
    return {"selected": _transport_setting(), "shm": shm_report(lib), "tcp": tcp}
