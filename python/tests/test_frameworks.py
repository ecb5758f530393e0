"""Frameworks on godist, each checked against the same seeded run on gloo
(or a single-process reference) in the same processes.

* DDP: find_unused_parameters, gradient_as_bucket_view, static_graph,
  no_sync() gradient accumulation, Python comm hooks (a hand-written AVG hook
  through the future API, torch's allreduce_hook and fp16_compress_hook) and
  the built-in C++ hooks.
* FSDP2 (fully_shard): AVG, PREMUL_SUM (set_gradient_divide_factor) and
  SUM (set_force_sum_reduction_for_comms) gradient reduction.
* DTensor on 1-D and 2-D DeviceMeshes of godist groups.
* torch.profiler sees godist collectives by name.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from harness import init, run_world


def _flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params])


class _Spy:
    """Records which GodistProcessGroup methods ran (and their reduce op)."""

    NAMES = ("allreduce", "allreduce_coalesced", "broadcast", "allgather", "all_gather_single",
             "all_gather_single_coalesced", "reduce_scatter", "reduce_scatter_single",
             "reduce_scatter_single_coalesced", "all_to_all_single", "alltoall", "scatter", "gather")

    # torch 2.11-2.12 call the pre-rename names (aliases of the same methods);
    # they are recorded under the canonical name.
    ALIASES = {"_allgather_base": "all_gather_single", "allgather_into_tensor_coalesced": "all_gather_single_coalesced",
               "_reduce_scatter_base": "reduce_scatter_single",
               "reduce_scatter_tensor_coalesced": "reduce_scatter_single_coalesced",
               "alltoall_base": "all_to_all_single"}

    def __enter__(self):
        from godist.process_group import GodistProcessGroup

        self.calls, self._saved = [], {}
        for attr, name in [(n, n) for n in self.NAMES] + list(self.ALIASES.items()):
            if attr not in GodistProcessGroup.__dict__:
                continue  # an old name torch's own ProcessGroup forwards (2.13+)
            orig = GodistProcessGroup.__dict__[attr]
            self._saved[attr] = orig

            def wrapper(pg, *args, _orig=orig, _name=name, **kwargs):
                opts = kwargs.get("opts", args[-1] if args else None)
                red = getattr(opts, "reduceOp", None)
                state = red.__getstate__() if red is not None else None
                self.calls.append((_name, None if state is None else (str(state[0]).split(".")[-1], state[1])))
                return _orig(pg, *args, **kwargs)

            setattr(GodistProcessGroup, attr, wrapper)
        return self

    def __exit__(self, *exc):
        from godist.process_group import GodistProcessGroup

        for name, orig in self._saved.items():
            setattr(GodistProcessGroup, name, orig)

    def ops(self, name):
        return {red for n, red in self.calls if n == name}

    def names(self):
        return {n for n, _ in self.calls}


def _identical_across_ranks(t, group):
    ts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(ts, t, group=group)
    return all(torch.equal(ts[0], q) for q in ts)


# --------------------------------------------------------------------------
# DDP
# --------------------------------------------------------------------------

class Branchy(nn.Module):
    """A trunk and two heads; head b is used only on some steps (and, for
    find_unused_parameters, on different steps on different ranks)."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(12, 32)
        self.mid = nn.Linear(32, 32)
        self.a = nn.Linear(32, 4)
        self.b = nn.Linear(32, 4)

    def forward(self, x, use_b=True):
        h = F.relu(self.mid(F.relu(self.trunk(x))))
        out = self.a(h)
        if use_b:
            out = out + self.b(h)
        return out


def _make_branchy():
    torch.manual_seed(0)
    return Branchy()


def _batch(step, rank, micro=0):
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + micro)
    return torch.randn(8, 12, generator=g), torch.randint(0, 4, (8,), generator=g)


