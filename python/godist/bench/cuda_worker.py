"""What every rank runs with ``--device cuda``: godist and nccl side by side
on CUDA tensors in the same process (see ``cuda.py`` for what is measured).

The harness is the same as the CPU mode's (``worker.RankBench``): a gloo
default group on CPU tensors, never timed, agrees iteration counts and
gathers the numbers; the cells' buffers, input pattern and correctness
check are ``cells.CellData``'s, on this rank's GPU. What differs: the
timed blocks synchronize the device around n ops, the first ``issue_ops``
of them give the CPU time per op, and the DDP step is on a CUDA model.
"""

from __future__ import annotations

import copy
import datetime
import os
import statistics
import time

from .cells import CellData, Variant
from .config import REDUCING, Config, cell_list, human_bytes, scenario_list
from .gpus import gpu_of, share_gpu_env
from .scenarios import linear_stack
from .worker import RankBench, _cpu_seconds, busbw_factor, run_rank


def _device(torch, gpu: int):
    """The device of this rank's tensors (tests on machines without a GPU
    replace it)."""
    return torch.device("cuda", gpu)


class CudaRankBench(RankBench):
    def __init__(self, rank: int, P: int, cfg: Config, store_path: str, q):
        import torch
        import torch.distributed as dist

        n_gpus = torch.cuda.device_count()
        self.gpu = gpu_of(rank, n_gpus)
        # Before any communicator exists, and the same for both backends.
        os.environ.update(share_gpu_env(rank, P, n_gpus, torch.cuda.nccl.version()))
        torch.cuda.set_device(self.gpu)
        self.device = _device(torch, self.gpu)

        import godist  # noqa: F401  (registers the backend)

        self.torch, self.dist = torch, dist
        self.rank, self.P, self.cfg, self.q = rank, P, cfg, q
        self._base_cache = {}
        self.transport = "cuda"
        timeout = datetime.timedelta(seconds=cfg.op_timeout_s)
        t0 = time.perf_counter()
        dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=P, timeout=timeout)
        setup = {"harness gloo init_process_group": time.perf_counter() - t0}
        self.backends = list(cfg.backends)
        self.groups = {}
        for b in self.backends:
            t = time.perf_counter()
            self.groups[b] = dist.new_group(backend=b, timeout=timeout)
            # NCCL makes its communicator at the first collective: count it here.
            x = torch.zeros(1, device=self.device)
            dist.all_reduce(x, group=self.groups[b])
            torch.cuda.synchronize()
            setup[f"new_group({b}) + first all_reduce"] = time.perf_counter() - t
        v = self.gather(list(setup.values()))
        if rank == 0:
            self.send("setup", {"times": {k: float(v[:, i].max()) for i, k in enumerate(setup)},
                                "gpu": torch.cuda.get_device_name(self.gpu),
                                "shared_env": share_gpu_env(0, P, n_gpus, torch.cuda.nccl.version())})

    def sync(self):
        self.torch.cuda.synchronize(self.device)

    # ----- timing -------------------------------------------------------------
    def time_block(self, v: Variant):
        """One timed block: synchronize, line the ranks up (harness), issue n
        ops, note when the first issue_ops returned (CPU time per op),
        synchronize; the block's wall time / n is the time per op."""
        perf = time.perf_counter
        self.sync()
        self.dist.barrier()
        fn, n = v.fn, v.n
        k = min(n, self.cfg.issue_ops)
        c0 = _cpu_seconds()
        t0 = perf()
        for _ in range(k):
            fn()
        t_issue = perf()
        c1 = _cpu_seconds()
        for _ in range(n - k):
            fn()
        self.sync()
        t1 = perf()
        v.times.append((t1 - t0) / n)
        v.issues.append((t_issue - t0) / k)
        v.cpus.append((c1 - c0) / k)

    def calibrate(self, variants):
        """Warm up, then agree on n per variant (MIN over ranks) so a block
        takes about target_s of GPU time."""
        cfg, MIN = self.cfg, self.dist.ReduceOp.MIN
        for v in variants:
            self.sync()
            t = time.perf_counter()
            v.fn()
            self.sync()
            v.est = time.perf_counter() - t
        ws = [0 if v.est > 3 * cfg.target_s else max(1, min(cfg.warmup_max, int(cfg.target_s / max(v.est, 1e-7))))
              for v in variants]
        for v, w in zip(variants, self.agree(ws, MIN)):
            if w:
                self.sync()
                self.dist.barrier()
                t = time.perf_counter()
                for _ in range(w):
                    v.fn()
                self.sync()
                v.est = (time.perf_counter() - t) / w
        ns = [max(1, min(cfg.max_iters, round(cfg.target_s / max(v.est, 1e-7)))) for v in variants]
        for v, n in zip(variants, self.agree(ns, MIN)):
            v.n = n

    def run_cell(self, op: str, dtype: str, nominal: int):
        data = CellData(self.torch, op, dtype, nominal, self.rank, self.P, self._base_cache, device=self.device)
        variants = [Variant(b, self.groups[b], data.fn(self.dist, self.groups[b])) for b in self.backends]
        for v in variants:
            v.issues = []
        self.check(data, variants)
        self.time_cell(variants)
        self.emit(op, dtype, nominal, data.size, data.count, variants)
        del data

    def emit(self, op, dtype, nominal, size, count, variants, repeats=None, per="op"):
        """Gather every rank's numbers; rank 0 sends the parent one row per
        backend (time, issue and CPU time: median over repeats of the mean
        over ranks)."""
        R = repeats or self.cfg.repeats
        nan = float("nan")
        vec = []
        for v in variants:
            ok = v.status == "ok" and len(v.times) == R
            vec += [v.wrong if v.status != "error" else -1, v.n]
            for xs in (v.times, v.issues, v.cpus):
                vec += list(xs) if ok else [nan] * R
        g = self.gather(vec)
        if self.rank != 0:
            return
        k = 2 + 3 * R
        rows = []
        for j, v in enumerate(variants):
            a = g[:, j * k:(j + 1) * k]
            wrong_col = a[:, 0]

            def med(i, how="mean"):
                return statistics.median(float(getattr(a[:, 2 + i * R + r], how)()) for r in range(R))
            row = {"world_size": self.P, "op": op, "variant": v.label, "backend": v.backend, "dtype": dtype,
                   "redop": "sum" if op in REDUCING else "-", "nominal_bytes": nominal, "size_bytes": size,
                   "count": count, "n_iters": int(a[0, 1]), "repeats": R, "status": v.status,
                   "wrong": int(wrong_col.clamp(min=0).sum()) if (wrong_col >= 0).all() else -1,
                   "error": v.error, "transport": "cuda", "ref_backend": "nccl", "per": per}
            if v.status == "ok":
                t = med(0)
                row.update({"time_us": t * 1e6, "time_max_us": med(0, "max") * 1e6, "issue_us_per_op": med(1) * 1e6,
                            "cpu_us_per_op": med(2) * 1e6})
                f = busbw_factor(op, self.P)
                if size and f is not None and t > 0 and per == "op":
                    row["algbw_GBps"] = size / t / 1e9
                    row["busbw_GBps"] = row["algbw_GBps"] * f
            rows.append(row)
        god = next((r for r in rows if r["backend"] == "godist" and r.get("time_us")), None)
        ref = next((r for r in rows if r["backend"] == "nccl" and r.get("time_us")), None)
        if god and ref:
            ratio = ref["time_us"] / god["time_us"]
            issue = god["issue_us_per_op"] / ref["issue_us_per_op"] if ref["issue_us_per_op"] > 0 else None
            for r in rows:
                r["godist_speedup"] = ratio
                r["speedup_vs"] = "native"
                if per == "op" and size <= self.cfg.issue_max_bytes and issue is not None:
                    r["issue_ratio"] = issue
        self.send("cell", rows)

    # ----- the DDP step ----------------------------------------------------------
    def ddp(self):
        """forward + backward + SGD step of a stack of Linear layers on this
        rank's GPU, one DDP model per backend from the same weights; their
        gradients must agree after the first step."""
        torch, cfg = self.torch, self.cfg
        from torch.nn.parallel import DistributedDataParallel as DDP

        base = linear_stack(torch, cfg).to(self.device)
        nparams = sum(p.numel() for p in base.parameters())
        x = torch.randn(cfg.ddp_batch, cfg.ddp_dim, generator=torch.Generator().manual_seed(1234 + self.rank))
        x = x.to(self.device)
        variants, models, raised = [], {}, []
        for b in self.backends:
            try:
                m = DDP(copy.deepcopy(base), device_ids=[self.gpu] if self.device.type == "cuda" else None, process_group=self.groups[b],
                        bucket_cap_mb=cfg.ddp_bucket_mb)
                models[b] = (m, torch.optim.SGD(m.parameters(), lr=cfg.ddp_lr))
                raised.append(0)
            except Exception as e:  # noqa: BLE001 - reported in the row
                v = Variant(b, self.groups[b], None)
                v.error = f"{type(e).__name__}: {str(e).strip()[:160]}"
                raised.append(1)
                variants.append(v)
        for b, r in zip(self.backends, self.agree(raised, self.dist.ReduceOp.MAX)):
            if r and b in models:
                del models[b]
                variants.append(Variant(b, self.groups[b], None))
                variants[-1].error = "raised on another rank"

        def stepper(m, opt):
            def step():
                opt.zero_grad(set_to_none=True)
                m(x).square().mean().backward()
                opt.step()
            return step

        live = [Variant(b, self.groups[b], stepper(*models[b])) for b in self.backends if b in models]
        for v in live:  # first step: DDP builds its buckets; the gradients must agree
            try:
                v.fn()
                v.error = ""
            except Exception as e:  # noqa: BLE001
                v.error = f"{type(e).__name__}: {str(e).strip()[:160]}"
        for v, r in zip(live, self.agree([int(bool(v.error)) for v in live], self.dist.ReduceOp.MAX)):
            if r:
                v.error = v.error or "raised on another rank"
        for v in variants + live:
            v.issues = []
            if v.error:
                v.status = "error"
        live = [v for v in live if v.status == "ok"]
        if len(live) == 2:
            wrong = 0
            ga = [p.grad for p in models[live[0].backend][0].module.parameters()]
            gb = [p.grad for p in models[live[1].backend][0].module.parameters()]
            for a, b in zip(ga, gb):
                tol = 1e-5 * self.P * (a.abs() + b.abs()) + 1e-7 * float(b.abs().max())
                wrong += int((~((a - b).abs() <= tol)).sum())
            live[0].wrong = wrong
        for v in live:
            v.fn()
            v.n = cfg.ddp_steps
        saved = cfg.repeats, cfg.issue_ops
        cfg.repeats, cfg.issue_ops = cfg.ddp_repeats, cfg.ddp_steps
        try:
            for r in range(cfg.ddp_repeats):
                for v in (live if r % 2 == 0 else live[::-1]):
                    self.time_block(v)
        finally:
            cfg.repeats, cfg.issue_ops = saved
        label = (f"{nparams / 1e6:.1f} M params, {cfg.ddp_bucket_mb:g} MB buckets, batch {cfg.ddp_batch}, "
                 "forward+backward+SGD step")
        all_v = sorted(live + variants, key=lambda v: self.backends.index(v.backend))
        for v in all_v:
            v.label = label
        self.emit("ddp_step", "float32", nparams * 4, nparams * 4, nparams, all_v, repeats=cfg.ddp_repeats,
                  per="step")
        del models, base

    def warm_start(self):
        t = self.torch.zeros(2, device=self.device)
        for _ in range(3):
            for b in self.backends:
                for _ in range(20):
                    self.dist.all_reduce(t, group=self.groups[b])
            self.sync()
            self.dist.barrier()

    def run(self):
        cells = cell_list(self.cfg)
        self.note(f"cuda:{self.gpu} {self.torch.cuda.get_device_name(self.gpu)}; {len(cells)} cells, ops "
                  f"{','.join(self.cfg.ops)}; sizes {', '.join(human_bytes(s) for s in self.cfg.sizes)}; backends "
                  f"{', '.join(self.backends)}")
        self.warm_start()
        for op, dtype, nominal in cells:
            self.run_cell(op, dtype, nominal)
        if "ddp" in scenario_list(self.cfg, self.P):
            self.ddp()
        self.sync()
        self.dist.barrier()


def rank_main(rank: int, P: int, cfg: Config, store_path: str, q):
    """Entry point of a spawned rank (``--device cuda``)."""
    run_rank(CudaRankBench, rank, P, cfg, store_path, q)
