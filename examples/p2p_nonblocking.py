"""Non-blocking point-to-point communication: rank 0 sends a tensor with
dist.isend, every other rank receives it with dist.irecv, and both wait on the
returned request.

isend and irecv return at once with a request; the transfer runs in the
background until req.wait(). Until then, do not write to a tensor being sent
nor read one being received. This is the second program of torch's "Writing
Distributed Applications with PyTorch" tutorial, running on the godist backend;
with more than two ranks, rank 0 starts one send to each of the others.

Run it either way:

    python examples/p2p_nonblocking.py [--world-size 2]
    torchrun --nproc-per-node=2 examples/p2p_nonblocking.py

Every rank prints "rank R has data 1.0" after its wait and exits non-zero if it
holds anything else.
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
        reqs = [dist.isend(tensor=tensor, dst=dst) for dst in range(1, size)]
        print("rank 0 started sending", flush=True)
    else:
        reqs = [dist.irecv(tensor=tensor, src=0)]
        print(f"rank {rank} started receiving", flush=True)
    for req in reqs:
        req.wait()  # only now may rank 0 change tensor, and the others read it
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
