"""Train a small classifier with DistributedDataParallel and DistributedSampler
on the godist backend.

Every rank builds the same synthetic dataset (no download needed: 2048 seeded
random points in 16 dimensions, labelled by which of 3 seeded directions they
point along most) and a DistributedSampler hands each rank a different shard of
it every epoch. DDP keeps the model replicas in step: it broadcasts rank 0's
parameters when it wraps the model and averages the gradients over all ranks
(through godist's all_reduce) during every backward pass.

Run it either way:

    python examples/ddp_train.py [--world-size 2] [--epochs 5]
    torchrun --nproc-per-node=2 examples/ddp_train.py

Rank 0 prints the loss of every epoch, averaged over the ranks; then every rank
prints one line:

    rank 0: loss 0.6974 -> 0.0738, parameters identical on all ranks: True

and exits non-zero if the loss did not fall or the ranks' parameters differ.
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import godist  # noqa: F401  (registers the "godist" backend)


def synthetic_dataset(n=2048, features=16, classes=3, seed=0):
    """The same seed gives the same dataset on every rank."""
    g = torch.Generator().manual_seed(seed)
    directions = torch.randn(features, classes, generator=g)
    points = torch.randn(n, features, generator=g)
    labels = (points @ directions).argmax(dim=1)
    return TensorDataset(points, labels)


def run(rank, size, epochs):
    torch.set_num_threads(1)  # the ranks share this machine's cores
    dataset = synthetic_dataset()
    sampler = DistributedSampler(dataset, num_replicas=size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3))
    ddp_model = DDP(model)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)

    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a different shuffle every epoch, the same on every rank
        total, batches = 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(ddp_model(x), y)
            loss.backward()  # DDP averages the gradients over all ranks here
            optimizer.step()
            total += loss.item()
            batches += 1
        epoch_loss = torch.tensor([total / batches])
        dist.all_reduce(epoch_loss, op=dist.ReduceOp.AVG)
        losses.append(epoch_loss.item())
        if rank == 0:
            print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)

    # Every rank must hold the same parameters, bit for bit.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], g) for g in gathered)
    print(f"rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, parameters identical on all ranks: {same}",
          flush=True)
    if not same or not losses[-1] < losses[0]:
        raise SystemExit(f"rank {rank}: the loss did not fall or the parameters differ")


def init_process(rank, size, fn, *args):
    """Join the process group (env://: MASTER_ADDR and MASTER_PORT), run fn, leave."""
    dist.init_process_group("godist", rank=rank, world_size=size)
    try:
        fn(rank, size, *args)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (torchrun chooses its own)")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:
        # Started by torchrun, which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
        init_process(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), run, args.epochs)
    else:
        # Started with `python`: spawn the ranks here.
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port())
        mp.spawn(init_process, args=(args.world_size, run, args.epochs), nprocs=args.world_size)
