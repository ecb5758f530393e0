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

Test hook (godist's tests only): where ``mpi://`` has no rendezvous handler
(a godist without its MPI path) and GODIST_BENCH_MPI_FILESTORE names a file
path, the default group is made from the launcher's variables
(OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE) with a FileStore there.
"""

from __future__ import annotations

import datetime
import os
import re
import shlex
import subprocess
import sys
import time
import traceback

from .config import Config, human_bytes

MPI_OPS = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")
# The timed groups, in column order: godist on its own transports, godist
# over MPI, gloo.
MPI_GROUPS = ("godist", "godist-mpi", "gloo")
NO_LAUNCHER_EXIT = 1
FILESTORE_HOOK = "GODIST_BENCH_MPI_FILESTORE"
LAUNCH_HINT = "mpirun -np 2 python -m godist.bench --mpi"


def launcher() -> tuple[str, int, int, int] | None:
    """(MPI implementation, rank, size, ranks on this host) from the
    launcher's environment; None outside an MPI launcher."""
    env = os.environ
    if "OMPI_COMM_WORLD_SIZE" in env:
        size = int(env["OMPI_COMM_WORLD_SIZE"])
        return ("Open MPI", int(env.get("OMPI_COMM_WORLD_RANK", 0)), size,
                int(env.get("OMPI_COMM_WORLD_LOCAL_SIZE", size)))
    if "PMI_SIZE" in env:
        size = int(env["PMI_SIZE"])
        return "MPICH", int(env.get("PMI_RANK", 0)), size, int(env.get("MPI_LOCALNRANKS", size))
    return None


def mpi_description(impl: str) -> str:
    """The MPI implementation and version: godist.mpi_info() where godist has
    it, else the launcher's ``--version``."""
    try:
        import godist

        info = getattr(godist, "mpi_info", None)
        if info is not None:
            v = info()
            if isinstance(v, dict):
                # "Open MPI v4.1.4, ...; godist's shim libgodist_mpi_openmpi.so; MPI_THREAD_MULTIPLE"
                # (the shim by its file name, not where this machine keeps it)
                parts = [v.get("version") or v.get("impl", "MPI"),
                         f"godist's shim {os.path.basename(v['shim'])}" if v.get("shim") else "",
                         v.get("provided_name") or "",
                         "initialised by godist" if v.get("initialized_by_godist") else ""]
                return "; ".join(p for p in parts if p)
            return str(v)
    except Exception:  # noqa: BLE001 - fall back to the launcher
        pass
    cmds = {"Open MPI": ("mpirun.openmpi", "ompi_info", "mpirun"), "MPICH": ("mpirun.mpich", "mpichversion", "mpirun")}
    for exe in cmds.get(impl, ("mpirun",)):
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        m = re.search(r"Version:\s*(\S+)", out) or re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", out)
        if m:
            return f"{impl} {m.group(1)} (from {exe} --version)"
    return f"{impl} (version unknown)"


def config_from_args(a) -> Config:
    """The MPI mode's Config; raises cli.BadOption."""
    from .cli import BadOption, _csv_list, check_timing, parse_ops, set_process_options, set_sizes

    if a.device != "cpu":
        raise BadOption("--mpi times CPU tensors: leave out --device")
    if a.world_sizes is not None:
        raise BadOption("--world-sizes: with --mpi the number of ranks is mpirun's -np")
    if a.backends is not None:
        raise BadOption("--backends: --mpi always times godist, godist over MPI and gloo")
    if a.spot_dtypes:
        raise BadOption("--spot-dtypes: --mpi times float32 only")
    if a.scenarios is not None and any(x != "none" for x in _csv_list(a.scenarios)):
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


class NoMpiRendezvous(RuntimeError):
    """``init_method="mpi://"`` has no rendezvous handler in this godist."""


def _mpi_registered() -> bool:
    import importlib

    import godist  # noqa: F401  (registers mpi:// where godist has its MPI path)

    # The module, not torch.distributed's function of the same name.
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    return "mpi" in getattr(rdzv, "_rendezvous_handlers", {})


def init_default(timeout):
    """The default group on godist, from MPI; the test hook's FileStore where
    mpi:// is not there. Returns how it was made."""
    import torch.distributed as dist

    import godist  # noqa: F401  (registers the backend and, with the MPI path, mpi://)

    if _mpi_registered():
        dist.init_process_group("godist", init_method="mpi://", timeout=timeout)
        return "init_method mpi://"
    path = os.environ.get(FILESTORE_HOOK)
    if not path:
        raise NoMpiRendezvous(
            "init_method='mpi://' is not registered: this godist has no MPI rendezvous (godist/_mpi.py, registered "
            "by `import godist`); --mpi needs a godist built with its MPI path")
    _, rank, size, _ = launcher()
    dist.init_process_group("godist", init_method=f"file://{path}", rank=rank, world_size=size, timeout=timeout)
    return f"test hook {FILESTORE_HOOK} (FileStore; mpi:// not registered)"


def main(a, parser, argv=None) -> int:
    """One MPI rank of the MPI mode."""
    from .cli import BadOption, set_rank_env

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

        wrong = [r for r in rows if r.get("wrong")]
        bad = [r for r in rows if r["status"] == "error"]
        code = 1 if (wrong or bad) else 0
        args = sys.argv[1:] if argv is None else argv
        meta = {"command": f"mpirun -np {size} python -m godist.bench " + " ".join(shlex.quote(x) for x in args),
                "mode": cfg.mode, "when": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                "wall_s": time.monotonic() - t0, "exit": code, "header": b.header, "setup": b.setup_times,
                "groups": b.group_status, "mpi": b.mpi_text, "ranks": size, "local_ranks": local,
                "oversubscribed": b.oversubscribed, "errors": []}
        out_dir = a.out or os.path.join("docs", "perf-mpi")
        paths = mpi_report.write_all(rows, meta, out_dir, want_plot=not a.no_plot)
        for r in wrong:
            print(f"WRONG: {r['op']} {human_bytes(int(r['size_bytes']))} {r['backend']}: {r['wrong']} wrong elements",
                  file=sys.stderr)
        for r in bad:
            print(f"ERROR: {r['op']} {r['backend']}: {r['error']}", file=sys.stderr)
        print(f"wrote {', '.join(paths.values())} in {meta['wall_s']:.0f} s; exit {code}", file=sys.stderr)
    code = b.finish(code)
    return code
