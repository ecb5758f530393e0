"""Train a small model with DistributedDataParallel on godist, started by mpirun.

Each rank trains on its own shard of a synthetic regression problem; DDP
averages gradients through godist's all_reduce. The ranks find each other
through MPI (init_method="mpi://"): no MASTER_ADDR, RANK or WORLD_SIZE.
Rank 0 prints the loss; at the end every rank checks that all ranks hold
identical parameters (an all_gather of a checksum) and the program exits
nonzero if they do not.

    mpirun -np 4 python examples/mpi_ddp.py [--steps 200] [--transport mpi]
    # as root, and with more ranks than cores (Open MPI):
    mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -np 4 python examples/mpi_ddp.py
    mpirun.mpich -np 4 python examples/mpi_ddp.py

--transport mpi sets GODIST_TRANSPORT=mpi before init: godist's collectives
then run over MPI instead of shared memory/TCP.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import godist  # noqa: F401  (registers the "godist" backend and mpi://)


def make_data(rank: int, n: int = 512):
    g = torch.Generator().manual_seed(1234)
    w_true = torch.randn(16, 1, generator=g)
    gr = torch.Generator().manual_seed(rank)
    x = torch.randn(n, 16, generator=gr)
    y = torch.sin(x @ w_true) + 0.05 * torch.randn(n, 1, generator=gr)
    return x, y


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--transport", choices=("auto", "tcp", "mpi"), default=None,
                    help="set GODIST_TRANSPORT for this run (default: leave it as it is)")
    args = ap.parse_args()
    if args.transport:
        os.environ["GODIST_TRANSPORT"] = args.transport
    torch.set_num_threads(1)

    dist.init_process_group("godist", init_method="mpi://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        info = godist.mpi_info() or {}
        version = (info.get("version") or "?").splitlines()[0]
        print(f"{world} ranks under {info.get('impl')} ({version}); transport "
              f"{os.environ.get('GODIST_TRANSPORT', 'auto')}; LOCAL_RANK {os.environ.get('LOCAL_RANK')}", flush=True)

    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts them)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    x, y = make_data(rank)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, x.shape[0], (64,), generator=torch.Generator().manual_seed(step * 31 + rank))
        loss = nn.functional.mse_loss(ddp(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        if rank == 0 and (step == 1 or step % 10 == 0 or step == args.steps):
            print(f"step {step:4d}  loss {avg.item():.5f}", flush=True)

    # Every rank must hold identical parameters: compare checksums.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    checksum = torch.stack([flat.sum(), (flat * torch.arange(1, flat.numel() + 1, dtype=torch.float64)).sum()])
    gathered = [torch.empty_like(checksum) for _ in range(world)]
    dist.all_gather(gathered, checksum)
    same = all(torch.equal(gathered[0], g) for g in gathered)
    if rank == 0:
        print(f"{args.steps} steps on {world} ranks in {time.time() - t0:.1f}s; "
              f"parameters identical on all ranks: {same}", flush=True)
    dist.destroy_process_group()
    if not same:
        print(f"rank {rank}: parameters differ across ranks: {[g.tolist() for g in gathered]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
