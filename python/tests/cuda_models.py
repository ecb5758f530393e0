"""DDP and FSDP2 of small CUDA models over godist (test_cuda_nccl.py).

The reference of the first step's gradients is exact: each rank computes
its local gradients on an unwrapped copy of the model, the ranks exchange
them over a gloo group, and the average of two ranks' float32 gradients is
(g0 + g1) / 2 in float64 rounded once, as NCCL's sum of the halves (or its
AVG) rounds it. After a few steps the parameters are compared with those
the same training gives over torch's nccl backend (the second oracle:
reported, not counted)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from cuda_oracle import first_diff, same


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).cuda()


def _batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(32, 64, generator=g).cuda()


def _reference_grads(rank, n, gloo):
    local = _model()
    local(_batch(rank, 0)).square().mean().backward()
    mine = torch.cat([p.grad.reshape(-1).cpu() for p in local.parameters()])
    every = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(every, mine, group=gloo)
    acc = sum(g.double() for g in every) / n
    return acc.float()


def _ddp(group, rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = _model()
    ddp = DDP(model, process_group=group, bucket_cap_mb=1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    first = None
    for step in range(4):
        opt.zero_grad()
        ddp(_batch(rank, step)).square().mean().backward()
        if step == 0:
            first = torch.cat([p.grad.reshape(-1).cpu() for p in model.parameters()])
        opt.step()
    torch.cuda.synchronize()
    return first, torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


def _fsdp(group, rank):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    model = _model()
    mesh = DeviceMesh.from_group(group, "cuda")
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = None
    for step in range(4):
        opt.zero_grad()
        model(_batch(rank, step)).square().mean().backward()
        if step == 0:
            first = torch.cat([p.grad.full_tensor().reshape(-1).cpu() for p in model.parameters()])
        opt.step()
    torch.cuda.synchronize()
    return first, torch.cat([p.full_tensor().detach().reshape(-1).cpu() for p in model.parameters()])


def check(rank, n, oracle):
    problems, notes = [], []
    gloo = dist.new_group(backend="gloo")
    want = _reference_grads(rank, n, gloo)
    for name, train in (("DDP", _ddp), ("FSDP2", _fsdp)):
        results = {}
        for who, group in (("godist", dist.group.WORLD), ("torch nccl", oracle)):
            try:
                results[who] = train(group, rank)
            except Exception as e:  # noqa: BLE001 - reported with the case
                (problems if who == "godist" else notes).append(f"rank {rank}: {name} on {who} raised "
                                                                 f"{type(e).__name__}: {e}")
                continue
            grads = results[who][0]
            if not same(grads, want):
                (problems if who == "godist" else notes).append(
                    f"rank {rank}: {name} on {who}: first step's gradients differ from the reference: "
                    f"{first_diff(grads, want)}")
        if len(results) == 2 and not same(results["godist"][1], results["torch nccl"][1]):
            notes.append(f"rank {rank}: {name}: parameters after 4 steps differ between godist and torch nccl: "
                         f"{first_diff(results['godist'][1], results['torch nccl'][1])}")
    return problems, notes
