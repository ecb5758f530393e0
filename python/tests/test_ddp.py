"""DDP on godist: the same seeded multi-rank training run on godist and on
gloo ends with parameters equal within float tolerance, and bitwise equal
across ranks within each backend."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from harness import init, run_world


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))


def train(model, pg, rank, steps=40, **ddp_kw):
    ddp = DDP(model, process_group=pg, bucket_cap_mb=0.01, **ddp_kw)  # small buckets: several allreduces per step
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(16, 20, generator=g)
        y = torch.randint(0, 3, (16,), generator=g)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def ddp_worker(rank, n, init_file, kw):
    gloo = init(rank, n, init_file)
    godist_params = train(make_model(), dist.group.WORLD, rank, **kw)
    gloo_params = train(make_model(), gloo, rank, **kw)
    out = {}
    for name, p in (("godist", godist_params), ("gloo", gloo_params)):
        ps = [torch.empty_like(p) for _ in range(n)]
        dist.all_gather(ps, p, group=gloo)
        out[name + "_identical"] = all(torch.equal(ps[0], q) for q in ps)
    out["max_diff"] = (godist_params - gloo_params).abs().max().item()
    out["moved"] = (godist_params - torch.cat([p.detach().reshape(-1) for p in make_model().parameters()])).abs().max().item()
    return out


def check_trained_like_gloo(results):
    for r in results:
        assert r["godist_identical"] and r["gloo_identical"], r
        assert r["moved"] > 1e-3, r  # training actually changed the weights
        assert r["max_diff"] < 1e-4, r


@pytest.mark.parametrize("n", [2, 3, 4])
def test_ddp_matches_gloo(n):
    check_trained_like_gloo(run_world(ddp_worker, n, {}, timeout=300))


def test_ddp_with_comm_memory_requested():
    """DDP_DISABLE_COMM_MEM=0 makes DDP's reducer ask the group's default
    backend to allocate the gradient buckets (Backend::allocateTensor, for
    NCCL's registered memory). A godist group has no such backend: DDP must
    fall back to ordinary buckets and train as on gloo."""
    check_trained_like_gloo(run_world(ddp_worker, 2, {}, timeout=300, env={"DDP_DISABLE_COMM_MEM": "0"}))
