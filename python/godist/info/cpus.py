"""The CPUs this process may use: count, affinity and the cgroup's limit,
and what they mean for godist's waiting ranks."""

from __future__ import annotations

import math
import os


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _cgroup_cpus(proc: str = "/proc/self/cgroup", fs: str = "/sys/fs/cgroup") -> tuple[float | None, str | None]:
    """The CPU limit of this process's cgroup (v2 cpu.max or v1 CFS quota),
    the tightest along its path, and the file that set it."""
    best = (None, None)
    for line in (_read(proc) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or (parts[1] and "cpu" not in parts[1].split(",")):
            continue
        v2 = parts[1] == ""
        mounts = [fs, os.path.join(fs, "unified")] if v2 else [os.path.join(fs, parts[1]), os.path.join(fs, "cpu")]
        names = [p for p in parts[2].split("/") if p]
        for d in (os.path.join(m, *names[:i]) for m in mounts for i in range(len(names), -1, -1)):
            if v2:
                q, _, p = (_read(os.path.join(d, "cpu.max")) or "").strip().partition(" ")
                src = os.path.join(d, "cpu.max")
            else:
                q, p = ((_read(os.path.join(d, f)) or "").strip() for f in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
                src = os.path.join(d, "cpu.cfs_quota_us")
            if q.isdigit() and p.isdigit() and int(p) > 0 and (best[0] is None or int(q) / int(p) < best[0]):
                best = (int(q) / int(p), src)
    return best


def _cpus(build: dict | None) -> dict:
    count = os.cpu_count()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    limit, source = _cgroup_cpus()
    usable = min((x for x in (count, affinity, math.ceil(limit) if limit else None) if x), default=None)
    out = {"count": count, "affinity": affinity, "cgroup_limit": limit, "cgroup_file": source, "usable": usable,
           "go_num_cpu": build["num_cpu"] if build else None, "notes": []}
    go = out["go_num_cpu"] or affinity or count
    out["notes"].append(f"a group's ranks on this host spin briefly while waiting only while they number at most {go} "
                        f"(the CPUs godist counts); beyond that they share CPUs and yield or sleep instead")
    if limit is not None and limit < go:
        out["notes"].append(f"the cgroup allows {limit:g} CPUs, fewer than the {go} godist counts: its processes "
                            f"together get at most {limit:g} CPUs of time, spinning ranks included")
    return out
