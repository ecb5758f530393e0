"""``python -m godist.bench``: the command line and the parent process.

The parent prints the machine header, spawns one world of P ranks per world
size (``spawn.py``: start method "spawn", a FileStore in a temporary
directory), collects the rows rank 0 sends, prints each cell's row of the
result table to stdout as it comes (``table.py``) and keeps the progress
display on stderr (``progress.py``), kills a world that errors or runs past
its time limit, and writes the CSV, markdown and PNG. Exit status: 0 when
every cell ran and none had a wrong element, 1 otherwise, 2 for bad arguments.

``--mpi`` (under mpirun: godist, godist over MPI and gloo in the launched
ranks) is run by ``mpi.main``; without an MPI launcher it says how to launch
it and exits 1.

``--hosts H`` (godist vs gloo on H simulated hosts, network namespaces with
shaped links; needs root) is run by ``hosts.main``.

``--vs deepspeed`` (godist beside DeepSpeed's CPU all-reduce kernel and
gloo) is run by ``ds.main`` with the same spawn and progress machinery;
without deepspeed installed it says how to install it and exits 2.

``--device cuda`` (godist vs nccl on CUDA tensors) is run by ``cuda.main``
with the same spawn, table and progress machinery; without a usable GPU it
says "no CUDA device: ..." and exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import machine, report, results
from .config import BACKENDS, DTYPES, MALLOC_ENV, OPS, SCENARIOS, Config, human_bytes, scenario_list, spot_sizes_for
from .options import (BadOption, check_timing, csv_list, int_list, parse_backends, parse_ops, parse_world_sizes,
                      set_process_options, set_rank_env, set_sizes)
from .progress import Progress
from .spawn import Live, run_world


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m godist.bench",
        description="godist vs gloo, side by side in the same processes (A-B-B-A interleaved), correctness "
                    "checked before timing. Writes results.md, results.csv and results.png to --out.")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help="P=2,4,8; sizes 8 B, 512 B, 32 KiB, 2 MiB, 64 MiB; 50 ms blocks; scenarios at P=2,4 "
                           "(about 2-3 min on 2 cores); --device cuda: P=1,2, sizes 8 B, 512 B, 32 KiB, 2 MiB, "
                           "32 MiB, 256 MiB, 50 ms blocks")
    mode.add_argument("--smoke", action="store_true",
                      help="P=2; sizes 8 B and 64 KiB; tiny DDP, inference and async scenarios (well under a minute); "
                           "--device cuda: P=1, tiny DDP")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (default): godist vs gloo on CPU tensors; cuda: godist vs torch's nccl on CUDA "
                        "tensors, rank r on GPU r %% device_count (see godist/bench/cuda.py)")
    p.add_argument("--mpi", action="store_true",
                   help="run under mpirun, one rank per process: godist (own transports), godist over MPI and gloo "
                        "side by side (mpirun -np 2 python -m godist.bench --mpi; see godist/bench/mpi.py); "
                        "output default docs/perf-mpi")
    hosts = p.add_argument_group("--hosts H (godist vs gloo across simulated hosts; root; see godist/bench/hosts.py)")
    hosts.add_argument("--hosts", type=int, metavar="H",
                       help="run on H simulated hosts (network namespaces joined by a bridge), --ranks-per-host "
                            "ranks on each, once per rate of --rates; float32 cells of 5 collectives and the DDP step; "
                            "5 repeats by default; output default docs/perf-hosts")
    hosts.add_argument("--ranks-per-host", type=int, metavar="L", help="ranks on each simulated host (default 2)")
    hosts.add_argument("--rates", type=str,
                       help="comma-separated link rates of the simulated hosts, tbf in both directions: e.g. "
                            "1gbit, 10gbit, 100mbit, or none for unshaped links (default 1gbit,10gbit)")
    vs = p.add_argument_group("--vs deepspeed (godist and DeepSpeed's CPU all-reduce kernel; see godist/bench/ds.py)")
    vs.add_argument("--vs", choices=("deepspeed",),
                    help="deepspeed: all_reduce through godist (dist.all_reduce and torch.ops.godist.all_reduce_), "
                         "DeepSpeed (deepspeed.comm.inference_all_reduce and its bare op) and gloo, side by side; "
                         "P=2,4, 4 KiB-16 MiB in x8 steps, float32 and bfloat16; needs deepspeed "
                         "(pip install 'godist[bench]'); output default docs/perf/deepspeed")
    vs.add_argument("--dtypes", type=str,
                    help="with --vs deepspeed: comma-separated dtypes, every size in each (float32, bfloat16, "
                         "float16; default float32,bfloat16)")
    p.add_argument("--world-sizes", "--ranks", dest="world_sizes", type=str,
                   help="comma-separated world sizes (default 2,4,8; --device cuda: 1,2)")
    p.add_argument("--ops", type=str, help="comma-separated: " + ", ".join(OPS) + " (default all)")
    p.add_argument("--backends", type=str,
                   help="comma-separated backends to time: godist, gloo or both (default both; with one, no "
                        "godist/gloo ratio is reported)")
    p.add_argument("--min-bytes", type=str, help="smallest size, e.g. 8, 4K, 1M (default 8)")
    p.add_argument("--max-bytes", type=str, help="largest size (default 64M)")
    p.add_argument("--step", type=int, help="size factor between cells (default 4; --quick 64)")
    p.add_argument("--sizes", type=str, help="explicit comma-separated sizes (overrides min/max/step)")
    p.add_argument("--repeats", type=int, help="timed blocks per backend and cell, interleaved A-B-B-A (default 3)")
    p.add_argument("--target-ms", type=float, help="wall time a timed block aims at (default 100; --quick 50)")
    p.add_argument("--max-iters", type=int, help="ops per timed block at most (default 2000)")
    p.add_argument("--spot-dtypes", type=str,
                   help="dtypes for the all_reduce/reduce_scatter spot cells (default bfloat16,int64; '' for none)")
    p.add_argument("--scenarios", type=str,
                   help="comma-separated: ddp, infer, async, recreate, or none (default all four)")
    p.add_argument("--scenario-world-sizes", type=str,
                   help="world sizes that run the scenarios (default: all of --world-sizes)")
    p.add_argument("--ddp-steps", type=int, help="DDP steps per timed block (default 3, --quick 2)")
    p.add_argument("--ddp-repeats", type=int, help="timed DDP blocks per variant (default 4, --quick 3)")
    p.add_argument("--infer-iters", type=int, help="all_reduces in the inference and async loops (default 1000)")
    p.add_argument("--out", type=str, default=None, help="output directory (default docs/perf)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--tcp-only", action="store_true",
                   help="set GODIST_TRANSPORT=tcp in the ranks: godist uses TCP even between ranks on one host")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc thresholds as they are in the ranks (by default they are pinned, "
                        "see MALLOC_ENV in config.py)")
    p.add_argument("--timeout", type=float, help="seconds one world size may run before it is killed (default 1800)")
    p.add_argument("--op-timeout", type=float, help="process-group timeout in seconds (default 300)")
    p.add_argument("--note", type=str, help="free text added to the report header (e.g. what was built from where)")
    cuda = p.add_argument_group("--device cuda")
    cuda.add_argument("--issue-ops", type=int,
                      help="ops at the start of each timed block whose issue time (the Python call to its return, "
                           "no synchronize) gives the CPU time per op (default 100)")
    cuda.add_argument("--issue-max-bytes", type=str,
                      help="largest size whose CPU time per op is compared between the backends (default 1M)")
    p.add_argument("--render", metavar="DIR", type=str,
                   help="run nothing: rewrite DIR/results.md and results.png from DIR/results.csv and meta.json")
    return p


def config_from_args(a) -> Config:
    cfg = Config()
    lo, hi, step = 8, 64 << 20, 4
    if a.quick:
        cfg.mode, step, cfg.target_s, cfg.repeats = "quick", 64, 0.05, 3
        cfg.warmup_max, cfg.ddp_steps, cfg.ddp_repeats, cfg.infer_iters = 3, 2, 3, 1000
        cfg.scenario_world_sizes = [2, 4]
        cfg.world_timeout_s = 900
    elif a.smoke:
        cfg.mode, cfg.world_sizes, cfg.target_s, cfg.repeats, cfg.warmup_max = "smoke", [2], 0.004, 2, 1
        cfg.sizes = [8, 64 << 10]
        cfg.ddp_dim, cfg.ddp_layers, cfg.ddp_batch, cfg.ddp_bucket_mb, cfg.ddp_steps = 256, 4, 4, 0.25, 1
        cfg.ddp_repeats = 2
        cfg.infer_iters, cfg.recreate_iters = 100, 5
        cfg.world_timeout_s = 240
        cfg.op_timeout_s = 60
    if a.world_sizes is not None:
        cfg.world_sizes = parse_world_sizes(a.world_sizes)
    if a.ops is not None:
        cfg.ops = parse_ops(a.ops, OPS)
    if a.backends is not None:
        cfg.backends = parse_backends(a.backends, BACKENDS)
    set_sizes(a, cfg, lo, hi, step)
    if a.repeats:
        cfg.repeats = a.repeats
    if a.target_ms:
        cfg.target_s = a.target_ms / 1e3
    if a.max_iters:
        cfg.max_iters = a.max_iters
    if a.spot_dtypes is not None:
        cfg.spot_dtypes = csv_list(a.spot_dtypes)
        bad = [x for x in cfg.spot_dtypes if x not in DTYPES]
        if bad:
            raise BadOption(f"--spot-dtypes: unknown {', '.join(map(repr, bad))}; choose from {', '.join(DTYPES)}")
    if a.scenarios is not None:
        sc = [x for x in csv_list(a.scenarios) if x != "none"]
        bad = [x for x in sc if x not in SCENARIOS]
        if bad:
            raise BadOption(f"--scenarios: unknown {', '.join(map(repr, bad))}; choose from {', '.join(SCENARIOS)} "
                            "or none")
        cfg.scenarios = sc
    if a.scenario_world_sizes:
        cfg.scenario_world_sizes = int_list("--scenario-world-sizes", a.scenario_world_sizes)
    if a.ddp_steps:
        cfg.ddp_steps = a.ddp_steps
    if a.ddp_repeats:
        cfg.ddp_repeats = a.ddp_repeats
    if a.infer_iters:
        cfg.infer_iters = a.infer_iters
    set_process_options(a, cfg)
    cfg.spot_sizes = spot_sizes_for(cfg.sizes)
    if any(p < 2 for p in cfg.world_sizes):
        raise BadOption("--world-sizes: every world size must be at least 2")
    check_timing(cfg)
    return cfg


def main(argv=None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.render:
        paths = report.render(a.render, want_plot=not a.no_plot)
        print(f"wrote {', '.join(v for k, v in paths.items() if k in ('md', 'png'))}", file=sys.stderr)
        return 0
    if a.vs == "deepspeed":
        if a.hosts is not None or a.mpi or a.ranks_per_host is not None or a.rates is not None:
            parser.error("--vs deepspeed spawns its ranks on this host: leave out --mpi, --hosts, --ranks-per-host "
                         "and --rates")
        from . import ds

        return ds.main(a, parser, argv)
    if a.dtypes is not None:
        parser.error("--dtypes goes with --vs deepspeed (elsewhere --spot-dtypes)")
    if a.hosts is not None:
        from . import hosts

        return hosts.main(a, parser, argv)
    if a.ranks_per_host is not None or a.rates is not None:
        parser.error("--ranks-per-host and --rates go with --hosts H")
    if a.mpi:
        from . import mpi

        return mpi.main(a, parser, argv)
    if a.device == "cuda":
        from . import cuda

        return cuda.main(a, parser, argv)
    try:
        cfg = config_from_args(a)
    except BadOption as e:
        parser.error(str(e))
    out_dir = a.out or os.path.join("docs", "perf")
    t_start = time.monotonic()
    total = sum(len(Live.items(cfg, P)) for P in cfg.world_sizes)
    n_scenarios = sum(len(scenario_list(cfg, P)) for P in cfg.world_sizes)
    progress = Progress(total, worlds=len(cfg.world_sizes))

    set_rank_env(cfg)

    m = machine.info()
    header = machine.header_lines(m)
    env_keys = ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME", "GODIST_TRANSPORT", *MALLOC_ENV)
    env_line = ", ".join(f"{k}={os.environ[k]}" for k in env_keys if k in os.environ)
    header.append(f"env:     {env_line}")
    header.append(f"run:     mode {cfg.mode}; backends {', '.join(cfg.backends)}; P {cfg.world_sizes}; "
                  f"ops {', '.join(cfg.ops)}; sizes {', '.join(human_bytes(s) for s in cfg.sizes)}; "
                  f"repeats {cfg.repeats}; block target {cfg.target_s * 1e3:g} ms; {total - n_scenarios} cells"
                  + (f" and {n_scenarios} scenario runs" if n_scenarios else ""))
    results.header_end(header, a.note, m["nproc"])
    progress.message("\n".join(header))

    rows, errors, setup = [], [], {}
    live = Live(cfg, rows, progress)
    hashes, pyloop = {}, {}
    try:
        for P in cfg.world_sizes:
            t = time.monotonic()
            hashes[P] = machine.library_hash()
            before = machine.python_loop_ms()
            progress.message(f"--- world size {P}: spawning {P} ranks (Python loop {before:.1f} ms)")
            progress.start_world(P, Live.items(cfg, P))
            run_world(P, cfg, live, errors, setup)
            progress.end_world()
            after = machine.python_loop_ms()
            pyloop[P] = [round(before, 1), round(after, 1)]
            progress.message(f"--- world size {P} done in {time.monotonic() - t:.0f} s (Python loop {after:.1f} ms)")
    finally:
        progress.close()  # an interrupted run leaves no half-drawn status line
    if len(set(hashes.values())) > 1:
        msg = ("WARNING: libgodist.so changed during the run (sha256 per world size: " +
               ", ".join(f"P={p} {h}" for p, h in hashes.items()) + ")")
        print(msg, file=sys.stderr)
        header.append(msg)

    wrong, bad, code = results.outcome(rows, errors)
    meta = results.run_meta(cfg.mode, t_start, code, header, argv, setup=setup, errors=errors, python_loop_ms=pyloop,
                            backends=cfg.backends)
    paths = report.write_all(rows, meta, out_dir, want_plot=not a.no_plot)
    results.print_outcome(errors, wrong, bad, paths, meta, results.cell_name)
    if report.has_ratio(rows, meta):
        print("\n# godist/gloo speed ratio per cell and world size (t_gloo / t_godist; above 1 godist is faster)")
        print("\n".join(report.ratio_table(rows)))
    return code
