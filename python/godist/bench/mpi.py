"""``mpirun -np N python -m godist.bench --mpi``: godist on its own
transports, godist over MPI and gloo, side by side in the same MPI ranks.

Every process mpirun starts is one rank; nothing is spawned here. Each rank:

1. inits the default group on godist with ``init_method="mpi://"`` (rank and
   size from MPI; godist's own transports: shared memory between ranks of
   one host, TCP otherwise). It is the harness group too (agreeing
   iteration counts, gathering numbers; never timed while a block runs);
2. makes a second godist group over the same ranks with
   ``GODIST_TRANSPORT=mpi`` set only around ``dist.new_group`` (its
   collectives are MPI collectives). Where godist refuses that transport
   (a build without the MPI path) the run goes on with the other two groups
   and the MPI column says why it is missing;
3. makes a gloo group;
4. per cell (operation, float32 size): runs gloo once on fresh inputs and
   checks its result against the expectation, then each godist group on the
   same fresh inputs and compares its result with gloo's (``#wrong``);
   warms up, agrees on an iteration count, and times ``repeats`` blocks per
   group, interleaved A-B-C-C-B-A (``worker.RankBench.time_block``);
5. rank 0 prints the table as cells finish and writes results.csv,
   results.md, meta.json and results.png (``mpi_report.py``).

How a rank finds its launcher and makes the default group: ``mpi_launch.py``.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from . import results
from .config import MPI_GROUPS, MPI_OPS, Config, human_bytes
from .mpi_launch import NoMpiRendezvous, launcher
from .options import BadOption, check_timing, csv_list, parse_ops, set_process_options, set_rank_env, set_sizes

NO_LAUNCHER_EXIT = 1
LAUNCH_HINT = "mpirun -np 2 python -m godist.bench --mpi"


def config_from_args(a) -> Config:
    """The MPI mode's Config; raises options.BadOption."""
    if a.device != "cpu":
        raise BadOption("--mpi times CPU tensors: leave out --device")
    if a.world_sizes is not None:
        raise BadOption("--world-sizes: with --mpi the number of ranks is mpirun's -np")
    if a.backends is not None:
        raise BadOption("--backends: --mpi always times godist, godist over MPI and gloo")
    if a.spot_dtypes:
        raise BadOption("--spot-dtypes: --mpi times float32 only")
    if a.scenarios is not None and any(x != "none" for x in csv_list(a.scenarios)):
        raise BadOption("--scenarios: --mpi runs no scenarios (none)")
    cfg = Config(mode="mpi", backends=list(MPI_GROUPS), world_sizes=[], ops=list(MPI_OPS), spot_dtypes=[],
                 scenarios=[])
    lo, hi, step = 8, 64 << 20, 4
    if a.quick:
        cfg.mode, cfg.target_s, cfg.repeats, cfg.warmup_max = "mpi quick", 0.05, 3, 3
        cfg.sizes = [8, 512, 32 << 10, 2 << 20, 64 << 20]
    elif a.smoke:
        cfg.mode, cfg.target_s, cfg.repeats, cfg.warmup_max = "mpi smoke", 0.004, 2, 1
        cfg.sizes = [8, 64 << 10]
        cfg.op_timeout_s = 60
    if a.ops is not None:
        cfg.ops = parse_ops(a.ops, MPI_OPS, "--ops: {op} is not timed with --mpi; choose from {choices}")
    set_sizes(a, cfg, lo, hi, step)
    for name in ("repeats", "max_iters"):
        if getattr(a, name) is not None:
            setattr(cfg, name, getattr(a, name))
    if a.target_ms is not None:
        cfg.target_s = a.target_ms / 1e3
    set_process_options(a, cfg, world_timeout=False)
    check_timing(cfg)
    if cfg.max_iters < 1:
        raise BadOption("--max-iters must be at least 1")
    return cfg


def main(a, parser, argv=None) -> int:
    """One MPI rank of the MPI mode."""
    where = launcher()
    if where is None:
        print("--mpi: not started by an MPI launcher (neither OMPI_COMM_WORLD_SIZE nor PMI_SIZE is set). Every "
              "process mpirun starts is one rank; launch it as\n"
              f"    {LAUNCH_HINT} [--sizes ...] [--ops ...] [--out DIR]\n"
              "(as root with Open MPI add --allow-run-as-root; with more ranks than cores add --oversubscribe)",
              file=sys.stderr)
        return NO_LAUNCHER_EXIT
    impl, rank, size, local = where
    t0 = time.monotonic()
    try:
        cfg = config_from_args(a)
    except BadOption as e:
        if rank != 0:
            return 2
        parser.error(str(e))
    # No MASTER_ADDR: MPI makes the groups. The malloc settings are recorded; glibc reads them at start-up, so
    # they are in effect only when set before mpirun.
    set_rank_env(cfg, master_addr=False)
    try:
        from .mpi_worker import MpiRankBench

        import torch

        torch.set_num_threads(1)
        b = MpiRankBench(cfg, impl, rank, size, local)
    except NoMpiRendezvous as e:
        if rank == 0:
            print(f"--mpi: {e}", file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001
        print(f"rank {rank}: setting up the groups failed:\n{traceback.format_exc()}", file=sys.stderr)
        return 1
    try:
        rows = b.run()
    except Exception:  # noqa: BLE001 - mpirun ends the other ranks when this one exits nonzero
        print(f"rank {rank} failed:\n{traceback.format_exc()}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    code = 0
    if rank == 0:
        from . import mpi_report

        wrong, bad, code = results.outcome(rows)
        meta = results.run_meta(cfg.mode, t0, code, b.header, argv, prefix=f"mpirun -np {size} python -m godist.bench",
                                setup=b.setup_times, groups=b.group_status, mpi=b.mpi_text, ranks=size,
                                local_ranks=local, oversubscribed=b.oversubscribed, errors=[])
        out_dir = a.out or os.path.join("docs", "perf-mpi")
        paths = mpi_report.write_all(rows, meta, out_dir, want_plot=not a.no_plot)
        results.print_outcome([], wrong, bad, paths, meta,
                              lambda r: f"{r['op']} {human_bytes(int(r['size_bytes']))} {r['backend']}")
    code = b.finish(code)
    return code
