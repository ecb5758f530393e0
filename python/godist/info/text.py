"""The report for people: :func:`render` of the dict that
:func:`godist.info.collect` returns."""

from __future__ import annotations


def _size(n) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


def _lib_lines(name: str, e: dict) -> list[str]:
    if e["found"]:
        head = f"{name:<13}found: {e['path']}" + (f", version {e['version']}" if e.get("version") else "")
        lines = [head, f"{'':13}from {e['where']}"] + ([f"{'':13}{e['reason']}"] if e["reason"] else [])
    else:
        lines = [f"{name:<13}{e['reason']}"] + [f"{'':13}tried {t['path']} ({t['where']})" for t in e["tried"]]
    if e.get("loaded_by_torch"):
        same = e["loaded_by_torch"] == e["path"]
        lines.append(f"{'':13}torch has loaded " + ("this file" if same else e["loaded_by_torch"]))
    if e.get("mpirun"):
        m = e["mpirun"]
        lines.append(f"{'':13}mpirun: {m['path']}: {m['version'] or m['error']}")
    return lines


# nvidia-smi topo -m's names for the topology levels, and what they mean.
_LEVELS = {"X": "the same board", "PIX": "through one PCIe switch", "PXB": "through several PCIe switches",
           "PHB": "through a PCIe host bridge", "NODE": "through the host bridges of one NUMA node",
           "SYS": "across NUMA nodes"}


def _nccl_path_lines(n: dict) -> list[str]:
    """The GPU section's lines about godist's NCCL path."""
    if n["available"]:
        head = (f"  NCCL path: NCCL {n['version']} from {n['nccl_from']}, CUDA runtime {n['cuda_runtime_version']} "
                f"from {n['cudart_from']}, {n['devices']} CUDA device{'' if n['devices'] == 1 else 's'}")
        out = [head] + ([f"    {n['devices_error']}"] if n.get("devices_error") else [])
    else:
        out = [f"  NCCL path: unavailable: {n['reason']}"]
    where = {"nccl": "through NCCL", "staged": "through pinned host memory over godist's CPU transports (staged)"}
    out.append(f"  CUDA tensors go {where[n['cuda_tensors']]}" if n["cuda_tensors"] else
               "  CUDA tensors: GODIST_CUDA is invalid (see Settings)")
    return out


def _gpuinfo_lines(gi: dict) -> list[str]:
    """The GPU section's lines from godist-gpuinfo's report."""
    if not gi["available"]:
        return [f"  godist-gpuinfo: {gi['reason']}"]
    ver = [f"NVML {gi['nvml_version']}"] if gi["nvml_version"] else []
    ver += [f"driver {gi['driver_version']}"] if gi["driver_version"] else []
    ver += [f"CUDA {gi['cuda_driver_version']}"] if gi["cuda_driver_version"] else []
    n = gi["device_count"]
    out = [f"  godist-gpuinfo: " + ", ".join(ver + [f"{n} GPU{'' if n == 1 else 's'}" if n is not None else
                                                    "GPUs unknown"])]
    out += [f"    error: {e}" for e in gi["errors"].values()]
    if gi["reason"]:
        out.append(f"    {gi['reason']}")
    for d in gi["devices"]:
        parts = [d["name"] or "name unknown"] + ([d["uuid"]] if d["uuid"] else [])
        if d["pci_bus_id"]:
            parts.append(f"PCI {d['pci_bus_id']}")
        if d["compute_capability"]:
            parts.append(f"compute capability {d['compute_capability']}")
        if d["memory_total"] is not None:
            parts.append(f"{_size(d['memory_total'])} ({_size(d['memory_used'])} used)")
        nv = d["nvlink"]
        parts.append(f"NVLink: {nv['active']} of {nv['count']} links active" if nv["supported"] else "no NVLink")
        out.append(f"    GPU {d['index']}: " + ", ".join(parts))
        out += [f"      error: {e}" for e in d["errors"].values()]
        out += [f"      NVLink {x['link']}: error: {x['error']}" for x in nv["links"] if x["error"]]
    for t in gi["topology"]:
        a, b = t["gpus"]
        where = f"{t['smi']} ({_LEVELS.get(t['smi'], t['level'])})" if t["smi"] else (t["level"] or "level unknown")
        p2p = ", ".join(f"{k} {v}" for k, v in t["p2p"].items())
        out.append(f"    GPU {a} - GPU {b}: {where}" + (f", P2P {p2p}" if p2p else ""))
        out += [f"      error: {e}" for e in t["errors"].values()]
    return out


