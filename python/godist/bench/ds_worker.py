"""What every rank runs with ``--vs deepspeed``: godist, DeepSpeed's CPU
all-reduce kernel and gloo side by side in the same process (see ``ds.py``).

DeepSpeed's kernel (``deepspeed/ops/csrc/cpu/comm/shm.cpp``) binds to the
world: ``deepspeed.init_distributed`` sets it up over every rank, and its op
takes no group. So DeepSpeed makes the default group here, as a DeepSpeed
program does: ``deepspeed.init_distributed(dist_backend="gloo",
init_method=<this world's FileStore>)``. That gloo group is also the
harness (agreeing iteration counts, gathering numbers; never used while a
block is timed) and the group DeepSpeed's own fallback reduces on. godist
and gloo are timed on ``new_group(backend=...)`` groups over the same ranks.

Before DeepSpeed is imported every rank sets what the kernel reads from the
environment: DS_ACCELERATOR=cpu, RANK, WORLD_SIZE, LOCAL_RANK, and
LOCAL_SIZE=P (all ranks on this host; without it the kernel never maps its
shared memory and its op faults). MASTER_ADDR and MASTER_PORT (a free port
the parent picked for this world) name the kernel's shared-memory files;
DeepSpeed never removes them, so once every rank has mapped them each rank
unlinks its own (``shm_path``), and the parent removes what a failed world
left.

The columns of a cell (``config.DS_COLUMNS``), all on the cell's one buffer:

* godist: ``dist.all_reduce(t, group=<godist group>)``;
* godist-op: ``torch.ops.godist.all_reduce_(t, "sum", group.group_name)``;
* deepspeed: ``deepspeed.comm.inference_all_reduce(t)``;
* deepspeed-op: ``torch.ops.deepspeed.inference_all_reduce_(t)``;
* gloo: ``dist.all_reduce(t, group=<gloo group>)``.

Each is checked like every cell of the benchmark before it is timed
(``worker.RankBench.check``: every rank's result against the expectation,
mismatches are the cell's #wrong), then timed A-B-C-D-E-E-D-C-B-A.

The kernel's bfloat16 and float16 reductions need avx512bw, its float32
avx2 (DeepSpeed's ``vector_kernel_level``: 2, 1 or 0). Where the CPU lacks
it, ``inference_all_reduce`` falls back to ``torch.distributed.all_reduce``
on the default (gloo) group, and its column is labelled that fallback; the
bare op would fault, so it is not called: its cell says "unsupported on this
CPU (needs avx512bw)". A DeepSpeed without that guard (no
``shm_vector_kernel_level``) would call the kernel from
``inference_all_reduce`` too: there the level is read from /proc/cpuinfo
and neither DeepSpeed column is called where it is short.
"""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import time

from .cells import CellData, Variant
from .config import Config
from .worker import RankBench, run_rank

INSTALL_HINT = "pip install 'godist[bench]' (or pip install deepspeed)"
DS_FALLBACK = "fallback: torch all_reduce on gloo"
NEEDS = {1: "unsupported on this CPU (needs avx2)", 2: "unsupported on this CPU (needs avx512bw)"}
# Testing aid: rank 0 adds 1 to the bare op's result, so that a kernel
# returning wrong sums is seen to be counted (#wrong), not timed silently.
_WRONG_OP = os.environ.get("GODIST_BENCH_DS_WRONG") == "1"
SHM_PREFIX = "deepspeed_allreduce_buffer"


def shm_path(rank: int, addr: str, port: str) -> str:
    """The file DeepSpeed's kernel keeps rank ``rank``'s buffer in (shm.cpp:
    SHM_BUFFER_NAME _ uid _ MASTER_ADDR _ MASTER_PORT _ rank)."""
    return f"/dev/shm/{SHM_PREFIX}_{os.getuid()}_{addr}_{port}_{rank}"


def required_level(dtype: str) -> int:
    """DeepSpeed's vector_kernel_level a dtype's reduction needs."""
    return 1 if dtype == "float32" else 2


