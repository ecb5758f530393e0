"""``python -m godist.bench --vs deepspeed``: godist beside DeepSpeed's CPU
all-reduce kernel (and gloo), in the same processes, every result checked
before anything is timed.

DeepSpeed is an optional extra of the benchmark (``pip install
'godist[bench]'``, or ``pip install deepspeed``), never a dependency of
godist: only the ranks of this mode import it. Without it this mode says how
to install it and exits 2.

Defaults: all_reduce (SUM, the only op DeepSpeed's kernel has) at P=2 and 4,
sizes 4 KiB, 32 KiB, 256 KiB, 2 MiB and 16 MiB, float32 and bfloat16. Five
columns per cell (``config.DS_COLUMNS``; what each one calls, and how
DeepSpeed is set up in the ranks: ``ds_worker.py``), time per op = median
over repeats of the mean over ranks, and two ratios, both speeds (above 1
godist is faster): godist/DeepSpeed = t_inference_all_reduce /
t_dist.all_reduce, and direct op/bare op = t_torch.ops.deepspeed /
t_torch.ops.godist. Output: results.md, results.csv, meta.json and
results.png in --out (default docs/perf/deepspeed; the machines' folders
are docs/perf/<machine>/deepspeed), written by ``ds_report.py``.

The first run builds DeepSpeed's kernel (ninja and a C++ compiler, about a
minute; torch caches it in ~/.cache/torch_extensions).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import socket
import sys
import time

from . import machine, results
from .config import DS_COLUMNS, DS_DTYPES, MALLOC_ENV, Config, human_bytes
from .ds_worker import INSTALL_HINT, cpu_kernel_level, shm_path
from .options import (BadOption, check_timing, csv_list, parse_ops, parse_world_sizes, set_process_options,
                      set_rank_env, set_sizes)

MISSING_EXIT = 2
# 4 KiB, 32 KiB, 256 KiB, 2 MiB, 16 MiB: --min-bytes, --max-bytes and --step
# move these bounds.
LO, HI, STEP = 4 << 10, 16 << 20, 8


def deepspeed_missing() -> str | None:
    """Why DeepSpeed cannot be used here (None when it is installed).
    GODIST_BENCH_NO_DEEPSPEED=1 pretends it is not (a testing aid)."""
    if os.environ.get("GODIST_BENCH_NO_DEEPSPEED") == "1":
        return "GODIST_BENCH_NO_DEEPSPEED=1 hides it"
    try:
        spec = importlib.util.find_spec("deepspeed")
    except (ImportError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return None if spec is not None else "no module named 'deepspeed'"


def deepspeed_version() -> str:
    try:
        return importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (no package metadata)"


def config_from_args(a) -> Config:
    """The DeepSpeed comparison's Config; raises options.BadOption."""
    if a.device != "cpu":
        raise BadOption("--vs deepspeed times CPU tensors (DeepSpeed's CPU kernel): leave out --device")
    if a.backends is not None:
        raise BadOption("--backends: --vs deepspeed always times its five columns (" + ", ".join(DS_COLUMNS) + ")")
    if a.spot_dtypes is not None:
        raise BadOption("--spot-dtypes: --vs deepspeed runs every size in each of --dtypes")
    if a.scenarios is not None and any(x != "none" for x in csv_list(a.scenarios)):
        raise BadOption("--scenarios: --vs deepspeed runs no scenarios (none)")
    cfg = Config(mode="vs deepspeed", vs="deepspeed", backends=list(DS_COLUMNS), world_sizes=[2, 4],
                 ops=["all_reduce"], dtypes=["float32", "bfloat16"], spot_dtypes=[], scenarios=[])
    cfg.world_timeout_s = 1200
    if a.quick:
        cfg.mode, cfg.target_s, cfg.repeats, cfg.warmup_max = "vs deepspeed quick", 0.05, 3, 3
    elif a.smoke:
        cfg.mode, cfg.world_sizes, cfg.target_s, cfg.repeats, cfg.warmup_max = "vs deepspeed smoke", [2], 0.004, 2, 1
        cfg.sizes = [4 << 10, 32 << 10]
        cfg.world_timeout_s, cfg.op_timeout_s = 300, 120
    if a.world_sizes is not None:
        cfg.world_sizes = parse_world_sizes(a.world_sizes)
    if any(p < 2 for p in cfg.world_sizes):
        raise BadOption("--world-sizes: every world size must be at least 2")
    if a.ops is not None:
        cfg.ops = parse_ops(a.ops, ("all_reduce",),
                            "--ops: {op}: --vs deepspeed times all_reduce only (DeepSpeed's kernel has no other op)")
    set_sizes(a, cfg, LO, HI, STEP)
    if a.dtypes is not None:
        cfg.dtypes = list(dict.fromkeys(csv_list(a.dtypes)))
        bad = [x for x in cfg.dtypes if x not in DS_DTYPES]
        if bad or not cfg.dtypes:
            raise BadOption(f"--dtypes: {'unknown ' + ', '.join(map(repr, bad)) if bad else 'none given'}; choose "
                            f"from {', '.join(DS_DTYPES)} (what DeepSpeed's kernel reduces)")
    for name in ("repeats", "max_iters"):
        if getattr(a, name):
            setattr(cfg, name, getattr(a, name))
    if a.target_ms:
        cfg.target_s = a.target_ms / 1e3
    set_process_options(a, cfg)
    check_timing(cfg)
    return cfg