def _avg_hook(group, bucket):
    """A Python comm hook: all_reduce with AVG through the future API."""
    t = bucket.buffer()
    fut = dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def _ddp_train(cfg, pg, rank, steps=6):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = _make_branchy()
    kw = dict(bucket_cap_mb=0.002)  # ~2 KB buckets: several allreduces per step
    if cfg == "find_unused":
        kw["find_unused_parameters"] = True
    elif cfg == "bucket_view":
        kw["gradient_as_bucket_view"] = True
    elif cfg == "static_graph":
        kw["static_graph"] = True
    ddp = DDP(model, process_group=pg, **kw)
    if cfg == "hook_avg":
        ddp.register_comm_hook(pg, _avg_hook)
    elif cfg == "hook_allreduce":
        ddp.register_comm_hook(pg, default_hooks.allreduce_hook)
    elif cfg == "hook_fp16_py":
        ddp.register_comm_hook(pg, default_hooks.fp16_compress_hook)
    elif cfg == "builtin_allreduce":
        ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    elif cfg == "builtin_fp16":
        ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        opt.zero_grad()
        if cfg == "find_unused":
            use_b = (step + rank) % 3 != 0  # unused on some steps, not the same ones on every rank
        elif cfg == "static_graph":
            use_b = False  # b is never used: static_graph must cope with a constantly unused head
        else:
            use_b = True
        if cfg == "no_sync":
            with ddp.no_sync():  # micro-step 0 accumulates locally, no communication
                x, y = _batch(step, rank, 0)
                (F.cross_entropy(ddp(x), y) / 2).backward()
            x, y = _batch(step, rank, 1)
            (F.cross_entropy(ddp(x), y) / 2).backward()
        else:
            x, y = _batch(step, rank)
            F.cross_entropy(ddp(x, use_b), y).backward()
        opt.step()
    return _flat(model.parameters())


def _ddp_worker(rank, n, init_file, cfg):
    gloo = init(rank, n, init_file)
    out = {}
    with _Spy() as spy:
        godist_p = _ddp_train(cfg, dist.group.WORLD, rank)
    out["allreduce_ops"] = spy.ops("allreduce")
    gloo_p = _ddp_train(cfg, gloo, rank)
    out["godist_identical"] = _identical_across_ranks(godist_p, gloo)
    out["gloo_identical"] = _identical_across_ranks(gloo_p, gloo)
    out["max_diff"] = (godist_p - gloo_p).abs().max().item()
    out["moved"] = (godist_p - _flat(_make_branchy().parameters())).abs().max().item()
    return out


DDP_CONFIGS = [
    ("find_unused", 3),
    ("bucket_view", 2),
    ("static_graph", 2),
    ("no_sync", 3),
    ("hook_avg", 2),
    ("hook_allreduce", 3),
    ("hook_fp16_py", 2),
    ("builtin_allreduce", 2),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cfg,n", DDP_CONFIGS, ids=[c for c, _ in DDP_CONFIGS])
def test_ddp_matches_gloo(cfg, n):
    tol = 5e-3 if cfg == "hook_fp16_py" else 1e-5  # fp16 compression rounds differently per summation order
    for r in run_world(_ddp_worker, n, cfg, timeout=150):
        assert r["godist_identical"] and r["gloo_identical"], r
        assert r["moved"] > 1e-3, r
        assert r["max_diff"] < tol, r
        # The gradient buckets reached godist, with AVG where the hook asks for it.
        assert r["allreduce_ops"] == {("AVG" if cfg == "hook_avg" else "SUM", None)}, r


def _builtin_fp16_worker(rank, n, init_file):
    gloo = init(rank, n, init_file)
    gloo_p = _ddp_train("builtin_fp16", gloo, rank)
    godist_p = _ddp_train("builtin_fp16", dist.group.WORLD, rank)
    # The work's future holds what torch's C++ reads (a TensorList), finished
    # or pending, and fails with the op's error.
    t = torch.full((8,), float(rank + 1), dtype=torch.float16)
    done = dist.all_reduce(t, async_op=True)
    done.wait()
    pending = dist.all_reduce(torch.ones(1 << 20, dtype=torch.bfloat16), async_op=True)
    futs = {"done": done.get_future(), "pending": pending.get_future()}
    values = {k: f.wait() for k, f in futs.items()}
    return {"max_diff": (godist_p - gloo_p).abs().max().item(),
            "godist_identical": _identical_across_ranks(godist_p, gloo),
            "moved": (godist_p - _flat(_make_branchy().parameters())).abs().max().item(),
            "done": [v.tolist() for v in values["done"]], "pending": values["pending"][0][:3].tolist()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3])
