"""Distributed synchronous SGD: each rank trains the same model on its own
partition of the data, and the ranks average their gradients with all_reduce
after every backward pass, so every rank takes the same optimizer step.

This is the training program of torch's "Writing Distributed Applications with
PyTorch" tutorial, running on the godist backend. The tutorial trains on MNIST;
this program needs no download and uses a deterministic synthetic dataset
instead: 4096 points in 20 dimensions around 4 seeded class centres, a
classification problem that a small network learns in a few epochs. The
tutorial's Partition and DataPartitioner split it into one equal, disjoint
partition per rank, and average_gradients is the tutorial's gradient averaging.

Run it either way:

    python examples/distributed_sgd.py [--world-size 2] [--epochs 5]
    torchrun --nproc-per-node=2 examples/distributed_sgd.py

Each rank prints its mean loss per epoch on its own partition, then one line:

    rank 0: loss 1.1561 -> 0.1531, parameters identical on all ranks: True

and exits non-zero if its loss did not fall or the ranks' models differ.
"""

import argparse
import os
import socket
from math import ceil
from random import Random

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

import godist  # noqa: F401  (registers the "godist" backend)


class Partition(object):
    """The samples of data at the given indexes."""

    def __init__(self, data, index):
        self.data = data
        self.index = index

    def __len__(self):
        return len(self.index)

    def __getitem__(self, index):
        data_idx = self.index[index]
        return self.data[data_idx]


class DataPartitioner(object):
    """Shuffles data's indexes (the same way on every rank) and cuts them into
    partitions of the given fractions."""

    def __init__(self, data, sizes=[0.7, 0.2, 0.1], seed=1234):
        self.data = data
        self.partitions = []
        rng = Random()
        rng.seed(seed)
        data_len = len(data)
        indexes = [x for x in range(0, data_len)]
        rng.shuffle(indexes)

        for frac in sizes:
            part_len = int(frac * data_len)
            self.partitions.append(indexes[0:part_len])
            indexes = indexes[part_len:]

    def use(self, partition):
        return Partition(self.data, self.partitions[partition])


def synthetic_dataset(n=4096, features=20, classes=4, seed=0):
    """n points drawn around `classes` random centres; the label is the centre.
    The same seed gives the same dataset on every rank."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, features, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    points = centres[labels] + 0.8 * torch.randn(n, features, generator=g)
    return TensorDataset(points, labels)


def partition_dataset():
    """This rank's partition of the dataset, and the per-rank batch size."""
    dataset = synthetic_dataset()
    size = dist.get_world_size()
    bsz = 128 // size  # a global batch of 128 samples per step
    partition_sizes = [1.0 / size for _ in range(size)]
    partition = DataPartitioner(dataset, partition_sizes)
    partition = partition.use(dist.get_rank())
    train_set = DataLoader(partition, batch_size=bsz, shuffle=True)
    return train_set, bsz


class Net(nn.Module):
    def __init__(self, features=20, classes=4):
        super().__init__()
        self.fc1 = nn.Linear(features, 32)
        self.fc2 = nn.Linear(32, classes)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def average_gradients(model):
    """Replace every gradient by its mean over all ranks."""
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
        param.grad.data /= size


def run(rank, size, epochs):
    torch.set_num_threads(1)  # the ranks share this machine's cores
    torch.manual_seed(1234)  # the same initial model on every rank
    train_set, bsz = partition_dataset()
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.5)

    num_batches = ceil(len(train_set.dataset) / float(bsz))
    losses = []
    for epoch in range(epochs):
        epoch_loss = 0.0
        for data, target in train_set:
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            epoch_loss += loss.item()
            loss.backward()
            average_gradients(model)
            optimizer.step()
        losses.append(epoch_loss / num_batches)
        print(f"rank {rank}, epoch {epoch}: loss {losses[-1]:.4f}", flush=True)

    # Same start, same averaged gradients: every rank must end with the same model.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], g) for g in gathered)
    print(f"rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, parameters identical on all ranks: {same}",
          flush=True)
    if not same or not losses[-1] < losses[0]:
        raise SystemExit(f"rank {rank}: the loss did not fall or the models differ")


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
