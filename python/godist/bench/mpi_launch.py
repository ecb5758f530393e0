"""The MPI launcher around a rank of ``python -m godist.bench --mpi``
(``mpi.py``, ``mpi_worker.py``): which MPI started it, with which rank and
size, and the default group made from it.

Test hook (godist's tests only): where ``mpi://`` has no rendezvous handler
(a godist without its MPI path) and GODIST_BENCH_MPI_FILESTORE names a file
path, the default group is made from the launcher's variables
(OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE) with a FileStore there.
"""

from __future__ import annotations

import os
import re
import subprocess

FILESTORE_HOOK = "GODIST_BENCH_MPI_FILESTORE"


def launcher() -> tuple[str, int, int, int] | None:
    """(MPI implementation, rank, size, ranks on this host) from the
    launcher's environment; None outside an MPI launcher."""
    env = os.environ
    if "OMPI_COMM_WORLD_SIZE" in env:
        size = int(env["OMPI_COMM_WORLD_SIZE"])
        return ("Open MPI", int(env.get("OMPI_COMM_WORLD_RANK", 0)), size,
                int(env.get("OMPI_COMM_WORLD_LOCAL_SIZE", size)))
    if "PMI_SIZE" in env:
        size = int(env["PMI_SIZE"])
        return "MPICH", int(env.get("PMI_RANK", 0)), size, int(env.get("MPI_LOCALNRANKS", size))
    return None


def mpi_description(impl: str) -> str:
    """The MPI implementation and version: godist.mpi_info() where godist has
    it, else the launcher's ``--version``."""
    try:
        import godist

        info = getattr(godist, "mpi_info", None)
        if info is not None:
            v = info()
            if isinstance(v, dict):
                # "Open MPI v4.1.4, ...; godist's shim libgodist_mpi_openmpi.so; MPI_THREAD_MULTIPLE"
                # (the shim by its file name, not where this machine keeps it)
                parts = [v.get("version") or v.get("impl", "MPI"),
                         f"godist's shim {os.path.basename(v['shim'])}" if v.get("shim") else "",
                         v.get("provided_name") or "",
                         "initialised by godist" if v.get("initialized_by_godist") else ""]
                return "; ".join(p for p in parts if p)
            return str(v)
    except Exception:  # noqa: BLE001 - fall back to the launcher
        pass
    cmds = {"Open MPI": ("mpirun.openmpi", "ompi_info", "mpirun"), "MPICH": ("mpirun.mpich", "mpichversion", "mpirun")}
    for exe in cmds.get(impl, ("mpirun",)):
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        m = re.search(r"Version:\s*(\S+)", out) or re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", out)
        if m:
            return f"{impl} {m.group(1)} (from {exe} --version)"
    return f"{impl} (version unknown)"


class NoMpiRendezvous(RuntimeError):
    """``init_method="mpi://"`` has no rendezvous handler in this godist."""


def _mpi_registered() -> bool:
    import importlib

    import godist  # noqa: F401  (registers mpi:// where godist has its MPI path)

    # The module, not torch.distributed's function of the same name.
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    return "mpi" in getattr(rdzv, "_rendezvous_handlers", {})


def init_default(timeout):
    """The default group on godist, from MPI; the test hook's FileStore where
    mpi:// is not there. Returns how it was made."""
    import torch.distributed as dist

    import godist  # noqa: F401  (registers the backend and, with the MPI path, mpi://)

    if _mpi_registered():
        dist.init_process_group("godist", init_method="mpi://", timeout=timeout)
        return "init_method mpi://"
    path = os.environ.get(FILESTORE_HOOK)
    if not path:
        raise NoMpiRendezvous(
            "init_method='mpi://' is not registered: this godist has no MPI rendezvous (godist/_mpi.py, registered "
            "by `import godist`); --mpi needs a godist built with its MPI path")
    _, rank, size, _ = launcher()
    dist.init_process_group("godist", init_method=f"file://{path}", rank=rank, world_size=size, timeout=timeout)
    return f"test hook {FILESTORE_HOOK} (FileStore; mpi:// not registered)"
