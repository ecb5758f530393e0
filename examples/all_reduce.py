"""Collective communication: all_reduce within a group of ranks.

dist.new_group([0, 1]) makes a group of ranks 0 and 1; an all_reduce with
group=group sums the tensors of its members only and leaves every member with
the sum. Every rank must call new_group, including those it leaves out, and
only members take part in the group's collectives. An all_reduce on the default
group then sums over all ranks. This is the third program of torch's "Writing
Distributed Applications with PyTorch" tutorial, running on the godist backend.

Run it either way (two ranks or more):

    python examples/all_reduce.py [--world-size 4]
    torchrun --nproc-per-node=4 examples/all_reduce.py

Each rank prints one line, e.g. with 4 ranks:

    rank 0: in group [0, 1], all_reduce gives 2.0; over all ranks 4.0
    rank 2: not in group [0, 1], keeps 1.0; over all ranks 4.0

and exits non-zero if a sum is wrong.
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import godist  # noqa: F401  (registers the "godist" backend)


def run(rank, size):
    members = [0, 1]
    group = dist.new_group(members)  # called on every rank, members or not
    tensor = torch.ones(1)
    if rank in members:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
        where = f"in group {members}, all_reduce gives"
    else:
        where = f"not in group {members}, keeps"

    everyone = torch.ones(1)
    dist.all_reduce(everyone, op=dist.ReduceOp.SUM)  # the default group: all ranks

    print(f"rank {rank}: {where} {tensor[0].item()}; over all ranks {everyone[0].item()}", flush=True)
    expected = len(members) if rank in members else 1
    if tensor[0].item() != expected or everyone[0].item() != size:
        raise SystemExit(f"rank {rank}: expected {float(expected)} and {float(size)}")


def init_process(rank, size, fn):
    """Join the process group (env://: MASTER_ADDR and MASTER_PORT), run fn, leave."""
    dist.init_process_group("godist", rank=rank, world_size=size)
    try:
        fn(rank, size)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=4,
                        help="ranks to spawn, at least 2 (torchrun chooses its own)")
    args = parser.parse_args()
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:
        # Started by torchrun, which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
        init_process(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), run)
    else:
        # Started with `python`: spawn the ranks here.
        if args.world_size < 2:
            parser.error("--world-size must be at least 2: the group holds ranks 0 and 1")
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port())
        mp.spawn(init_process, args=(args.world_size, run), nprocs=args.world_size)
