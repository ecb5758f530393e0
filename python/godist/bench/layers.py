"""Where a small all_reduce's time goes: the same synchronous all_reduce
timed through each layer between the user and the shared memory.

    python -m godist.bench.layers                       # P=2, float32, 8 B-256 KiB
    python -m godist.bench.layers --ranks 2,4 --dtype bfloat16 --sizes 4K,32K

Each rank times, back to back, one layer after another (interleaved over
``--rounds`` rounds; the table shows the median over rounds of the mean per
call, averaged over ranks):

==================  ==========================================================
``ctypes``          one ctypes call of a C function that does next to nothing
                    (libc's ``getpagesize``): what Python pays for any foreign call
``crossing``        one ctypes call into the library that does nothing
                    (``godist_abi_version``): the fixed cost of entering Go
``entry point``     ``godist_allreduce`` on an op block written once: the Go
                    engine and the shared-memory algorithm, plus one crossing
``group``           the group's fast path (``_fast.allreduce``): the Python
                    that checks the tensor and writes the op block
``ProcessGroup``    ``pg.allreduce([t], opts).wait()``: what torch's
                    ``dist.*`` functions call
``dist.all_reduce`` torch's Python front end (its checks, the options object)
``direct op``       ``torch.ops.godist.all_reduce_(t, "sum", name)``: torch's
                    dispatcher and the op's Python kernel
``gloo``            ``dist.all_reduce`` on a gloo group over the same ranks
==================  ==========================================================

The differences between consecutive rows are what each layer adds. The Go
side alone (the arena's algorithm without the crossing) is measured by
``GODIST_SHM_BENCH=1 go test -run TestProcessBenchmark ./backends/shm``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

from .config import human_bytes, parse_bytes

LAYERS = ("ctypes", "crossing", "entry point", "group", "ProcessGroup", "dist.all_reduce", "direct op", "gloo")


def _time(fn, iters: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def _layers(torch, dist, pg, gloo, t):
    """(name, zero-argument callable) for each layer on tensor t."""
    from .. import _errors, _fast, _lib, ops  # noqa: F401  (ops registers torch.ops.godist)

    g = pg._g
    lib = _lib.load()
    crossing = lib.raw.abi_version
    pagesize = ctypes.CDLL(None).getpagesize
    pagesize.restype, pagesize.argtypes = ctypes.c_int, []
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    opts.asyncOp = False
    view, addr, blk, eb = _lib.op_block()
    dt = _fast._DTYPES[t.dtype]
    ms = _fast._timeout(opts)
    raw = g._raw_allreduce

    def entry():
        _lib.fill(view, 0, g._h, t.data_ptr(), t.nbytes, ms, 0, dt, 0, 0, 0)
        if raw(addr) != _errors.OK:
            raise RuntimeError("godist_allreduce failed")

    name = pg.group_name
    direct = torch.ops.godist.all_reduce_
    return [
        ("ctypes", pagesize),
        ("crossing", crossing),
        ("entry point", entry),
        ("group", lambda: _fast.allreduce(g, [t], opts)),
        ("ProcessGroup", lambda: pg.allreduce([t], opts).wait()),
        ("dist.all_reduce", lambda: dist.all_reduce(t, group=pg)),
        ("direct op", lambda: direct(t, "sum", name)),
        ("gloo", lambda: dist.all_reduce(t, group=gloo)),
    ]


def _rank(rank: int, world: int, port: int, sizes, dtype_name: str, rounds: int, target_s: float, queue):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist

    import godist  # noqa: F401

    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, wait_for_workers=True)
    dist.init_process_group("godist", store=store, rank=rank, world_size=world)
    pg = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    dtype = getattr(torch, dtype_name)
    rows = []
    for n in sizes:
        t = torch.ones(max(1, n // torch.tensor([], dtype=dtype).element_size()), dtype=dtype)
        layers = _layers(torch, dist, pg, gloo, t)
        # Iterations per block and layer: about target_s each, agreed (MAX) over ranks, so that the barrier
        # before a block (and the ranks' skew leaving it) stays a small part of the block.
        for _, fn in layers:
            for _ in range(20):
                fn()
        iters = torch.tensor([max(20, min(200_000, int(target_s / max(_time(fn, 50), 1e-7)))) for _, fn in layers])
        dist.all_reduce(iters, op=dist.ReduceOp.MAX, group=gloo)
        its = iters.tolist()
        per = {name: [] for name, _ in layers}
        for _ in range(rounds):
            for (name, fn), it in zip(layers, its):
                dist.barrier(group=gloo)
                per[name].append(_time(fn, it))
        got = torch.tensor([statistics.median(per[name]) for name, _ in layers], dtype=torch.float64)
        dist.all_reduce(got, group=gloo)
        rows.append((n, (got / world * 1e6).tolist(), its))
    if rank == 0:
        queue.put(rows)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(world: int, sizes, dtype: str = "float32", rounds: int = 7, target_s: float = 0.05):
    """[(bytes, [µs per call for each of LAYERS], [iterations per block for each])] at world size world."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(_rank, args=(world, _free_port(), sizes, dtype, rounds, target_s, q), nprocs=world,
                       start_method="spawn")
    return q.get()


def table(world: int, dtype: str, rows) -> str:
    head = "| layer | " + " | ".join(human_bytes(n) for n, _, _ in rows) + " |"
    lines = [f"P={world}, {dtype}, µs per call (adds: what the layer costs over the one above)", "", head,
             "|" + " --- |" * (len(rows) + 1)]
    for i, name in enumerate(LAYERS):
        cells = []
        for _, us, _ in rows:
            add = "" if i == 0 or name == "gloo" else f" ({us[i] - us[i - 1]:+.1f})"
            cells.append(f"{us[i]:.1f}{add}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m godist.bench.layers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2", help="comma-separated world sizes (default 2)")
    ap.add_argument("--sizes", default="8,1K,4K,32K,256K", help="comma-separated sizes (default 8,1K,4K,32K,256K)")
    ap.add_argument("--dtype", default="float32", help="torch dtype name (default float32)")
    ap.add_argument("--rounds", type=int, default=7, help="timed blocks per layer and size (default 7)")
    ap.add_argument("--target-ms", type=float, default=50, help="wall time of one block (default 50)")
    a = ap.parse_args(argv)
    sizes = [parse_bytes(s) for s in a.sizes.split(",")]
    for w in (int(x) for x in a.ranks.split(",")):
        print(table(w, a.dtype, measure(w, sizes, a.dtype, a.rounds, a.target_ms / 1e3)), "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
