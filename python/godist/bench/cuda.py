"""``python -m godist.bench --device cuda``: godist against torch's NCCL
backend on CUDA tensors, in the same processes, interleaved A-B-B-A.

What is measured (per cell: operation, size; float32):

* time per op (GPU time): a timed block synchronizes the device, lines the
  ranks up on the harness's gloo group, issues n back-to-back ops
  (``async_op=False``, as users call them), synchronizes again; time = wall
  time of the block / n, median over repeats of the mean over ranks. busbw =
  algbw x the nccl-tests factor (``worker.busbw_factor``).
* CPU time per op: perf_counter from the first Python call of the block to
  the return of its ``issue_ops``-th (100), without synchronizing; the target
  is godist at most 1.5x nccl's. Compared (issue ratio godist/nccl) for sizes
  up to ``issue_max_bytes`` (1 MiB); above that the launch queue fills and
  the GPU sets the pace.
* the DDP step: a small CUDA model (Linear layers, forward + backward + SGD
  step), one DDP model per backend, time per step between synchronizes.

Rank r runs on GPU ``r % torch.cuda.device_count()``. Where a world has more
ranks than GPUs, ranks share a GPU: ``share_gpu_env`` sets what NCCL needs
for that in every rank before its first communicator, the same for both
backends. Numbers on a shared GPU measure the GPU time-sliced between rank
processes (and, on NCCL before 2.30, NCCL's socket transport between ranks
pretending to be on different hosts), not a link between GPUs.

Set GODIST_CUDA (e.g. GODIST_CUDA=staged) in the environment to choose
godist's CUDA path; the header records it.
"""

from __future__ import annotations

import os
import sys
import time

from . import machine, results
from .config import CUDA_BACKENDS, CUDA_OPS, MALLOC_ENV, Config, human_bytes
from .gpus import gpu_of, share_gpu_env  # noqa: F401 (both also here: docs/gpu.md names cuda.share_gpu_env)
from .options import (BadOption, byte_size, check_timing, csv_list, int_list, parse_backends, parse_ops,
                      parse_world_sizes, set_process_options, set_rank_env, set_sizes)

NO_CUDA_EXIT = 1


def cuda_unavailable(need_nccl: bool = True) -> str | None:
    """Why this machine cannot run the CUDA mode (None when it can)."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return f"torch does not import ({type(e).__name__}: {e})"
    if not torch.cuda.is_available():
        return (f"torch.cuda.is_available() is False (torch {torch.__version__}, CUDA build "
                f"{torch.version.cuda or 'none'}); --device cuda needs a GPU")
    if need_nccl:
        import torch.distributed as dist

        if not dist.is_nccl_available():
            return f"torch {torch.__version__} was built without NCCL; --device cuda compares godist with nccl"
    return None


def config_from_args(a) -> Config:
    """The CUDA mode's Config; raises options.BadOption."""
    cfg = Config(device="cuda", backends=list(CUDA_BACKENDS), world_sizes=[1, 2], ops=list(CUDA_OPS),
                 spot_dtypes=[], scenarios=["ddp"], ddp_dim=1024, ddp_layers=8, ddp_batch=64, ddp_bucket_mb=25.0,
                 ddp_steps=10, ddp_repeats=4)
    lo, hi, step = 8, 256 << 20, 4
    if a.quick:
        cfg.mode, cfg.target_s, cfg.repeats, cfg.warmup_max = "quick", 0.05, 3, 3
        cfg.sizes = [8, 512, 32 << 10, 2 << 20, 32 << 20, 256 << 20]
        cfg.ddp_steps, cfg.ddp_repeats = 5, 3
        cfg.world_timeout_s = 600
    elif a.smoke:
        cfg.mode, cfg.world_sizes, cfg.target_s, cfg.repeats, cfg.warmup_max = "smoke", [1], 0.004, 2, 1
        cfg.sizes = [8, 64 << 10]
        cfg.ddp_dim, cfg.ddp_layers, cfg.ddp_batch, cfg.ddp_steps, cfg.ddp_repeats = 256, 3, 8, 2, 2
        cfg.issue_ops = 10
        cfg.world_timeout_s, cfg.op_timeout_s = 240, 60
    if a.world_sizes is not None:
        cfg.world_sizes = parse_world_sizes(a.world_sizes)
    if any(p < 1 for p in cfg.world_sizes):
        raise BadOption("--world-sizes: every world size must be at least 1")
    if a.ops is not None:
        cfg.ops = parse_ops(a.ops, CUDA_OPS, "--ops: {op} is not benchmarked with --device cuda; choose from {choices}")
    if a.backends is not None:
        cfg.backends = parse_backends(a.backends, CUDA_BACKENDS, "with --device cuda choose godist, nccl or godist,nccl")
    set_sizes(a, cfg, lo, hi, step)
    if a.spot_dtypes:
        raise BadOption("--spot-dtypes: --device cuda times float32 only")
    if a.scenarios is not None:
        sc = [x for x in csv_list(a.scenarios) if x != "none"]
        if any(x != "ddp" for x in sc):
            raise BadOption("--scenarios: --device cuda has the ddp scenario only (ddp or none)")
        cfg.scenarios = sc
    if a.scenario_world_sizes:
        cfg.scenario_world_sizes = int_list("--scenario-world-sizes", a.scenario_world_sizes)
    for name in ("repeats", "max_iters", "ddp_steps", "ddp_repeats", "issue_ops"):
        if getattr(a, name):
            setattr(cfg, name, getattr(a, name))
    if a.target_ms:
        cfg.target_s = a.target_ms / 1e3
    if a.issue_max_bytes:
        cfg.issue_max_bytes = byte_size("--issue-max-bytes", a.issue_max_bytes)
    set_process_options(a, cfg)
    check_timing(cfg)
    if cfg.issue_ops < 1:
        raise BadOption("--issue-ops must be at least 1")
    return cfg


