"""The benchmark's scenarios, run by every rank after the cells: a DDP
training step and loops of small all_reduces, godist and gloo side by side,
or the one benchmarked backend alone (``rb`` is the rank's RankBench: its
groups, backends, config, timing and rows)."""

from __future__ import annotations

import copy
import resource

from .cells import CellData, Variant

def linear_stack(torch, cfg):
    """The DDP scenarios' model: ``cfg.ddp_layers`` Linear layers of
    ``cfg.ddp_dim`` with a ReLU between each two, initialized from seed 0."""
    nn = torch.nn
    torch.manual_seed(0)
    layers = []
    for i in range(cfg.ddp_layers):
        layers.append(nn.Linear(cfg.ddp_dim, cfg.ddp_dim))
        if i + 1 < cfg.ddp_layers:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def ddp(rb):
    """The DDP step: forward and backward of a stack of Linear layers (about
    25 M float32 parameters in 25 MB buckets by default; --smoke makes it
    tiny), one DDP model per backend from the same initial weights.

    Both backends' gradients must agree; a backend benchmarked alone is
    checked against the harness instead: the same model's local gradients
    averaged over the ranks with an all_reduce on the default group."""
    torch, cfg, P = rb.torch, rb.cfg, rb.P
    from torch.nn.parallel import DistributedDataParallel as DDP

    base = linear_stack(torch, cfg)
    nparams = sum(p.numel() for p in base.parameters())
    models = {b: DDP(copy.deepcopy(base), process_group=rb.groups[b], bucket_cap_mb=cfg.ddp_bucket_mb)
              for b in rb.backends}
    if len(rb.backends) > 1:
        del base
    x = torch.randn(cfg.ddp_batch, cfg.ddp_dim, generator=torch.Generator().manual_seed(1234 + rb.rank))

    def stepper(m):
        def step():
            for p in m.parameters():
                p.grad = None
            m(x).square().mean().backward()
        return step

    variants = [Variant(b, rb.groups[b], stepper(models[b])) for b in rb.backends]
    # Warm-up, two steps each: DDP builds its buckets on the first step and
    # rebuilds them in the order the gradients came on the second (new
    # bucket tensors, fresh pages); both ran 2-3.5x slower than later ones.
    for v in variants:
        for _ in range(2):
            v.fn()
    for v in variants:
        v.n = cfg.ddp_steps
    # Blocks of several steps: the first step after the other backend's
    # block runs slower (caches, sleeping threads), and training runs
    # step after step on one backend.
    # Page faults per step, counted around each backend's blocks: a backend
    # whose steps fault their gradients in again pays for the allocator,
    # not for its collectives (see MALLOC_ENV in config.py).
    faults = {v.backend: 0 for v in variants}
    for r in range(cfg.ddp_repeats):
        for v in (variants if r % 2 == 0 else variants[::-1]):
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            rb.time_block(v)
            faults[v.backend] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    per_step = rb.agree([faults[v.backend] // (cfg.ddp_repeats * cfg.ddp_steps) for v in variants],
                        rb.dist.ReduceOp.MAX)
    # Same parameters, same input: both backends must give the same gradients.
    if len(rb.backends) > 1:
        ref = [p.grad for p in models["gloo"].module.parameters()]
    else:
        ref = _harness_gradients(rb, base, x)
        del base
    wrong = 0
    for pa, gb in zip(models[rb.backends[0]].module.parameters(), ref):
        ga = pa.grad
        tol = 1e-5 * P * (ga.abs() + gb.abs()) + 1e-7 * float(gb.abs().max())
        wrong += int((~((ga - gb).abs() <= tol)).sum())
    variants[0].wrong = wrong
    label = (f"{nparams / 1e6:.1f} M params, {cfg.ddp_bucket_mb:g} MB buckets, batch {cfg.ddp_batch}, "
             "forward+backward")
    for v, f in zip(variants, per_step):
        v.label = f"{label}; {f} page faults per step (most on one rank)"
    rb.emit("ddp_step", "float32", nparams * 4, nparams * 4, nparams, variants, repeats=cfg.ddp_repeats)
    del models


def _harness_gradients(rb, model, x):
    """What DDP's gradients must be: this rank's local gradients of the
    model on x, averaged over the ranks on the harness's default group."""
    for p in model.parameters():
        p.grad = None
    model(x).square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    for g in grads:
        rb.dist.all_reduce(g)
        g.div_(rb.P)
    return grads


def infer(rb, async_op: bool = False):
    """1000 all_reduces of 4-64 KiB, one after the other: synchronous
    (infer_loop), or each issued with async_op=True and waited for at
    once (async_loop: the path of code that issues async ops)."""
    torch, dist, cfg = rb.torch, rb.dist, rb.cfg
    sizes = [k * 1024 for k in cfg.infer_kib]
    bufs = {b: [torch.empty(s // 4, dtype=torch.float32) for s in sizes] for b in rb.backends}
    wrong = {b: 0 for b in rb.backends}
    for b in rb.backends:  # correctness, one of each size
        for s, t in zip(sizes, bufs[b]):
            d = CellData(torch, "all_reduce", "float32", s, rb.rank, rb.P, rb._base_cache)
            t.copy_(d.buf)  # x_r
            if async_op:
                dist.all_reduce(t, group=rb.groups[b], async_op=True).wait()
            else:
                dist.all_reduce(t, group=rb.groups[b])
            d.buf.copy_(t)
            wrong[b] += d.mismatches()

    def looper(b):
        ts, k = bufs[b], len(sizes)
        g = rb.groups[b]
        counter = [0]

        def one():
            dist.all_reduce(ts[counter[0] % k], group=g)
            counter[0] += 1

        def one_async():
            dist.all_reduce(ts[counter[0] % k], group=g, async_op=True).wait()
            counter[0] += 1
        return one_async if async_op else one

    variants = [Variant(b, rb.groups[b], looper(b)) for b in rb.backends]
    half = max(1, cfg.infer_iters // 2)
    what = "all_reduce(async_op=True).wait()" if async_op else "all_reduce"
    for v in variants:
        v.n = half
        v.wrong = wrong[v.backend]
        v.label = f"{2 * half} x {what} {cfg.infer_kib[0]}-{cfg.infer_kib[-1]} KiB"
    # A-B-B-A: two half-loops per backend make the 1000 ops.
    saved = rb.cfg.repeats
    rb.cfg.repeats = 2
    try:
        for order in (variants, variants[::-1]):
            for v in order:
                rb.time_block(v)
        mean = sum(sizes) // len(sizes)
        rb.emit("async_loop" if async_op else "infer_loop", "float32", max(sizes), mean, mean // 4, variants)
    finally:
        rb.cfg.repeats = saved


def recreate(rb):
    """A membership change as torchft makes it: a new group of every rank
    on a fresh PrefixStore of one torch TCPStore (rank 0 hosts it), then
    its first all_reduce (the time of both is one iteration), then an
    untimed barrier on the harness group and abort. ``godist.GodistProcessGroup``
    against ``dist.ProcessGroupGloo``, A-B-B-A, ``cfg.recreate_iters`` per
    block; the label gives the median of creation alone."""
    import datetime
    import statistics
    import time

    import godist

    torch, dist, cfg, rank, P = rb.torch, rb.dist, rb.cfg, rb.rank, rb.P
    timeout = datetime.timedelta(seconds=cfg.op_timeout_s)
    server = dist.TCPStore("127.0.0.1", 0, P, True, timeout=timeout, wait_for_workers=False) if rank == 0 else None
    port = rb.agree([server.port if server else 0], dist.ReduceOp.MAX)[0]
    store = server or dist.TCPStore("127.0.0.1", port, P, False, timeout=timeout)
    makers = {"godist": godist.GodistProcessGroup, "gloo": dist.ProcessGroupGloo}
    t = torch.empty(4)
    made = [0]

    def cycle(v, creation):
        made[0] += 1
        ps = dist.PrefixStore(f"recreate/{v.backend}/{made[0]}", store)
        dist.barrier()
        t0 = time.perf_counter()
        pg = makers[v.backend](ps, rank, P, timeout)
        t1 = time.perf_counter()
        t.fill_(1.0)
        pg.allreduce([t]).wait()
        t2 = time.perf_counter()
        v.wrong += int((t != P).sum())
        dist.barrier()  # no peer still in the op when this rank aborts
        pg.abort()
        creation.append(t1 - t0)
        return t2 - t0

    variants = [Variant(b, None, None) for b in rb.backends]
    created = {b: [] for b in rb.backends}
    for v in variants:  # warm-up: imports, first connections, the interface choice
        cycle(v, [])
    for r in range(cfg.repeats):
        for v in (variants if r % 2 == 0 else variants[::-1]):
            c0 = time.process_time()
            ts = [cycle(v, created[v.backend]) for _ in range(cfg.recreate_iters)]
            v.times.append(statistics.median(ts))
            v.cpus.append((time.process_time() - c0) / len(ts))
            v.samples.extend(ts)
            v.n = len(ts)
    for v in variants:
        v.label = (f"new group on a fresh PrefixStore + first all_reduce; creation alone "
                   f"{statistics.median(created[v.backend]) * 1e3:.2f} ms (rank 0's median)")
    rb.emit("recreate", "float32", 16, 16, 4, variants)
    del store, server
