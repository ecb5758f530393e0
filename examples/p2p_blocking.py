"""Blocking point-to-point communication: rank 0 sends a tensor with dist.send,
every other rank receives it with dist.recv.

Both calls block: send returns once the tensor has been handed over (its buffer
may be reused), recv returns once the data has arrived. This is the first
program of torch's "Writing Distributed Applications with PyTorch" tutorial,
running on the godist backend; with more than two ranks, rank 0 sends to each
of the others in turn.

Run it either way:

    python examples/p2p_blocking.py [--world-size 2]
    torchrun --nproc-per-node=2 examples/p2p_blocking.py

Every rank prints "rank R has data 1.0" and exits non-zero if it holds anything else.
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import godist  # noqa: F401  (registers the "godist" backend)


def run(rank, size):
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 1
        for dst in range(1, size):
            dist.send(tensor=tensor, dst=dst)  # returns when dst may have it
    else:
        dist.recv(tensor=tensor, src=0)  # returns when the data is here
    print(f"rank {rank} has data {tensor[0].item()}", flush=True)
    if tensor[0].item() != 1.0:
        raise SystemExit(f"rank {rank}: expected 1.0")


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
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (torchrun chooses its own)")
    args = parser.parse_args()
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:
        # Started by torchrun, which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
        init_process(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), run)
    else:
        # Started with `python`: spawn the ranks here.
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port())
        mp.spawn(init_process, args=(args.world_size, run), nprocs=args.world_size)