def render(r: dict) -> str:
    """The report for people."""
    g, lib = r["godist"], r["godist"]["library"]
    out = [f"godist {g['version']} ({g['package']})"]
    if lib["loaded"]:
        b = lib["build"]
        rev = f", commit {b['vcs_revision'][:12]}{' (modified)' if b['vcs_modified'] else ''}" \
            if b["vcs_revision"] else ""
        out.append(f"  library      {lib['path']} (ABI {lib['abi_version']})")
        out.append(f"  built with   {b['go_version']} {b['goos']}/{b['goarch']}{rev}")
        why = f"GOMAXPROCS={b['gomaxprocs_env']}" if b["gomaxprocs_env"] else \
            f"{b['num_cpu']} CPUs + {b['spare_procs']}"
        out.append(f"  GOMAXPROCS   {b['gomaxprocs']} ({why})")
    else:
        out.append(f"  library      {lib['path']}: cannot load: {lib['error']}")
    p, t = r["platform"], r["torch"]
    out.append(f"Python {r['python']['version']} ({r['python']['implementation']}, {r['python']['executable']})")
    out.append(f"torch {t['version']}" + (f" (built for CUDA {t['cuda']})" if t["cuda"] else " (CPU build)"))
    out.append(f"platform {p['system']} {p['release']} {p['machine']}" + (f", {p['libc']}" if p["libc"] else "")
               + f", host {p['hostname']}")

    c = r["cpus"]
    out += ["", "CPUs", f"  count        {c['count']}", f"  affinity     {c['affinity']} CPUs this process may run on",
            "  cgroup limit " + (f"{c['cgroup_limit']:g} CPUs ({c['cgroup_file']})" if c["cgroup_limit"] else "none")]
    out += [f"  note         {n}" for n in c["notes"]]

    tr = r["transports"]
    out += ["", f"Transports (GODIST_TRANSPORT={tr['selected']})"]
    if tr["shm"] is None:
        out.append("  unknown: the library is not loaded")
    else:
        s, k = tr["shm"], tr["tcp"]
        space = f"{_size(s['free_bytes'])} free of {_size(s['total_bytes'])}"
        out.append(f"  shared mem   {'usable' if s['usable'] else 'unusable'}: {s['dir']}, {space}"
                   + ("" if s["usable"] else f": {s['reason']}"))
        out.append(f"               {s['note']}")
        where = "on " + ", ".join(k["listen"]) if k["listen"] else "on all interfaces"
        addrs = ", ".join(f"{a} ({i})" if i else a for a, i in zip(k["addresses"], k["interfaces"]))
        out.append(f"  TCP          " + (f"usable: listens {where}; addresses {addrs}"
                                         if k["usable"] else f"unusable: {k['reason']}"))
        if k["why"]:
            out.append(f"               chosen as: {k['why']}")
        out.append(f"               {k['note']}")

    out += ["", "Libraries on this host"]
    out += ["  " + x for x in _lib_lines("NCCL", r["nccl"]) + _lib_lines("CUDA runtime", r["cuda_runtime"])
            + _lib_lines("MPI", r["mpi"])]
    m = r["mpi"]
    out.append("  godist's MPI shims: " + (", ".join(m["shims"]) if m["shims"] else
                                          "none built (no mpicc when the library was built)"))
    out.append("  NCCL and the CUDA runtime: used for CUDA tensors (see GPUs); MPI: under mpirun (mpi://, "
               "GODIST_TRANSPORT=mpi)")

    gp = r["gpus"]
    out += ["", "GPUs"]
    if not gp["driver"]:
        out.append(f"  {gp['reason']}")
    else:
        out.append(f"  NVIDIA driver {gp['driver_version'] or 'unknown'}"
                   + (f" (CUDA {gp['cuda_driver_version']})" if gp["cuda_driver_version"] else "")
                   + f", {gp['nvml_path']}")
        if gp["reason"]:
            out.append(f"  {gp['reason']}")
        for d in gp["devices"]:
            out.append(f"  GPU {d['index']}: " + (f"error: {d['error']}" if d["error"] else
                                                  f"{d['name']}, {_size(d['memory_total'])} "
                                                  f"({_size(d['memory_free'])} free)"))
        if not gp["devices"] and not gp["reason"]:
            out.append("  no GPUs")
    out += _gpuinfo_lines(gp["gpuinfo"])
    out += _nccl_path_lines(gp["nccl_path"])

    env = r["env"]
    out += ["", "Settings"]
    for s in env["settings"]:
        default = f", default {s['default']}" if s["default"] else ""
        val = f"={s['value']}" if s["set"] else f" (not set{default})"
        out.append(f"  {s['name']}{val}: {s['effect']}" + (f" [{s['problem']}]" if s["problem"] else ""))
    out.append(f"  GOMAXPROCS" + (f"={env['gomaxprocs']}" if env["gomaxprocs"] else " (not set): NumCPU + 4"))
    if r["warnings"]:
        out += [""] + [f"warning: {w}" for w in r["warnings"]]
    return "\n".join(out) + "\n"
