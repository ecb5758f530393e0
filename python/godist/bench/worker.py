"""What every rank runs: godist and gloo side by side in the same process.

The default group is gloo (the harness: it agrees iteration counts and
gathers statistics and is never timed); one group per benchmarked backend
over the same ranks is timed, ``new_group(backend="godist")`` and
``new_group(backend="gloo")`` (``Config.backends``: both by default).

For each cell (operation, dtype, size), on every rank, in lock step:

1. correctness: reset the inputs to a rank-dependent pattern, run the op once
   per backend and compare with the expectation computed locally (exact for
   data movement and integers; ``|got - want| <= rtol * sum_r |x_r|`` for
   floating reductions, rtol = 1e-6 * P for float32). Mismatching elements are
   the cell's ``#wrong``. A backend that raises (on every rank) is marked
   unsupported; for gloo's reduce_scatter_tensor the all_reduce + chunk
   fallback is then timed instead, labelled as such;
2. warm-up (at most ``warmup_max`` ops, fewer when one op is slow) and an
   iteration count n per backend so a block takes about ``target_s``, the
   MIN over ranks (a gloo all_reduce on the harness group);
3. ``repeats`` timed blocks per backend, interleaved A-B-B-A-A-B...: a
   barrier on the benchmarked group, then n back-to-back synchronous ops, each
   one time-stamped (p50/p95) and the whole block bracketed by
   ``resource.getrusage`` (CPU time per op, every thread of the process);
4. one all_gather of every rank's numbers; rank 0 turns them into rows (time
   = median over repeats of the mean over ranks) and sends the cell's rows to
   the parent, which prints them and keeps the progress display.

Rank 0's messages go to the parent too, and so do the ``godist`` logger's
records of every rank: the parent prints them, so they do not cut into its
status line.

A cell's buffers, input pattern and ops are in ``cells.py``; the DDP and
inference scenarios, which run after the cells, in ``scenarios.py``.

Nothing here imports torch at module level: the parent sets the environment
(OMP_NUM_THREADS, GODIST_TRANSPORT, ...) before the spawned rank imports it.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import resource
import statistics
import sys
import time
import traceback

from . import scenarios
from .cells import CellData, Variant
from .config import REDUCING, Config, cell_list, human_bytes, scenario_list

RS_FALLBACK = "all_reduce+chunk fallback"


def busbw_factor(op: str, P: int) -> float | None:
    """nccl-tests: busbw = algbw * factor."""
    if op == "all_reduce":
        return 2 * (P - 1) / P
    if op in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"):
        return (P - 1) / P
    if op in ("broadcast", "send_recv"):
        return 1.0
    return None


def error_text(e: BaseException) -> str:
    """How a row names the exception a variant raised: its type and the
    first line of its message, 200 characters at most."""
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _pct(samples, q: float) -> float:
    if not samples:
        return float("nan")
    s = sorted(samples)
    k = (len(s) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class RankBench:
    def __init__(self, rank: int, P: int, cfg: Config, store_path: str, q):
        import torch
        import torch.distributed as dist

        import godist  # noqa: F401  (registers the backend)

        self.torch, self.dist = torch, dist
        self.rank, self.P, self.cfg, self.q = rank, P, cfg, q
        self._base_cache = {}
        timeout = datetime.timedelta(seconds=cfg.op_timeout_s)
        t0 = time.perf_counter()
        dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=P, timeout=timeout)
        t1 = time.perf_counter()
        self.backends = list(cfg.backends)
        self.groups = {}
        setup = {"harness gloo init_process_group": t1 - t0}
        for b in ("gloo", "godist"):
            if b in self.backends:
                t = time.perf_counter()
                self.groups[b] = dist.new_group(backend=b, timeout=timeout)
                setup[f"new_group({b})"] = time.perf_counter() - t
        v = self.gather_setup(setup, self.groups.get("godist"))
        if rank == 0:
            info = {k: float(v[:, i].max()) for i, k in enumerate(setup)}
            if "godist" in self.groups:
                self.send("setup", {"times": info, "godist_transport": self.transport})
                self.note(f"godist transport: {self.transport}")
            else:
                self.send("setup", {"times": info})

    def gather_setup(self, setup: dict, godist_group):
        """Gather every rank's ``setup`` times and the transport godist's
        group picked (self.transport: shm, tcp or mixed; the property exists
        once shared memory is wired in, before that godist is TCP only).
        Returns the gathered rows: setup's values, then the shm flag."""
        shm = None
        if godist_group is not None:
            be = godist_group
            try:
                be = be._get_backend(self.torch.device("cpu"))
            except Exception:  # noqa: BLE001
                pass
            shm = getattr(be, "shared_memory", None)
        v = self.gather(list(setup.values()) + [-1.0 if shm is None else float(bool(shm))])
        flags = {float(x) for x in v[:, -1]}
        self.transport = {frozenset({1.0}): "shm", frozenset({0.0}): "tcp",
                          frozenset({-1.0}): "tcp (no shared_memory property)"}.get(frozenset(flags), "mixed")
        return v

    # ----- harness (gloo default group, never timed) ------------------------
    def send(self, kind, payload):
        self.q.put((kind, self.rank, payload))

    def agree(self, values, op):
        t = self.torch.tensor(values, dtype=self.torch.int64)
        self.dist.all_reduce(t, op=op)
        return [int(x) for x in t]

    def gather(self, values):
        torch = self.torch
        t = torch.tensor(values, dtype=torch.float64)
        out = torch.empty(self.P * t.numel(), dtype=torch.float64)
        self.dist.all_gather_into_tensor(out, t)
        return out.view(self.P, t.numel())

    def note(self, msg: str):
        """A message for the parent to print (rank 0's only)."""
        if self.rank == 0:
            self.send("note", msg)

    # ----- cells --------------------------------------------------------------
    def time_block(self, v: Variant):
        dist, perf = self.dist, time.perf_counter
        dist.barrier(group=v.group)
        fn, n = v.fn, v.n
        ts = [0.0] * (n + 1)
        c0 = _cpu_seconds()
        ts[0] = perf()
        for i in range(n):
            fn()
            ts[i + 1] = perf()
        c1 = _cpu_seconds()
        v.times.append((ts[n] - ts[0]) / n)
        v.cpus.append((c1 - c0) / n)
        v.samples.extend(ts[i + 1] - ts[i] for i in range(n))

    def calibrate(self, variants):
        """Warm up (at least one op unless one op already takes several
        blocks' worth of time), then agree on n per variant: the MIN over
        ranks of target / (time per warm-up op)."""
        cfg, MIN = self.cfg, self.dist.ReduceOp.MIN
        ws = []
        for v in variants:
            if v.est > 3 * cfg.target_s:
                ws.append(0)
            else:
                ws.append(max(1, min(cfg.warmup_max, int(cfg.target_s / max(v.est, 1e-7)))))
        ws = self.agree(ws, MIN)
        for v, w in zip(variants, ws):
            if w:
                self.dist.barrier(group=v.group)
                t = time.perf_counter()
                for _ in range(w):
                    v.fn()
                v.est = (time.perf_counter() - t) / w
        ns = [max(1, min(cfg.max_iters, round(cfg.target_s / max(v.est, 1e-7)))) for v in variants]
        for v, n in zip(variants, self.agree(ns, MIN)):
            v.n = n

    def check(self, data: CellData, variants):
        """Run each variant once on fresh inputs, count wrong elements; a
        variant that raised on any rank is unsupported/errored everywhere."""
        raised = []
        for v in variants:
            data.reset()
            t = time.perf_counter()
            try:
                v.fn()
                v.est = time.perf_counter() - t
                v.wrong = data.mismatches()
                raised.append(0)
            except Exception as e:  # noqa: BLE001 - reported in the row
                v.error = error_text(e)
                raised.append(1)
        self.mark_raised(variants, raised)

    def mark_raised(self, variants, raised):
        """A variant that raised on any rank (``raised``: this rank's 0/1 per
        variant) is an error on every rank."""
        for v, r in zip(variants, self.agree(raised, self.dist.ReduceOp.MAX)):
            if r:
                v.status = "error"
                v.error = v.error or "raised on another rank"

    def time_cell(self, variants):
        """Calibrate the variants that checked out and time ``repeats``
        blocks of each, interleaved A-B-B-A."""
        live = [v for v in variants if v.status == "ok"]
        if live:
            self.calibrate(live)
            for r in range(self.cfg.repeats):
                for v in (live if r % 2 == 0 else live[::-1]):
                    self.time_block(v)

    def run_cell(self, op: str, dtype: str, nominal: int):
        dist, P = self.dist, self.P
        data = CellData(self.torch, op, dtype, nominal, self.rank, P, self._base_cache)
        variants = [Variant(b, self.groups[b], data.fn(dist, self.groups[b])) for b in self.backends]
        self.check(data, variants)
        gloo = next((v for v in variants if v.backend == "gloo"), None)
        if op == "reduce_scatter_tensor" and gloo is not None and gloo.status == "error":
            # gloo without a native reduce_scatter_tensor: report it unsupported
            # and time what users fall back to.
            gloo.status = "unsupported"
            fb = Variant("gloo", self.groups["gloo"], data.fn(dist, self.groups["gloo"], fallback=True), RS_FALLBACK)
            self.check(data, [fb])
            variants.append(fb)
        self.time_cell(variants)
        self.emit(op, "-" if op == "barrier" else dtype, nominal, data.size, data.count, variants,
                  scale=0.5 if op == "send_recv" else 1.0)
        del data

    def emit(self, op, dtype, nominal, size, count, variants, scale=1.0, extra=None, repeats=None):
        """Gather every rank's numbers; rank 0 sends the parent one row per
        variant, all in one message."""
        R = repeats or self.cfg.repeats
        vec = []
        for v in variants:
            ok = v.status == "ok" and len(v.times) == R
            times = v.times if ok else [float("nan")] * R
            cpus = v.cpus if ok else [float("nan")] * R
            vec += [v.wrong if v.status != "error" else -1, v.n, *times, *cpus,
                    _pct(v.samples, 0.5), _pct(v.samples, 0.95)]
        g = self.gather(vec)
        if self.rank != 0:
            return
        k = 4 + 2 * R
        rows = []
        for j, v in enumerate(variants):
            a = g[:, j * k:(j + 1) * k]
            wrong_col = a[:, 0]
            t_mean = [float(a[:, 2 + i].mean()) * scale for i in range(R)]
            t_max = [float(a[:, 2 + i].max()) * scale for i in range(R)]
            cpu = [float(a[:, 2 + R + i].mean()) * scale for i in range(R)]
            row = {
                "world_size": self.P, "op": op, "variant": v.label, "backend": v.backend, "dtype": dtype,
                "redop": "sum" if op in REDUCING else "-", "nominal_bytes": nominal, "size_bytes": size,
                "count": count, "n_iters": int(a[0, 1]), "repeats": R,
                "status": v.status if v.status != "ok" else "ok",
                "wrong": int(wrong_col.clamp(min=0).sum()) if (wrong_col >= 0).all() else -1,
                "error": v.error, "transport": self.transport_of(v),
            }
            if v.status == "ok":
                t = statistics.median(t_mean)
                row.update({
                    "time_us": t * 1e6, "time_max_us": statistics.median(t_max) * 1e6,
                    "p50_us": float(a[:, 2 + 2 * R].mean()) * scale * 1e6,
                    "p95_us": float(a[:, 3 + 2 * R].mean()) * scale * 1e6,
                    "cpu_us_per_op": statistics.median(cpu) * 1e6,
                })
                f = busbw_factor(op, self.P)
                if size and f is not None and t > 0:
                    row["algbw_GBps"] = size / t / 1e9
                    row["busbw_GBps"] = row["algbw_GBps"] * f
            if extra:
                row.update(extra)
            rows.append(row)
        self.add_ratios(rows)
        self.send("cell", rows)

    def transport_of(self, v: Variant) -> str:
        """What a variant's row names as its transport."""
        return self.transport if v.backend == "godist" else "tcp"

    def add_ratios(self, rows):
        """godist's speed relative to gloo's native op, else to the
        fallback, in every row of the cell (godist_speedup, speedup_vs)."""
        god = next((r for r in rows if r["backend"] == "godist"), None)
        ref = next((r for r in rows if r["backend"] == "gloo" and r["status"] == "ok"), None)
        if god and ref and god.get("time_us") and ref.get("time_us"):
            ratio = ref["time_us"] / god["time_us"]
            for r in rows:
                r["godist_speedup"] = ratio
                r["speedup_vs"] = ref["variant"]

    # ----- driver -----------------------------------------------------------------
    def warm_start(self):
        """Untimed small all_reduces on every benchmarked group, alternating,
        for about one block's time each: the first cell then does not pay
        for first-use costs (thread start-up, page faults, caches) that
        the per-cell warm-up is too short to absorb."""
        t = self.torch.zeros(2)
        deadline = time.perf_counter() + 2 * self.cfg.target_s
        go = 1
        while go:
            for b in self.backends:
                for _ in range(20):
                    self.dist.all_reduce(t, group=self.groups[b])
            go = self.agree([int(time.perf_counter() < deadline)], self.dist.ReduceOp.MIN)[0]

    def run(self):
        cells = cell_list(self.cfg)
        self.note(f"{len(cells)} cells, ops {','.join(self.cfg.ops)}; sizes "
                  f"{', '.join(human_bytes(s) for s in self.cfg.sizes)}; backends {', '.join(self.backends)}")
        self.warm_start()
        for op, dtype, nominal in cells:
            self.run_cell(op, dtype, nominal)
        for name in scenario_list(self.cfg, self.P):
            if name == "ddp":
                scenarios.ddp(self)
            elif name == "infer":
                scenarios.infer(self)
            elif name == "async":
                scenarios.infer(self, async_op=True)
            elif name == "recreate":
                scenarios.recreate(self)
        self.dist.barrier()


