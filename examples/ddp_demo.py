"""Train a small model with DistributedDataParallel on godist.

Four processes (torch.multiprocessing.spawn) each train on their own shard of
a synthetic regression problem; DDP averages gradients through godist's
all_reduce. Rank 0 prints the falling loss; at the end every rank checks
that all ranks hold bitwise identical parameters.

    python examples/ddp_demo.py [--world-size 4] [--steps 300]
"""

import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import godist  # noqa: F401  (registers the "godist" backend)


def make_data(rank: int, n: int = 512):
    g = torch.Generator().manual_seed(1234)
    w_true = torch.randn(16, 1, generator=g)
    gr = torch.Generator().manual_seed(rank)
    x = torch.randn(n, 16, generator=gr)
    y = torch.sin(x @ w_true) + 0.05 * torch.randn(n, 1, generator=gr)
    return x, y


def worker(rank: int, world: int, steps: int, init_file: str):
    torch.set_num_threads(1)
    dist.init_process_group(os.environ.get("DEMO_BACKEND", "godist"), init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts them)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    x, y = make_data(rank)
    t0 = time.time()
    for step in range(1, steps + 1):
        idx = torch.randint(0, x.shape[0], (64,), generator=torch.Generator().manual_seed(step * 31 + rank))
        loss = nn.functional.mse_loss(ddp(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 or step % 25 == 0:
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:4d}  loss {avg.item():.5f}", flush=True)
    # Every rank must hold bitwise identical parameters.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], g) for g in gathered)
    if rank == 0:
        print(f"{steps} steps on {world} ranks in {time.time() - t0:.1f}s; "
              f"parameters identical on all ranks: {same}", flush=True)
    dist.destroy_process_group()
    if not same:
        raise SystemExit(f"rank {rank}: parameters differ across ranks")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(args.world_size, args.steps, os.path.join(d, "init")), nprocs=args.world_size)


if __name__ == "__main__":
    main()
