"""``godist info``: what godist sees on this host, for bug reports and setup.

:func:`collect` gathers the report as a dict (the ``--json`` output, keys
documented in docs/info.md) and :func:`render` (``text.py``) writes it for
people. Each part of the report comes from a module of its own:

- ``library.py``: godist's library, its NCCL path and the transports a
  group created here could use;
- ``native.py``: NCCL, the CUDA runtime, MPI and the NVIDIA driver as this
  host's loader finds them, each probed in a child process so that a
  library that crashes or hangs when loaded cannot take the report down;
- ``gpus.py``: the GPUs' details (UUIDs, PCI bus ids, compute capabilities,
  NVLink, topology) from the package's ``bin/godist-gpuinfo`` program
  (:func:`gpu_info`);
- ``settings.py``: every ``GODIST_*`` setting and what its value does here;
- ``cpus.py``: the CPUs this process may use.
"""

from __future__ import annotations

import json
import os
import platform
import sys

from .cpus import _cgroup_cpus, _cpus  # noqa: F401 (_cgroup_cpus: for tests)
from .gpus import GPUINFO_TIMEOUT_S, gpu_info, gpuinfo_path
from .library import _library, _nccl_path, _transports, shm_report
from .native import NATIVE_TIMEOUT_S, _libraries, probe_native
from .settings import BUILD_SETTINGS, SETTINGS, TEST_SETTINGS, _settings
from .text import _gpuinfo_lines, render  # noqa: F401 (_gpuinfo_lines: for tests)

__all__ = ["collect", "main", "render", "gpu_info", "gpuinfo_path", "shm_report", "probe_native", "SCHEMA",
           "SETTINGS", "TEST_SETTINGS", "BUILD_SETTINGS", "GPUINFO_TIMEOUT_S", "NATIVE_TIMEOUT_S"]

SCHEMA = 1


def collect() -> dict:
    """The whole report (``godist info --json``)."""
    import torch

    from .. import __version__

    library, lib = _library()
    build = library["build"]
    libs, gpus = _libraries()
    gpus["gpuinfo"] = gpu_info()
    gpus["nccl_path"] = _nccl_path(lib)
    settings = _settings()
    report = {
        "schema": SCHEMA,
        "godist": {"version": __version__, "package": os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "library": library},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "torch": {"version": torch.__version__, "cuda": torch.version.cuda, "path": os.path.dirname(torch.__file__)},
        "platform": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                     "libc": " ".join(platform.libc_ver()).strip() or None, "hostname": platform.node()},
        "cpus": _cpus(build),
        "transports": _transports(lib),
        **libs,
        "gpus": gpus,
        "env": settings,
        "warnings": [],
    }
    w = report["warnings"]
    if not library["loaded"]:
        w.append(f"the godist library cannot be loaded: {library['error']}")
    for s in settings["settings"]:
        if s["problem"]:
            w.append(f"{s['name']}={s['value']!r}: {s['problem']}")
    for u in settings["unknown"]:
        hint = f" (did you mean {u['did_you_mean']}?)" if u["did_you_mean"] else ""
        w.append(f"{u['name']}={u['value']!r}: unknown setting, ignored{hint}")
    t = report["transports"]
    if t["shm"] and t["shm"]["enabled"] and not t["shm"]["usable"]:
        w.append(f"shared memory is unusable, groups on this host will use TCP: {t['shm']['reason']}")
    if t["tcp"] and not t["tcp"]["usable"]:
        w.append(f"TCP cannot listen, no group can be created: {t['tcp']['reason']}")
    return report


def main(argv: list[str], prog: str = "godist info") -> int:
    """``godist info [--json]``: 0, or 1 when the godist library cannot be loaded."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description="What godist sees on this host: its library, the "
                                 "transports this host can use, NCCL, CUDA, MPI, GPUs, settings and CPUs.")
    ap.add_argument("--json", action="store_true", help="print the report as JSON (keys: see docs/info.md)")
    args = ap.parse_args(argv)
    r = collect()
    sys.stdout.write(json.dumps(r, indent=2) + "\n" if args.json else render(r))
    return 0 if r["godist"]["library"]["loaded"] else 1
