"""Soak test: 4 ranks run every op for --duration seconds, recreating groups,
checking every result, and sampling RSS, fds, threads, goroutines and shm
files; the samples go to soak.csv/.md/.png in --out and must stay flat after
the warm-up. See docs/RELIABILITY.md.

    python tools/soak.py --duration 3600 --out docs/soak
"""

from __future__ import annotations

import argparse
import csv
import datetime
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time
import traceback

WORLD = 4
SUB = [0, 1, 2]
SIZES = [8, 64, 1024, 16 << 10, 256 << 10, 1 << 20, 8 << 20]  # bytes
METRICS = ["rss_kib", "fds", "threads", "goroutines", "shm_files", "shm_maps"]
# (absolute, relative) growth allowed from the baseline to the last sample.
BOUNDS = {"rss_kib": (50 << 10, 0.10), "fds": (4, 0), "threads": (4, 0), "goroutines": (20, 0), "shm_files": (0, 0),
          "shm_maps": (0, 0)}


def _rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


class ShmSeen:
    """The /dev/shm/godist-* files this process has opened or mapped, kept so
    that one left behind still counts; other processes' files do not."""

    def __init__(self):
        self.names, self.mapped = set(), 0

    def scan(self):
        paths, mapped = set(), set()
        with open("/proc/self/maps") as f:
            for p in (line.rstrip("\n").split(None, 5) for line in f):
                if len(p) == 6 and p[5].startswith("/dev/shm/godist-"):
                    paths.add(p[5].replace(" (deleted)", ""))
                    mapped.add(p[5])
        for fd in os.listdir("/proc/self/fd"):
            try:
                paths.add(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        for p in paths:
            if p.startswith("/dev/shm/godist-"):
                self.names.add(os.path.basename(p))
        self.mapped = len(mapped)
        # Probe files (checking that peers share /dev/shm) are never mapped.
        prefix = f"godist-probe-{os.getpid()}-"
        self.names.update(n for n in os.listdir("/dev/shm") if n.startswith(prefix))

    def count(self):
        self.scan()
        return sum(1 for n in self.names if os.path.exists(os.path.join("/dev/shm", n)))


def sample(shm):
    from godist import runtime_stats

    return {"rss_kib": _rss_kib(), "fds": len(os.listdir("/proc/self/fd")),
            "threads": len(os.listdir("/proc/self/task")), "goroutines": runtime_stats()["goroutines"],
            "shm_files": shm.count(), "shm_maps": shm.mapped}


class Checker:
    def __init__(self, rank):
        self.rank, self.checked, self.wrong = rank, 0, []

    def eq(self, what, got, want):
        self.checked += 1
        if not got.equal(want) and len(self.wrong) < 20:
            self.wrong.append(f"rank {self.rank}: {what}: wrong result")


def run_round(rank, size, rnd, sub, chk):
    import torch
    import torch.distributed as dist

    W = WORLD
    n = max(2, size // 4)
    chunk = max(1, n // W)
    base = torch.arange(n, dtype=torch.float32).remainder_(97)
    based = torch.arange(chunk * W, dtype=torch.float32).remainder_(97)
    src = rnd % W
    tag = f"{size}B"
    flip = [False]

    def run(call):  # alternate sync and async_op=True
        flip[0] = not flip[0]
        w = call(not flip[0])
        if w is not None:
            w.wait()

    for op, x, want in [
        (dist.ReduceOp.SUM, base + rank, base * W + 6),
        (dist.ReduceOp.MAX, base + rank, base + 3),
        (dist.ReduceOp.MIN, base + rank, base.clone()),
        (dist.ReduceOp.AVG, base + rank, base + 1.5),
        (dist.ReduceOp.PRODUCT, 1 + (base + rank).remainder(2),
         torch.stack([1 + (base + j).remainder(2) for j in range(W)]).prod(0)),
    ]:
        run(lambda a, x=x, op=op: dist.all_reduce(x, op=op, async_op=a))
        chk.eq(f"all_reduce {op} {tag}", x, want)

    x = base + rank if rank == src else torch.zeros(n)
    run(lambda a: dist.broadcast(x, src, async_op=a))
    chk.eq(f"broadcast {tag}", x, base + src)

    out = torch.empty(n * W)
    run(lambda a: dist.all_gather_into_tensor(out, base + rank, async_op=a))
    chk.eq(f"all_gather_into_tensor {tag}", out, torch.cat([base + j for j in range(W)]))

    outs = [torch.empty(n) for _ in range(W)]
    run(lambda a: dist.all_gather(outs, base + rank, async_op=a))
    chk.eq(f"all_gather {tag}", torch.cat(outs), torch.cat([base + j for j in range(W)]))

    o = torch.empty(chunk)
    run(lambda a: dist.reduce_scatter_tensor(o, based + rank, async_op=a))
    chk.eq(f"reduce_scatter_tensor {tag}", o, based[rank * chunk:(rank + 1) * chunk] * W + 6)

    o = torch.empty(chunk * W)
    run(lambda a: dist.all_to_all_single(o, based + 1000 * rank, async_op=a))
    chk.eq(f"all_to_all_single {tag}", o,
           torch.cat([based[rank * chunk:(rank + 1) * chunk] + 1000 * j for j in range(W)]))

    x = base + rank
    run(lambda a: dist.reduce(x, src, async_op=a))
    if rank == src:
        chk.eq(f"reduce {tag}", x, base * W + 6)

    gl = [torch.empty(n) for _ in range(W)] if rank == src else None
    run(lambda a: dist.gather(base + rank, gl, dst=src, async_op=a))
    if rank == src:
        chk.eq(f"gather {tag}", torch.cat(gl), torch.cat([base + j for j in range(W)]))

    o = torch.empty(n)
    sl = [base + 10 * j for j in range(W)] if rank == src else None
    run(lambda a: dist.scatter(o, sl, src=src, async_op=a))
    chk.eq(f"scatter {tag}", o, base + 10 * rank)

    run(lambda a: dist.barrier(async_op=a))

    nxt, prv = (rank + 1) % W, (rank - 1) % W
    r = torch.empty(n)
    if rank % 2 == 0:
        dist.send(base + rank, nxt)
        dist.recv(r, prv)
    else:
        dist.recv(r, prv)
        dist.send(base + rank, nxt)
    chk.eq(f"send/recv {tag}", r, base + prv)
    r = torch.empty(n)
    ws = [dist.irecv(r, prv), dist.isend(base + rank, nxt)]
    for w in ws:
        w.wait()
    chk.eq(f"isend/irecv {tag}", r, base + prv)

    if sub is not None:
        G = len(SUB)
        x = base + rank
        run(lambda a: dist.all_reduce(x, group=sub, async_op=a))
        chk.eq(f"sub all_reduce {tag}", x, base * G + sum(SUB))
        x = base + rank if rank == SUB[0] else torch.zeros(n)
        run(lambda a: dist.broadcast(x, SUB[0], group=sub, async_op=a))
        chk.eq(f"sub broadcast {tag}", x, base + SUB[0])
        out = torch.empty(n * G)
        run(lambda a: dist.all_gather_into_tensor(out, base + rank, group=sub, async_op=a))
        chk.eq(f"sub all_gather_into_tensor {tag}", out, torch.cat([base + j for j in SUB]))


def rank_main(rank, args, tmp, q):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist

    import godist  # noqa: F401

    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=args.op_timeout)
    gen = [0]

    def init_world():
        gen[0] += 1
        dist.init_process_group("godist", init_method=f"file://{tmp}/store-{gen[0]}", rank=rank,
                                world_size=WORLD, timeout=timeout)

    def new_sub():
        g = dist.new_group(SUB, backend="godist", timeout=timeout)
        return g if rank in SUB else None

    init_world()
    sub = new_sub()
    chk, shm, samples = Checker(rank), ShmSeen(), []
    t0 = time.monotonic()
    next_sample, next_recreate, recreations, rnd = 0.0, args.recreate_every, [0, 0], 0
    while True:
        c0, w0 = time.process_time(), time.monotonic()
        run_round(rank, SIZES[rnd % len(SIZES)], rnd, sub, chk)
        rnd += 1
        cpu, wall = time.process_time() - c0, time.monotonic() - w0
        now = time.monotonic() - t0
        ctl = torch.tensor([int(cpu * 1000), 0, 0, 0, 0], dtype=torch.int64)
        if rank == 0:  # rank 0's clock decides for everyone
            ctl[1] = now >= next_sample
            ctl[2] = now >= next_recreate
            ctl[3] = now >= args.duration
            ctl[4] = int(now * 1000)
        dist.all_reduce(ctl, op=dist.ReduceOp.MAX)
        cpu_max, do_sample, do_recreate, stop, now_ms = (int(v) for v in ctl)
        now = now_ms / 1000
        # WORLD ranks used up to cpu_max each in `wall`: stretch the round
        # so that they average at most args.pace cores.
        if not stop:
            time.sleep(max(0.0, WORLD * cpu_max / 1000 / args.pace - wall))
        if do_recreate:
            shm.scan()
            if sub is not None:
                dist.destroy_process_group(sub)
            world_too = recreations[0] % 2 == 1
            if world_too:
                dist.destroy_process_group()
                init_world()
                recreations[1] += 1
            sub = new_sub()
            if sub is not None:  # a child opens its arena behind its first op
                dist.barrier(group=sub)
            recreations[0] += 1
            next_recreate += args.recreate_every
        if do_sample or stop:
            dist.barrier()
            s = sample(shm)
            s["t_s"] = round(now, 1)
            s["rank"] = rank
            s["round"] = rnd
            got = [None] * WORLD if rank == 0 else None
            dist.gather_object(s, got, dst=0)
            if rank == 0:
                samples.extend(got)
                print(f"soak: t={now:.0f}s round {rnd}: " + "; ".join(
                    f"{m} " + "/".join(str(g[m]) for g in got) for m in METRICS), flush=True)
            while next_sample <= now:
                next_sample += args.sample_every
        if stop:
            break
    res = [None] * WORLD if rank == 0 else None
    dist.gather_object((chk.checked, chk.wrong), res, dst=0)
    dist.destroy_process_group()
    if rank == 0:
        q.put(("done", rank, {"samples": samples, "checked": sum(c for c, _ in res),
                              "wrong": [w for _, ws in res for w in ws], "rounds": rnd,
                              "recreations": recreations[0], "world_recreations": recreations[1]}))
    else:
        q.put(("done", rank, None))


def _child(rank, args, tmp, q):
    try:
        rank_main(rank, args, tmp, q)
    except BaseException:  # noqa: BLE001 - the parent reports it
        q.put(("error", rank, traceback.format_exc()))


def flatness(samples, warmup):
    """The reasons the metrics are not flat (empty when they are)."""
    bad = []
    for rank in range(WORLD):
        mine = sorted((s for s in samples if s["rank"] == rank), key=lambda s: s["t_s"])
        after = [s for s in mine if s["t_s"] >= warmup]
        if len(after) < 2:
            bad.append(f"rank {rank}: fewer than 2 samples after the {warmup:.0f} s warm-up")
            continue
        b, last = after[0], after[-1]
        for m in METRICS:
            limit = b[m] + max(BOUNDS[m][0], BOUNDS[m][1] * b[m])
            if last[m] > limit:
                bad.append(f"rank {rank}: {m} grew from {b[m]} at {b['t_s']} s to {last[m]} at {last['t_s']} s "
                           f"(bound {limit:g})")
    return bad


def write_outputs(out, res, args, warmup, bad):
    os.makedirs(out, exist_ok=True)
    samples = sorted(res["samples"], key=lambda s: (s["t_s"], s["rank"]))
    with open(os.path.join(out, "soak.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["t_s", "rank", "round"] + METRICS, extrasaction="ignore")
        w.writeheader()
        w.writerows(samples)
    times = sorted({s["t_s"] for s in samples})

    def rng(t, m, scale=1):
        vs = [s[m] for s in samples if s["t_s"] == t]
        lo, hi = (f"{v / scale:.1f}" if scale != 1 else str(v) for v in (min(vs), max(vs)))
        return lo if lo == hi else f"{lo}–{hi}"

    lines = [f"Soak: {WORLD} ranks, {args.duration:g} s, {res['rounds']} rounds, {res['checked']} results checked, "
             f"{len(res['wrong'])} wrong; groups recreated {res['recreations']} times (the world group "
             f"{res['world_recreations']} of them); warm-up {warmup:.0f} s; "
             + ("flat." if not bad else "NOT flat: " + "; ".join(bad)), "",
             "Per sample, the range over the ranks:", "",
             "| t (s) | RSS (MiB) | fds | threads | goroutines | shm files | shm maps |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for t in times:
        lines.append(f"| {t:g} | {rng(t, 'rss_kib', 1024)} | {rng(t, 'fds')} | {rng(t, 'threads')} | "
                     f"{rng(t, 'goroutines')} | {rng(t, 'shm_files')} | {rng(t, 'shm_maps')} |")
    with open(os.path.join(out, "soak.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("soak: matplotlib is not installed: no plot")
        return
    fig, axes = plt.subplots(len(METRICS), 1, figsize=(8, 2 * len(METRICS)), sharex=True)
    for ax, m in zip(axes, METRICS):
        for rank in range(WORLD):
            mine = [s for s in samples if s["rank"] == rank]
            scale = 1024 if m == "rss_kib" else 1
            ax.plot([s["t_s"] for s in mine], [s[m] / scale for s in mine], label=f"rank {rank}")
        ax.set_ylabel("RSS MiB" if m == "rss_kib" else m)
        ax.axvline(warmup, color="grey", linestyle=":")
    axes[0].legend(loc="upper left", fontsize="small", ncol=WORLD)
    axes[-1].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "soak.png"), dpi=80)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=3600, help="seconds to run (default 3600)")
    p.add_argument("--sample-every", type=float, default=60, help="seconds between samples (default 60)")
    p.add_argument("--recreate-every", type=float, default=120, help="seconds between group recreations")
    p.add_argument("--warmup", type=float, default=120, help="seconds before the baseline (at most duration/3)")
    p.add_argument("--pace", type=float, default=0.5, help="average CPU cores all ranks may use (default 0.5)")
    p.add_argument("--op-timeout", type=float, default=300, help="timeout of every op, seconds")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "soak"))
    args = p.parse_args(argv)
    warmup = min(args.warmup, args.duration / 3)
    # A fixed mmap threshold hands freed multi-MiB tensors back to the OS:
    # glibc's dynamic one keeps them, and RSS would measure the allocator.
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(256 << 10))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="godist-soak-") as tmp:
        procs = [ctx.Process(target=_child, args=(r, args, tmp, q), daemon=True) for r in range(WORLD)]
        for pr in procs:
            pr.start()
        deadline = time.monotonic() + args.duration + max(300, 2 * args.op_timeout)
        done, res, err = set(), None, None
        while len(done) < WORLD and err is None and time.monotonic() < deadline:
            try:
                kind, rank, val = q.get(timeout=1)
            except queue.Empty:
                if any(pr.exitcode not in (None, 0) for pr in procs):
                    err = "a rank died: exit codes " + str([pr.exitcode for pr in procs])
                continue
            if kind == "error":
                err = f"rank {rank} failed:\n{val}"
            else:
                done.add(rank)
                res = val if rank == 0 else res
        if err is None and len(done) < WORLD:
            err = f"ranks {sorted(set(range(WORLD)) - done)} did not finish in time"
        for pr in procs:
            pr.join(10 if err is None else 0.1)
            if pr.is_alive():
                pr.kill()
                pr.join(5)
    if err is not None:
        print("soak: FAILED: " + err, file=sys.stderr)
        return 1
    bad = flatness(res["samples"], warmup)
    write_outputs(args.out, res, args, warmup, bad)
    print(f"soak: {res['rounds']} rounds, {res['checked']} results checked, {len(res['wrong'])} wrong, "
          f"{res['recreations']} recreations ({res['world_recreations']} of the world group), "
          f"{len(res['samples']) // WORLD} samples")
    for w in res["wrong"]:
        print("soak: " + w)
    for b in bad:
        print("soak: not flat: " + b)
    ok = not bad and not res["wrong"]
    print("soak: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
