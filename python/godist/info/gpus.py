"""The GPUs' details (UUIDs, PCI bus ids, compute capabilities, NVLink, the
topology between GPUs), from the package's ``bin/godist-gpuinfo`` program."""

from __future__ import annotations

import json
import os
import subprocess

GPUINFO_TIMEOUT_S = 10


def gpuinfo_path() -> str:
    """Where the package's godist-gpuinfo program is (it may be missing)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", "godist-gpuinfo")


def gpu_info(timeout: float = GPUINFO_TIMEOUT_S, executable: str | None = None) -> dict:
    """This machine's NVIDIA GPUs as godist-gpuinfo reports them (keys:
    ``gpus.gpuinfo`` in docs/info.md), plus ``executable``, its path. Never
    raises: when the program is missing, fails or hangs, or there is no
    driver, ``available`` is False and ``reason`` says why."""
    exe = executable or gpuinfo_path()
    out = {"available": False, "reason": None, "library": "libnvidia-ml.so.1", "driver_version": None,
           "cuda_driver_version": None, "nvml_version": None, "device_count": None, "devices": [], "topology": [],
           "errors": {}, "executable": exe}
    if not os.path.exists(exe):
        return dict(out, reason=f"godist-gpuinfo is not in the package ({exe}): rebuild it with `make lib` or "
                                "reinstall godist")
    try:
        p = subprocess.run([exe], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return dict(out, reason=f"godist-gpuinfo did not finish within {timeout:g} s")
    except OSError as e:
        return dict(out, reason=f"cannot run godist-gpuinfo: {e}")
    try:
        answer = json.loads(p.stdout) if p.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "available" not in answer:
        how = f"was killed by signal {-p.returncode}" if p.returncode < 0 else f"exited with {p.returncode}"
        if p.returncode == 0:
            how = "printed no JSON report"
        tail = p.stderr.strip().splitlines()[-1:]
        return dict(out, reason=f"godist-gpuinfo {how}" + (f": {tail[0]}" if tail else ""))
    return dict(out, **answer, executable=exe)