def gpu_lines(world_sizes) -> list[str]:
    """The header's GPU lines: the devices, CUDA and NCCL versions, and how
    each world size places its ranks."""
    import torch

    n = torch.cuda.device_count()
    names = {}
    for i in range(n):
        names.setdefault(torch.cuda.get_device_name(i), []).append(i)
    nv = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
    nccl = ".".join(map(str, nv)) if isinstance(nv, tuple) else str(nv)
    lines = [f"GPU:     {n} x " + "; ".join(f"{k} (cuda:{','.join(map(str, v))})" for k, v in names.items()),
             f"cuda:    torch CUDA {torch.version.cuda}; NCCL {nccl}"]
    for P in world_sizes:
        env = share_gpu_env(0, P, n, nv)
        if env:
            env_text = ", ".join(f"{k}={v}" for k, v in env.items()).replace("godist-bench-0", "godist-bench-<rank>")
            lines.append(f"ranks:   P={P}: rank r on cuda:(r % {n}); {P} ranks share {n} GPU(s), set in every rank: "
                         f"{env_text}. Shared GPUs measure time-slicing between processes, not a GPU link.")
        else:
            lines.append(f"ranks:   P={P}: rank r on cuda:r, one GPU per rank")
    return lines


def main(a, parser, argv=None) -> int:
    """The CUDA mode's parent: check, spawn each world size, write the results."""
    from . import cuda_report
    from .config import scenario_list
    from .progress import Progress
    from .spawn import Live, run_world

    try:
        cfg = config_from_args(a)
    except BadOption as e:
        parser.error(str(e))
    why = cuda_unavailable(need_nccl="nccl" in cfg.backends)
    if why:
        print(f"no CUDA device: {why}", file=sys.stderr)
        return NO_CUDA_EXIT
    out_dir = a.out or os.path.join("docs", "perf-cuda")
    t_start = time.monotonic()
    total = sum(len(Live.items(cfg, P)) for P in cfg.world_sizes)
    n_scenarios = sum(len(scenario_list(cfg, P)) for P in cfg.world_sizes)
    progress = Progress(total, worlds=len(cfg.world_sizes))

    set_rank_env(cfg)

    m = machine.info()
    header = machine.header_lines(m) + gpu_lines(cfg.world_sizes)
    env_keys = ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME", "GODIST_TRANSPORT", "GODIST_CUDA", *MALLOC_ENV)
    env_keys += tuple(sorted(k for k in os.environ if k.startswith("NCCL_")))
    header.append("env:     " + ", ".join(f"{k}={os.environ[k]}" for k in env_keys if k in os.environ))
    header.append(f"run:     device cuda; mode {cfg.mode}; backends {', '.join(cfg.backends)}; P {cfg.world_sizes}; "
                  f"ops {', '.join(cfg.ops)}; sizes {', '.join(human_bytes(s) for s in cfg.sizes)}; repeats "
                  f"{cfg.repeats}; block target {cfg.target_s * 1e3:g} ms; CPU time per op over the first "
                  f"{cfg.issue_ops} ops of a block, compared up to {human_bytes(cfg.issue_max_bytes)}; "
                  f"{total - n_scenarios} cells" + (f" and {n_scenarios} scenario runs" if n_scenarios else ""))
    results.header_end(header, a.note, m["nproc"])
    progress.message("\n".join(header))

    rows, errors, setup = [], [], {}
    live = Live(cfg, rows, progress, table=cuda_report.CudaTable(cfg.backends))
    try:
        for P in cfg.world_sizes:
            t = time.monotonic()
            progress.message(f"--- world size {P}: spawning {P} ranks")
            progress.start_world(P, Live.items(cfg, P))
            run_world(P, cfg, live, errors, setup)
            progress.end_world()
            progress.message(f"--- world size {P} done in {time.monotonic() - t:.0f} s")
    finally:
        progress.close()

    wrong, bad, code = results.outcome(rows, errors)
    meta = results.run_meta(cfg.mode, t_start, code, header, argv, device="cuda", setup=setup, errors=errors,
                            backends=cfg.backends, issue_ops=cfg.issue_ops, issue_max_bytes=cfg.issue_max_bytes)
    paths = cuda_report.write_all(rows, meta, out_dir, want_plot=not a.no_plot)
    results.print_outcome(errors, wrong, bad, paths, meta,
                          lambda r: f"P={r['world_size']} {r['op']} {human_bytes(int(r['size_bytes']))} {r['backend']}")
    if cuda_report.has_ratio(meta):
        print("\n# godist/nccl speed per cell and world size (t_nccl / t_godist; above 1 godist is faster)")
        print("\n".join(cuda_report.ratio_table(rows)))
        print(f"\n# CPU time per op, godist / nccl (the call to its return; target at most "
              f"{cuda_report.ISSUE_TARGET:g}, bold above)")
        print("\n".join(cuda_report.ratio_table(rows, "issue_ratio")))
    return code
