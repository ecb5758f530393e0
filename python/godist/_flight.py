"""The flight recorder of godist's groups, in torch's format.

Every godist group records its last operations in Go (libgodist/flight.go:
what was issued, when it started and finished, how it failed), 2000 by
default as torch's recorder keeps, at no cost a small op can measure. This
module writes those records as torch's flight recorder dump (a pickled dict,
version 2.10), which ``torchfrtrace`` (``python -m
torch.distributed.flight_recorder.fr_trace``) reads to name the rank and the
op at fault: on demand (``godist.dump_fr_trace``) and, when a collective
fails, into ``<TORCH_FR_DUMP_TEMP_FILE><rank>`` if that is set.

When the environment asks for torch's own recorder (``TORCH_FR_BUFFER_SIZE``
or ``TORCH_NCCL_TRACE_BUFFER_SIZE`` above 0) on torch 2.14+, each op takes
torch's route instead (process_group.py), torch records it with the Python
stack, and a failure writes torch's trace. A size of 0 turns both off.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import threading

import torch
import torch.distributed as dist

from . import _lib, _log, _types

DEFAULT_ENTRIES = 2000  # libgodist.DefaultFlightEntries
VERSION = "2.10"  # the dump format torch 2.15 writes

_SIZE_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
_FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
_ON_FAILURE_VARS = ("TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT")

# torch's op names (the analyzer's), by godist's
_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall": "all_to_all",
        "monitored_barrier": "barrier"}
# c10::ScalarType names, by godist's dtype codes
_DTYPE_NAMES = {code: {
    torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float", torch.float64: "Double",
    torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble", torch.int8: "Char", torch.uint8: "Byte",
    torch.int16: "Short", torch.int32: "Int", torch.int64: "Long", torch.bool: "Bool"}[dt]
    for dt, code in _types.DTYPE_CODES.items()}


def _first(names) -> str:
    for var in names:
        v = os.environ.get(var, "").strip()
        if v:
            return v
    return ""


def entries_asked() -> int | None:
    """The recorder size the environment asks for, None if it does not say
    (an unreadable value reads as 0, as torch's does not start)."""
    v = _first(_SIZE_VARS)
    if not v:
        return None
    try:
        return max(int(v), 0)
    except ValueError:
        return 0


def requested() -> bool:
    """Whether the environment asks for torch's flight recorder
    (TORCH_FR_BUFFER_SIZE, else TORCH_NCCL_TRACE_BUFFER_SIZE, above 0)."""
    return (entries_asked() or 0) > 0


def _torch_records() -> bool:
    from .process_group import _HAS_BACKEND

    return _HAS_BACKEND and requested()


def tell_torch() -> None:
    """Tell torch (2.15+) whether godist records its own ops, so that it
    attaches its recorder's hook to godist groups only when its recorder
    is to record them: the hook captures each op's Python stack, about
    20 us per op on torch's route (user hooks)."""
    own = getattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if isinstance(own, set):
        if _torch_records():
            own.discard("godist")
        else:
            own.add("godist")


def configure(g) -> None:
    """Size the recorder of a new group: off while torch records its ops or
    when the environment asks for 0 entries, else as asked (default 2000)."""
    n = entries_asked()
    if _torch_records():
        n = 0
    if n is not None and n != DEFAULT_ENTRIES:
        _lib.load().pg_set_flight(g._h, n)


def _records(g) -> list[dict]:
    return json.loads(_lib.read_bytes(_lib.load().pg_flight, g._h, size=1 << 16))


def _torch_groups() -> dict:
    """torch's view of its groups by name: (description, global ranks)."""
    out = {}
    if not dist.is_initialized():
        return out
    world = dist.distributed_c10d._world
    for pg, name in list(world.pg_names.items()):
        try:
            desc = pg.group_desc
        except Exception:  # noqa: BLE001 - a group torch half-tore down
            desc = "undefined"
        ranks = world.pg_group_ranks.get(pg)
        out[name] = (desc, sorted(ranks, key=ranks.get) if ranks else None)
    return out


def _entry(r: dict, name: str, pg_id: int, desc: str, rank: int) -> dict:
    op = _OPS.get(r["op"], r["op"])
    p2p = op in ("send", "recv")
    profiling = f"godist:{op}"
    if op == "send":
        profiling += f" {rank}->{r['peer']}"
    elif op == "recv":
        profiling += f" {rank}<-{'?' if r['peer'] < 0 else r['peer']}"
    dtype = [_DTYPE_NAMES.get(r["dtype"], "Byte")]
    # what a rank has none of (a barrier's tensors, the root's list of a
    # gather or scatter elsewhere) is an empty list, as torch records it
    has_in = op != "barrier" and not (op == "scatter" and r["in"] == 0)
    has_out = op != "barrier" and not (op == "gather" and r["out"] == 0)
    ins, in_dtypes = ([[r["in"]]], dtype) if has_in else ([], [])
    outs, out_dtypes = ([[r["out"]]], dtype) if has_out else ([], [])
    started, completed = r["started"] or None, r["completed"] or None
    state = "completed" if completed else "started" if started else "scheduled"
    return {
        "record_id": r["id"], "pg_id": pg_id, "process_group": (name, desc),
        "collective_seq_id": r["seq"], "p2p_seq_id": r["p2p_seq"], "op_id": r["seq"] or r["p2p_seq"],
        "profiling_name": profiling, "time_created_ns": r["created"],
        "duration_ms": (completed - started) / 1e6 if completed and started else None,
        "timeout_ms": r["timeout_ms"], "is_p2p": p2p,
        "input_sizes": ins, "input_dtypes": in_dtypes, "output_sizes": outs, "output_dtypes": list(out_dtypes),
        "state": state, "time_discovered_started_ns": started, "time_discovered_completed_ns": completed,
        "retired": completed is not None, "frames": [], "thread_id": "", "thread_name": "",
        **({"error": r["error"]} if r.get("error") else {}),
    }


def _add(out: dict, name: str, desc: str, ranks: list, rank: int, records: list, only_active: bool) -> None:
    """Add one process group's entries and status to the dump out."""
    pg_id = len(out["pg_status"])
    out["pg_config"][name] = {"name": name, "desc": desc, "ranks": str(ranks)}
    seqs = {"last_enqueued_collective": -1, "last_started_collective": -1, "last_completed_collective": -1}
    for r in records:
        e = _entry(r, name, pg_id, desc, rank)
        if not e["is_p2p"]:
            seq = e["collective_seq_id"]
            seqs["last_enqueued_collective"] = max(seqs["last_enqueued_collective"], seq)
            if e["time_discovered_started_ns"]:
                seqs["last_started_collective"] = max(seqs["last_started_collective"], seq)
            if e["retired"]:
                seqs["last_completed_collective"] = max(seqs["last_completed_collective"], seq)
        if not (only_active and e["retired"]):
            out["entries"].append(e)
    out["pg_status"][str(pg_id)] = seqs


def trace(groups=None, only_active: bool = False) -> dict:
    """The flight recorder dump of ``groups`` (default: every live godist
    group of this process) as torch writes it: a dict with ``version``,
    ``pg_config``, ``pg_status`` and ``entries``. A group's ops on CUDA
    tensors, numbered apart from its ops on CPU tensors, appear as a group
    of their own, named ``<group>:cuda``."""
    from ._group import _live, _live_lock
    from ._version import __version__

    if groups is None:
        with _live_lock:
            groups = sorted(_live, key=lambda g: g._h)
    known = _torch_groups()
    out = {"version": VERSION, "comm_lib_version": f"godist {__version__}", "pg_config": {}, "pg_status": {},
           "entries": []}
    for g in groups:
        if g._closed:
            continue
        desc, ranks = known.get(g._name, ("undefined", None))
        if ranks is None:
            ranks = list(range(g._size))
        records = _records(g)
        host = [r for r in records if not r.get("device")]
        device = [r for r in records if r.get("device")]
        _add(out, g._name, desc, ranks, g._rank, host, only_active)
        if device:
            _add(out, f"{g._name}:cuda", f"{desc}:cuda", ranks, g._rank, device, only_active)
    out["entries"].sort(key=lambda e: e["time_created_ns"])
    return out


def dump_fr_trace(group=None, only_active: bool = False) -> bytes:
    """godist's flight recorder trace, pickled as torch's
    ``_dump_fr_trace()`` returns its own: of ``group`` (a godist group) or
    of every live godist group of this process. Write it to
    ``<prefix><rank>`` files, one per rank, and run ``python -m
    torch.distributed.flight_recorder.fr_trace <folder> -p <prefix>`` to
    find the rank and the op a hung or failed job stopped at. While torch
    records godist's ops itself (``TORCH_FR_BUFFER_SIZE`` set, torch 2.14+),
    this is torch's trace of them."""
    if _torch_records():
        return torch._C._distributed_c10d._dump_fr_trace(backend="godist")
    groups = None
    if group is not None:
        from .process_group import group_of

        groups = [group_of(group)]
    return pickle.dumps(trace(groups, only_active))


_dump_lock = threading.Lock()
_fr_dumped = False


def _dump_on_failure() -> bool:
    v = _first(_ON_FAILURE_VARS).lower()
    return v not in ("0", "false", "no", "off")


def dump() -> None:
    """After a collective failed: write the flight recorder's trace of
    godist's groups, once per process, as torch's own backends do: torch's
    recorder into its file when it records godist's ops (see the module's
    text), else godist's own into <TORCH_FR_DUMP_TEMP_FILE><global rank>
    when that is set."""
    global _fr_dumped
    with _dump_lock:
        if _fr_dumped or not _dump_on_failure() or entries_asked() == 0:
            return
        _fr_dumped = True
    rank = dist.get_rank() if dist.is_initialized() else 0
    try:
        if _torch_records():
            write = getattr(torch._C._distributed_c10d, "_dump_fr_trace_file", None)
            if write is not None:
                write(rank, backend="godist")
            return
        prefix = _first(_FILE_VARS)
        if prefix:
            path = f"{prefix}{rank}"
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(dump_fr_trace())
            os.replace(tmp, path)
            _log.log(logging.WARNING, "godist: wrote the flight recorder's trace to %s", path)
    except Exception as e:  # noqa: BLE001 - a failed dump must not hide the op's error
        _log.log(logging.WARNING, "godist: could not write the flight recorder's trace: %s", e)