def free_port() -> str:
    """A free TCP port's number: DeepSpeed's kernel names its shared-memory
    files after MASTER_PORT, so each world gets its own."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def remove_shm(P: int):
    """Remove the kernel's files of this world that its ranks did not
    (a rank that failed before unlinking its own)."""
    for r in range(P):
        try:
            os.unlink(shm_path(r, os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")))
        except OSError:
            pass


def main(a, parser, argv=None) -> int:
    """The parent of ``--vs deepspeed``: check, spawn each world size, write
    the results."""
    from . import ds_report
    from .progress import Progress
    from .spawn import Live, run_world

    try:
        cfg = config_from_args(a)
    except BadOption as e:
        parser.error(str(e))
    why = deepspeed_missing()
    if why:
        print(f"--vs deepspeed: DeepSpeed is not installed ({why}). It is an optional extra of the benchmark, never "
              f"a dependency of godist; install it with\n    {INSTALL_HINT}\nand run again.", file=sys.stderr)
        return MISSING_EXIT
    out_dir = a.out or os.path.join("docs", "perf", "deepspeed")
    t_start = time.monotonic()
    total = sum(len(Live.items(cfg, P)) for P in cfg.world_sizes)
    progress = Progress(total, worlds=len(cfg.world_sizes))

    set_rank_env(cfg)
    os.environ["DS_ACCELERATOR"] = "cpu"

    m = machine.info()
    header = machine.header_lines(m)
    level = cpu_kernel_level()
    header.append(f"deepspeed: {deepspeed_version()}; this CPU: "
                  + {2: "avx512bw", 1: "avx2, no avx512bw", 0: "no avx2"}[level]
                  + ("" if level >= 2 else " (DeepSpeed's kernel needs avx512bw for bfloat16/float16"
                     + (", avx2 for float32)" if level < 1 else ")")))
    env_keys = ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME", "GODIST_TRANSPORT", "DS_ACCELERATOR", *MALLOC_ENV)
    header.append("env:     " + ", ".join(f"{k}={os.environ[k]}" for k in env_keys if k in os.environ)
                  + "; in each rank LOCAL_SIZE=P, RANK, WORLD_SIZE, LOCAL_RANK")
    header.append(f"run:     mode {cfg.mode}; columns {', '.join(cfg.backends)}; P {cfg.world_sizes}; "
                  f"ops {', '.join(cfg.ops)}; dtypes {', '.join(cfg.dtypes)}; sizes "
                  f"{', '.join(human_bytes(s) for s in cfg.sizes)}; repeats {cfg.repeats}; block target "
                  f"{cfg.target_s * 1e3:g} ms; {total} cells")
    results.header_end(header, a.note, m["nproc"])
    progress.message("\n".join(header))

    rows, errors, setup = [], [], {}
    live = Live(cfg, rows, progress, table=ds_report.DsTable())
    try:
        for P in cfg.world_sizes:
            t = time.monotonic()
            os.environ["MASTER_PORT"] = free_port()
            progress.message(f"--- world size {P}: spawning {P} ranks")
            progress.start_world(P, Live.items(cfg, P))
            try:
                run_world(P, cfg, live, errors, setup)
            finally:
                remove_shm(P)
            progress.end_world()
            progress.message(f"--- world size {P} done in {time.monotonic() - t:.0f} s")
    finally:
        progress.close()

    wrong, bad, code = results.outcome(rows, errors)
    meta = results.run_meta(cfg.mode, t_start, code, header, argv, vs="deepspeed", setup=setup, errors=errors,
                            backends=cfg.backends, dtypes=cfg.dtypes)
    paths = ds_report.write_all(rows, meta, out_dir, want_plot=not a.no_plot)
    results.print_outcome(errors, wrong, bad, paths, meta, results.cell_name)
    print("\n# all_reduce, time per op (µs) and speed ratios (above 1 godist is faster)")
    print("\n".join(ds_report.main_table(rows)))
    return code
