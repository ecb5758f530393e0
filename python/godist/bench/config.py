"""Benchmark configuration: the presets (full, ``--quick``, ``--smoke``) and
the names of operations and scenarios. Plain data, pickled to every rank."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BACKENDS = ("godist", "gloo")
# --device cuda: godist against torch's NCCL backend on CUDA tensors (cuda.py).
CUDA_BACKENDS = ("godist", "nccl")
CUDA_OPS = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "all_to_all_single")

OPS = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "barrier",
       "send_recv")
OP_ALIASES = {
    "allreduce": "all_reduce", "bcast": "broadcast", "all_gather": "all_gather_into_tensor",
    "allgather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor",
    "reducescatter": "reduce_scatter_tensor", "all_to_all": "all_to_all_single", "alltoall": "all_to_all_single",
    "sendrecv": "send_recv", "send": "send_recv", "recv": "send_recv", "p2p": "send_recv", "pingpong": "send_recv",
}
# Collectives that reduce (they get the bfloat16 / int64 spot cells).
REDUCING = ("all_reduce", "reduce_scatter_tensor")
SCENARIOS = ("ddp", "infer", "async", "recreate")
# glibc malloc settings the ranks start with (unless --default-malloc).
# The DDP scenario keeps one model per backend in each rank, and their
# gradients (100 MB each, freed at the start of every step) share one
# heap. With glibc's defaults, whichever model's gradients lie at the top of
# the heap has them trimmed back to the kernel when they are freed and
# faults every page in again in the next backward pass, on one backend and
# not the other, decided by allocation order, not by the backend. Pinning the
# mmap threshold (32 MiB, glibc's largest) and a trim threshold of 1 GiB
# keeps every step of both models on memory the process already has.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
DTYPES = ("float32", "bfloat16", "int64", "float64", "float16", "int32")
# --mpi (mpi.py): the collectives it times.
MPI_OPS = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")
# The timed groups, in column order: godist on its own transports, godist
# over MPI, gloo.
MPI_GROUPS = ("godist", "godist-mpi", "gloo")
# --hosts H (hosts.py): the same collectives as --mpi.
HOSTS_OPS = MPI_OPS
# --vs deepspeed (ds.py): the timed columns, in order: godist through
# dist.all_reduce, godist's custom op torch.ops.godist.all_reduce_, DeepSpeed's
# deepspeed.comm.inference_all_reduce, its bare op
# torch.ops.deepspeed.inference_all_reduce_, and gloo.
DS_COLUMNS = ("godist", "godist-op", "deepspeed", "deepspeed-op", "gloo")
# The dtypes DeepSpeed's CPU kernel reduces (anything else it leaves alone).
DS_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class Config:
    mode: str = "full"                      # full | quick | smoke (a label)
    device: str = "cpu"                     # cpu (godist vs gloo) | cuda (godist vs nccl, cuda.py)
    backends: list = field(default_factory=lambda: list(BACKENDS))  # benchmarked, in BACKENDS order
    world_sizes: list = field(default_factory=lambda: [2, 4, 8])
    ops: list = field(default_factory=lambda: list(OPS))
    sizes: list = field(default_factory=list)          # nominal bytes, float32 sweep
    spot_dtypes: list = field(default_factory=lambda: ["bfloat16", "int64"])
    spot_sizes: list = field(default_factory=list)
    repeats: int = 3                        # timed blocks per backend and cell (A-B-B-A ...)
    target_s: float = 0.1                   # wall time one timed block aims at
    max_iters: int = 2000                   # ops per block at most
    warmup_max: int = 5                     # untimed warm-up ops at most (fewer for slow cells)
    scenarios: list = field(default_factory=lambda: list(SCENARIOS))
    scenario_world_sizes: list | None = None  # None: every world size of the run
    ddp_dim: int = 2048                     # 6 x Linear(2048, 2048): 25.2 M parameters
    ddp_layers: int = 6
    ddp_batch: int = 16
    ddp_bucket_mb: float = 25.0
    ddp_steps: int = 3                      # timed steps per block
    ddp_repeats: int = 4                    # timed blocks per variant
    infer_iters: int = 1000
    recreate_iters: int = 15                # groups made per timed block of the recreate scenario
    infer_kib: list = field(default_factory=lambda: [4, 8, 16, 32, 64])
    tcp_only: bool = False
    pin_malloc: bool = True                 # start the ranks with MALLOC_ENV
    op_timeout_s: float = 300.0             # both process groups' timeout
    world_timeout_s: float = 1800.0         # one world size, all cells
    issue_ops: int = 100                    # cuda: ops of a block whose issue time is the CPU time per op
    issue_max_bytes: int = 1 << 20          # cuda: largest size whose CPU time per op is compared
    ddp_lr: float = 0.01                    # cuda: the DDP step's SGD learning rate
    vs: str = ""                            # "deepspeed": the --vs deepspeed columns (ds.py), else ""
    dtypes: list = field(default_factory=list)  # every size in each of these dtypes (else float32 + spot cells)

    @property
    def ref(self) -> str:
        """The backend godist is compared with."""
        return "nccl" if self.device == "cuda" else "gloo"


def cell_list(cfg: Config) -> list[tuple[str, str, int]]:
    """The cells of one world size, in the order they run: (op, dtype,
    nominal bytes). Each operation's float32 sweep is followed by its dtype
    spot cells, so one operation's cells come one after the other. With
    cfg.dtypes (--vs deepspeed), every size in each of those dtypes."""
    if cfg.dtypes:
        return [(op, dt, s) for op in cfg.ops for dt in cfg.dtypes for s in cfg.sizes]
    out = []
    for op in cfg.ops:
        if op == "barrier":
            out.append((op, "float32", 0))
            continue
        out.extend((op, "float32", s) for s in cfg.sizes)
        if op in REDUCING:
            for dt in cfg.spot_dtypes:
                if dt != "float32":
                    out.extend((op, dt, s) for s in cfg.spot_sizes)
    return out


def scenario_list(cfg: Config, P: int) -> list[str]:
    """The scenarios world size P runs after its cells, in order."""
    sws = cfg.scenario_world_sizes
    if sws is not None and P not in sws:
        return []
    return [s for s in SCENARIOS if s in cfg.scenarios]


def geometric_sizes(lo: int, hi: int, step: int) -> list[int]:
    """lo, lo*step, lo*step^2, ... <= hi, and hi itself."""
    out, s = [], max(1, lo)
    while s <= hi:
        out.append(s)
        if step <= 1:
            break
        s *= step
    if hi >= lo and (not out or out[-1] != hi):
        out.append(hi)
    return out


def spot_sizes_for(sizes: list[int]) -> list[int]:
    """Two sizes from the sweep for the dtype spot cells: the second smallest
    (latency) and the second largest (bandwidth) (one if they coincide)."""
    s = sorted(set(sizes))
    if len(s) <= 2:
        return s[-1:]
    return sorted({s[1], s[-2]})


def parse_bytes(text: str) -> int:
    """'8', '4K', '4KiB', '1.5M', '2 GB' (binary multiples): bytes. ValueError
    for anything else."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    try:
        return int(float(t) * mult)
    except (ValueError, OverflowError):
        raise ValueError(f"not a size: {text!r} (use bytes, or K, M, G suffixes: 8, 4K, 1M)") from None


def human_bytes(n: int) -> str:
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m} {unit}"
        if n >= m:
            return f"{n / m:.1f} {unit}"
    return f"{n} B"


def parse_rate(text: str) -> float | None:
    """Bits per second of a tbf rate ('1gbit', '100mbit', '10gbit'); None for
    'none' (an unshaped link). ValueError otherwise."""
    t = text.strip().lower()
    if t == "none":
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)bit", t)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"rate {text!r}: use e.g. 1gbit, 100mbit, 10gbit or none")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