def cpu_kernel_level() -> int:
    """DeepSpeed's vector_kernel_level worked out from /proc/cpuinfo, for a
    DeepSpeed that does not report it (its rule: avx512bw 2, avx2 1, else 0
    on x86-64; 2 elsewhere)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return 2
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return 0
    return 2 if "avx512bw" in flags else 1 if "avx2" in flags else 0


class DsRankBench(RankBench):
    def __init__(self, rank: int, P: int, cfg: Config, store_path: str, q):
        os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), WORLD_SIZE=str(P), LOCAL_RANK=str(rank),
                          LOCAL_SIZE=str(P), LOCAL_WORLD_SIZE=str(P))
        # DeepSpeed prints to stdout (its logger, the kernel's build); the
        # parent's stdout is the result table.
        os.dup2(2, 1)
        import torch
        import torch.distributed as dist

        import godist  # noqa: F401  (registers the backend and torch.ops.godist)

        try:
            import deepspeed
            import deepspeed.comm as dscomm
        except ImportError as e:
            raise RuntimeError(f"deepspeed does not import ({type(e).__name__}: {e}); {INSTALL_HINT}") from e
        self.torch, self.dist = torch, dist
        self.rank, self.P, self.cfg, self.q = rank, P, cfg, q
        self._base_cache = {}
        self.ds_iar = dscomm.inference_all_reduce
        timeout = datetime.timedelta(seconds=cfg.op_timeout_s)
        t0 = time.perf_counter()
        deepspeed.init_distributed(dist_backend="gloo", init_method=f"file://{store_path}", rank=rank, world_size=P,
                                   timeout=timeout, verbose=False)
        setup = {"deepspeed.init_distributed (gloo default group, kernel)": time.perf_counter() - t0}
        cdb = importlib.import_module("deepspeed.comm.comm").cdb
        self.kernel = getattr(cdb, "shm_comm_op", None) is not None and self._has_bare_op()
        self.guarded = hasattr(cdb, "shm_vector_kernel_level")
        self.level = (cdb.shm_vector_kernel_level if self.guarded else cpu_kernel_level()) if self.kernel else None
        self.backends = list(cfg.backends)
        self.groups = {}
        for b in ("gloo", "godist"):
            t = time.perf_counter()
            self.groups[b] = dist.new_group(backend=b, timeout=timeout)
            setup[f"new_group({b})"] = time.perf_counter() - t
        dist.barrier()  # every rank has mapped every rank's kernel buffer
        self._unlink_shm()
        v = self.gather_setup(setup, self.groups["godist"])
        if rank == 0:
            info = {"version": getattr(deepspeed, "__version__", "unknown"), "comm": type(cdb).__name__,
                    "kernel": self.kernel, "level": self.level,
                    "level_from": "DeepSpeed" if self.guarded else "/proc/cpuinfo"}
            self.send("setup", {"times": {k: float(v[:, i].max()) for i, k in enumerate(setup)},
                                "godist_transport": self.transport, "deepspeed": info})
            self.note(f"godist transport: {self.transport}; {kernel_text(info)}")

    def _has_bare_op(self) -> bool:
        try:
            return hasattr(self.torch.ops.deepspeed, "inference_all_reduce_")
        except Exception:  # noqa: BLE001 - no such namespace
            return False

    def _unlink_shm(self):
        path = shm_path(self.rank, os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", ""))
        try:
            os.unlink(path)
        except OSError:
            pass

    # ----- the columns ----------------------------------------------------------
    def columns(self, buf, dtype: str) -> list[Variant]:
        """The variants of a cell on ``buf``, in column order. One that must
        not be called comes back with status "unsupported" and why."""
        torch, dist = self.torch, self.dist
        god, gloo = self.groups["godist"], self.groups["gloo"]
        name, gop, iar = god.group_name, torch.ops.godist.all_reduce_, self.ds_iar
        short = NEEDS.get(required_level(dtype), "unsupported") if self.kernel and self.level < required_level(
            dtype) else ""
        out = []
        for b in self.backends:
            if b == "godist":
                v = Variant(b, god, lambda: dist.all_reduce(buf, group=god))
            elif b == "godist-op":
                v = Variant(b, god, lambda: gop(buf, "sum", name))
            elif b == "gloo":
                v = Variant(b, gloo, lambda: dist.all_reduce(buf, group=gloo))
            elif b == "deepspeed":
                # DeepSpeed's own fallback where its kernel cannot take the
                # dtype (not loaded, or short of the ISA with the guard).
                fallback = not self.kernel or (short and self.guarded)
                v = Variant(b, None, lambda: iar(buf), DS_FALLBACK if fallback else "native")
                if short and not self.guarded:
                    v.status, v.error = "unsupported", short + "; this DeepSpeed would call its kernel anyway"
            elif b == "deepspeed-op":
                v = Variant(b, None, self._bare_op(buf))
                if not self.kernel:
                    v.status, v.error = "unsupported", "DeepSpeed's CPU kernel did not load"
                elif short:
                    v.status, v.error = "unsupported", short
            else:
                raise ValueError(b)
            out.append(v)
        return out

    def _bare_op(self, buf):
        if not self.kernel:
            return None
        op = self.torch.ops.deepspeed.inference_all_reduce_
        if not (_WRONG_OP and self.rank == 0):
            return lambda: op(buf)

        def wrong():
            op(buf)
            buf.add_(1)
        return wrong

    # ----- cells --------------------------------------------------------------
    def run_cell(self, op: str, dtype: str, nominal: int):
        data = CellData(self.torch, op, dtype, nominal, self.rank, self.P, self._base_cache)
        variants = self.columns(data.buf, dtype)
        runnable = [v for v in variants if v.status == "ok"]
        self.check(data, runnable)
        self.time_cell(runnable)
        self.emit(op, dtype, nominal, data.size, data.count, variants)
        del data

    def transport_of(self, v: Variant) -> str:
        if v.backend.startswith("godist"):
            return self.transport
        if v.backend.startswith("deepspeed") and v.label == "native":
            return "shm (DeepSpeed)"
        return "tcp"

    def add_ratios(self, rows):
        """godist/gloo as in every cell, and the two the comparison is
        about, speeds in every row of the cell: ds_speedup = t_deepspeed /
        t_godist (inference_all_reduce against dist.all_reduce), op_speedup
        = t_deepspeed-op / t_godist-op (the bare ops)."""
        super().add_ratios(rows)
        by = {r["backend"]: r for r in rows}
        for key, mine, theirs in (("ds_speedup", "godist", "deepspeed"), ("op_speedup", "godist-op", "deepspeed-op")):
            a, b = by.get(mine), by.get(theirs)
            if a and b and a.get("time_us") and b.get("time_us"):
                for r in rows:
                    r[key] = b["time_us"] / a["time_us"]

    def warm_start(self):
        """Untimed small float32 all_reduces on every column, alternating,
        for about two blocks' time (``worker.RankBench.warm_start``)."""
        buf = self.torch.zeros(2)
        fns = [v.fn for v in self.columns(buf, "float32") if v.status == "ok"]
        deadline = time.perf_counter() + 2 * self.cfg.target_s
        go = 1
        while go:
            for fn in fns:
                for _ in range(20):
                    fn()
            go = self.agree([int(time.perf_counter() < deadline)], self.dist.ReduceOp.MIN)[0]


def kernel_text(info: dict) -> str:
    """DeepSpeed's kernel as rank 0 found it, in a line."""
    head = f"DeepSpeed {info.get('version', '?')} ({info.get('comm', '?')})"
    if not info.get("kernel"):
        return head + ": CPU kernel not loaded (inference_all_reduce falls back to torch's all_reduce)"
    level = info.get("level")
    isa = {2: "avx512bw", 1: "avx2 (no avx512bw)", 0: "neither avx2 nor avx512bw"}.get(level, "?")
    text = f"{head}: CPU kernel loaded, vector_kernel_level {level} ({isa}; from {info.get('level_from', '?')})"
    if level is not None and level < 2:
        if info.get("level_from") == "DeepSpeed":
            text += "; bfloat16/float16 need avx512bw: inference_all_reduce falls back, the bare op is not called"
        else:
            text += "; bfloat16/float16 need avx512bw: neither DeepSpeed column is called for them"
    return text


def rank_main(rank: int, P: int, cfg: Config, store_path: str, q):
    """Entry point of a spawned rank of ``--vs deepspeed``."""
    run_rank(DsRankBench, rank, P, cfg, store_path, q)
