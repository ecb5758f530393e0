"""The machine header printed before a benchmark run (and written into the
markdown report): CPU model, cores, kernel, Python / torch / Go versions,
godist's commit, the load average and how fast the machine runs Python."""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import time


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nproc() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def loadavg() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def python_loop_ms(steps: int = 200_000, samples: int = 5) -> float:
    """The median time of a plain Python loop, in ms. A small op's latency is
    mostly the ranks' Python side, and some virtual machines run Python at
    different speeds from one minute to the next: this number, taken around
    each world size, tells which speed a run saw."""
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        s = 0
        for i in range(steps):
            s += i
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def _uvarint(data: bytes, i: int) -> tuple[int, int]:
    x = shift = 0
    while True:
        b = data[i]
        i += 1
        x |= (b & 0x7F) << shift
        if b < 0x80:
            return x, i
        shift += 7


def go_version_of(path: str) -> str | None:
    """The Go toolchain that built a Go binary, read from its build info
    (the ``\\xff Go buildinf:`` header, Go 1.18+ inline format)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    i = data.find(b"\xff Go buildinf:")
    if i < 0 or len(data) < i + 33:
        return None
    flags = data[i + 15]
    if not flags & 2:  # pre-1.18 pointer format: not worth decoding here
        return None
    n, j = _uvarint(data, i + 32)
    return data[j:j + n].decode("ascii", "replace")


def go_version() -> str:
    try:
        from godist import _lib

        v = go_version_of(_lib.library_path())
        if v:
            return v + " (libgodist.so)"
    except Exception:
        pass
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go:
        try:
            out = subprocess.run([go, "version"], capture_output=True, text=True, timeout=10).stdout.strip()
            return out.replace("go version ", "") + " (toolchain on PATH)"
        except Exception:
            pass
    return "unknown"


def library_hash() -> str:
    """sha256 (12 hex digits) of the libgodist.so the ranks will load."""
    import hashlib

    try:
        from godist import _lib

        with open(_lib.library_path(), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:12]
    except Exception:
        return "unknown"


def git_commit() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def info() -> dict:
    import torch

    import godist

    return {
        "cpu": cpu_model(),
        "nproc": nproc(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "go": go_version(),
        "godist": f"{godist.__version__} (git {git_commit()}, libgodist.so sha256 {library_hash()})",
        "loadavg": "%.2f %.2f %.2f" % loadavg(),
        "memory": _mem_total(),
    }


def _mem_total() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return "%.1f GiB" % (int(line.split()[1]) / 2**20)
    except OSError:
        pass
    return "unknown"


def header_lines(m: dict) -> list[str]:
    return [
        f"CPU:     {m['cpu']} x {m['nproc']} (nproc), {m['memory']}",
        f"kernel:  {m['kernel']}",
        f"python:  {m['python']}   torch: {m['torch']}   go: {m['go']}",
        f"godist:  {m['godist']}",
        f"loadavg: {m['loadavg']} (at start)",
    ]