def test_ddp_builtin_fp16_compress_hook(n):
    """DDP's built-in C++ FP16_COMPRESS hook (which reads its all_reduce's
    future as a C++ TensorList) trains on godist as on gloo."""
    for r in run_world(_builtin_fp16_worker, n, timeout=100):
        assert r["godist_identical"] and r["moved"] > 1e-3 and r["max_diff"] < 5e-3, r
        assert r["done"] == [[n * (n + 1) / 2] * 8], r
        assert r["pending"] == [float(n)] * 3, r


# --------------------------------------------------------------------------
# FSDP2
# --------------------------------------------------------------------------

class Block(nn.Module):
    """A small pre-norm transformer block followed by a classifier head."""

    def __init__(self, d=16, heads=2, ff=32, classes=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.ff2(F.gelu(self.ff1(self.ln2(x))))
        return self.head(x.mean(dim=1))


def _make_block():
    torch.manual_seed(0)
    return Block()


def _fsdp_batch(step, rank):
    g = torch.Generator().manual_seed(500 * step + rank)
    return torch.randn(4, 5, 16, generator=g), torch.randint(0, 4, (4,), generator=g)


FSDP_STEPS = 4


def _fsdp_train(pg, rank, mode, factor):
    """Shard the block (each sub-layer, then the root) over pg and train;
    returns the full parameters (gathered with DTensor.full_tensor)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    model = _make_block()
    mesh = DeviceMesh.from_group(pg, "cpu")
    for m in (model.ff1, model.ff2, model.head):  # attn stays in the root group
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            if mode in ("divide", "divide_sum"):
                m.set_gradient_divide_factor(factor)
            if mode in ("sum", "divide_sum"):
                m.set_force_sum_reduction_for_comms(True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(FSDP_STEPS):
        x, y = _fsdp_batch(step, rank)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])


def _fsdp_reference(n, scale):
    """Single process, full batch: the loss is the global mean times scale
    (n / divide factor), so the gradient is the one FSDP2 reduces."""
    model = _make_block()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(FSDP_STEPS):
        xs, ys = zip(*(_fsdp_batch(step, r) for r in range(n)))
        opt.zero_grad()
        (F.cross_entropy(model(torch.cat(xs)), torch.cat(ys)) * scale).backward()
        opt.step()
    return _flat(model.parameters())


def _fsdp_worker(rank, n, init_file, mode, factor):
    gloo = init(rank, n, init_file)
    with _Spy() as spy:
        godist_p = _fsdp_train(dist.group.WORLD, rank, mode, factor)
    # gloo has no PREMUL_SUM: its oracle for a divide factor is the SUM path
    # (force_sum_reduction_for_comms), which divides after reducing.
    gloo_mode = "divide_sum" if mode == "divide" else mode
    gloo_p = _fsdp_train(gloo, rank, gloo_mode, factor)
    ref = _fsdp_reference(n, n / factor if mode in ("divide", "divide_sum") else 1.0)
    return {
        "godist_identical": _identical_across_ranks(godist_p, gloo),
        "gloo_identical": _identical_across_ranks(gloo_p, gloo),
        "max_diff_gloo": (godist_p - gloo_p).abs().max().item(),
        "max_diff_ref": (godist_p - ref).abs().max().item(),
        "gloo_diff_ref": (gloo_p - ref).abs().max().item(),
        "moved": (godist_p - _flat(_make_block().parameters())).abs().max().item(),
        "names": spy.names(),
        "rs_ops": spy.ops("reduce_scatter_single"),
    }


FSDP_CONFIGS = [
    ("avg", 2, None),      # ReduceOp.AVG reduce-scatter (default for fp32)
    ("avg", 3, None),
    ("divide", 2, 3.0),    # set_gradient_divide_factor -> ReduceOp.PREMUL_SUM(1/3)
    ("sum", 3, None),      # set_force_sum_reduction_for_comms -> ReduceOp.SUM + post-divide
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode,n,factor", FSDP_CONFIGS, ids=[f"{m}-n{n}" for m, n, _ in FSDP_CONFIGS])
def test_fsdp2_matches_gloo(mode, n, factor):
    for r in run_world(_fsdp_worker, n, mode, factor or float(n), timeout=150):
        assert r["godist_identical"] and r["gloo_identical"], r
        assert r["moved"] > 1e-3, r
        assert r["max_diff_gloo"] < 1e-5, r
        assert r["max_diff_ref"] < 1e-5, r
        # FSDP2 reached godist's native all-gather / reduce-scatter with the expected op.
        assert {"all_gather_single", "reduce_scatter_single"} <= r["names"], r
        want = ("PREMUL_SUM", pytest.approx(1 / factor)) if mode == "divide" else (mode.upper(), None)
        assert len(r["rs_ops"]) == 1 and next(iter(r["rs_ops"])) == want, r


# --------------------------------------------------------------------------
# DTensor / DeviceMesh
# --------------------------------------------------------------------------

def _dtensor_checks(mesh, shard_dim_names):
    """Runs the DTensor checks on mesh; returns {check: ok}. Rank 0 holds
    the source data; other ranks pass garbage, so distribute_tensor must
    scatter/broadcast from rank 0."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    rank = dist.get_rank()
    g = torch.Generator().manual_seed(7)
    A = torch.randn(7, 5, generator=g)  # 7 and 5 are uneven over 2 and 3 ranks: padded shards
    B = torch.randn(5, 6, generator=g)
    src_a = A if rank == 0 else torch.full_like(A, float("nan"))
    src_b = B if rank == 0 else torch.full_like(B, float("nan"))
    nd = mesh.ndim
    ok = {}

    def close(x, y, tol=1e-5):
        return x.shape == y.shape and torch.allclose(x, y, atol=tol, rtol=tol)

    def rep():
        return [Replicate()] * nd

    def shard_of(t, dim):
        """This rank's Shard(dim) piece on the last mesh dim (torch.chunk
        semantics, as DTensor uses: 7 rows over 3 ranks are 3, 3, 1)."""
        k, i = mesh.size(nd - 1), mesh.get_local_rank(nd - 1)
        pieces = list(torch.chunk(t, k, dim=dim))
        return pieces[i] if i < len(pieces) else t.narrow(dim, 0, 0)

    # distribute_tensor: Shard(0) on the last mesh dim, Replicate elsewhere.
    p_s0 = [Replicate()] * (nd - 1) + [Shard(0)]
    dA = distribute_tensor(src_a, mesh, p_s0)
    ok["distribute_shard0_local"] = close(dA.to_local(), shard_of(A, 0))
    ok["full_tensor_shard0"] = close(dA.full_tensor(), A)
    # Shard(0) -> Shard(1) (all_to_all), -> Replicate (all_gather), Replicate -> Shard(0) (local).
    p_s1 = [Replicate()] * (nd - 1) + [Shard(1)]
    d1 = dA.redistribute(mesh, p_s1)
    ok["shard0_to_shard1"] = close(d1.to_local(), shard_of(A, 1))
    ok["shard1_to_replicate"] = close(d1.redistribute(mesh, rep()).to_local(), A)
    dR = distribute_tensor(src_a, mesh, rep())
    ok["distribute_replicate"] = close(dR.to_local(), A)
    ok["replicate_to_shard0"] = close(dR.redistribute(mesh, p_s0).full_tensor(), A)
    if nd == 2:
        # Shard over both mesh dims and back.
        d2 = distribute_tensor(src_a, mesh, [Shard(0), Shard(1)])
        ok["2d_shard0_shard1_full"] = close(d2.full_tensor(), A)
        ok["2d_to_shard1_shard0"] = close(d2.redistribute(mesh, [Shard(1), Shard(0)]).full_tensor(), A)
        ok["2d_to_replicate"] = close(d2.redistribute(mesh, rep()).to_local(), A)
    # Partial -> Replicate (all_reduce) and Partial -> Shard(0) (reduce_scatter).
    part = [Replicate()] * (nd - 1) + [Partial()]
    contrib = A * (mesh.get_local_rank(nd - 1) + 1)
    total = A * sum(range(1, mesh.size(nd - 1) + 1))
    dP = DTensor.from_local(contrib, mesh, part)
    ok["partial_to_replicate"] = close(dP.redistribute(mesh, rep()).to_local(), total)
    dP = DTensor.from_local(contrib, mesh, part)
    ok["partial_to_shard0"] = close(dP.redistribute(mesh, p_s0).full_tensor(), total)
    # Matmuls against the single-process result.
    dB = distribute_tensor(src_b, mesh, rep())
    ok["matmul_shard0_x_replicate"] = close((dA @ dB).full_tensor(), A @ B)
    dB0 = distribute_tensor(src_b, mesh, p_s0)
    ok["matmul_shard1_x_shard0"] = close((d1 @ dB0).full_tensor(), A @ B)  # Partial result, all_reduced
    if nd == 2:
        dA2 = distribute_tensor(src_a, mesh, [Shard(0), Shard(1)])
        dB2 = distribute_tensor(src_b, mesh, [Replicate(), Shard(0)])
        ok["2d_matmul"] = close((dA2 @ dB2).full_tensor(), A @ B)
    return ok


def _dtensor_worker(rank, n, init_file, shape):
    from godist.process_group import GodistProcessGroup
    from torch.distributed.device_mesh import init_device_mesh

    init(rank, n, init_file, gloo_group=False)
    names = ("dp", "tp")[-len(shape):]
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    groups = [mesh.get_group(d) for d in range(mesh.ndim)]
    with _Spy() as spy:
        ok = _dtensor_checks(mesh, names)
    return {"ok": ok, "godist_groups": all(isinstance(g, GodistProcessGroup) for g in groups),
            "names": spy.names()}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("shape", [(2,), (3,), (2, 2)], ids=["1d-n2", "1d-n3", "2d-2x2"])
def test_dtensor(shape):
    n = 1
    for s in shape:
        n *= s
    for r in run_world(_dtensor_worker, n, shape, timeout=120):
        assert r["godist_groups"], r
        assert all(r["ok"].values()), {k: v for k, v in r["ok"].items() if not v}
        # DTensor reached godist through both paths: Python (scatter/broadcast)
        # and C++ functional collectives (coalesced all-gather, all_reduce, ...).
        assert {"all_gather_single_coalesced", "allreduce"} <= r["names"], r


# --------------------------------------------------------------------------
# torch.profiler
# --------------------------------------------------------------------------

def _profiler_worker(rank, n, init_file):
    import torch.distributed._functional_collectives as funcol
    from torch.profiler import ProfilerActivity, profile

    gloo = init(rank, n, init_file)
    out = {}
    for name, g in (("godist", dist.group.WORLD), ("gloo", gloo)):
        t = torch.ones(8)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            dist.all_reduce(t, group=g)                                # Python path, synchronous
            dist.all_reduce(t, group=g, async_op=True).wait()          # Python path, asynchronous
            dist.all_gather([torch.empty(8) for _ in range(n)], t, group=g)
            funcol.all_reduce(t, "sum", g).wait()                      # C++ functional collective
        out[name] = {e.key: e.count for e in prof.key_averages()}
    # Outside the profiler nothing is recorded (and nothing breaks).
    dist.all_reduce(torch.ones(2))
    return out


@pytest.mark.timeout(90)
def test_profiler_shows_collectives():
    for r in run_world(_profiler_worker, 2, timeout=60):
        gloo, ours = r["gloo"], r["godist"]
        assert gloo.get("gloo:all_reduce") and gloo.get("gloo:all_gather"), gloo  # what gloo shows, for reference
        assert ours.get("godist:allreduce") == 3, ours
        assert ours.get("godist:allgather") == 1, ours