class _ToParent(logging.Handler):
    """Sends the ``godist`` logger's records to the parent, which prints
    them (configuring this handler before godist loads keeps godist from
    printing to stderr itself). Records that come once the queue is closed
    (godist's last words at exit) go to stderr."""

    def __init__(self, rank, q):
        super().__init__()
        self.rank, self.q = rank, q
        self.setFormatter(logging.Formatter("%(asctime)s godist %(levelname)s %(message)s"))

    def emit(self, record):
        try:
            text = self.format(record)
        except Exception:  # noqa: BLE001 - logging must not fail the rank
            self.handleError(record)
            return
        try:
            self.q.put(("log", self.rank, text))
        except Exception:  # noqa: BLE001 - the queue is closed: the rank is exiting
            sys.stderr.write(text + "\n")
            sys.stderr.flush()


def rank_main(rank: int, P: int, cfg: Config, store_path: str, q):
    """Entry point of a spawned rank."""
    run_rank(RankBench, rank, P, cfg, store_path, q)


def run_rank(bench_class, rank: int, P: int, cfg: Config, store_path: str, q):
    """Run one spawned rank's ``bench_class`` (RankBench or a subclass);
    its rows, its end and any traceback go to the parent over ``q``."""
    ok = False
    try:
        logger = logging.getLogger("godist")
        logger.addHandler(_ToParent(rank, q))
        logger.propagate = False
        import torch

        torch.set_num_threads(1)
        b = bench_class(rank, P, cfg, store_path, q)
        b.run()
        ok = True
        q.put(("done", rank, None))
    except BaseException:  # noqa: BLE001 - everything goes to the parent
        q.put(("error", rank, traceback.format_exc()))
    finally:
        if ok:
            try:
                import torch.distributed as dist

                dist.destroy_process_group()
            except Exception:
                pass
        q.close()
        q.join_thread()
        if not ok:
            sys.stderr.flush()
            os._exit(1)  # peers may be stuck in a collective with us; do not wait for them
