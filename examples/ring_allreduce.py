"""A hand-written ring all-reduce, built from isend and recv, checked against
dist.all_reduce.

The ranks form a ring: each sends to its right neighbour and receives from its
left. In each of size - 1 steps every rank passes on the tensor it received
last and adds what arrives to its running sum, so after the last step every rank
holds the sum of all ranks' tensors. Two buffers take turns: one is being sent
while the other receives, and send_req.wait() makes sure a buffer has gone out
before it is overwritten. This is the ring all-reduce of torch's "Writing
Distributed Applications with PyTorch" tutorial, running on the godist backend.

Run it either way:

    python examples/ring_allreduce.py [--world-size 4]
    torchrun --nproc-per-node=4 examples/ring_allreduce.py

Rank r contributes [0, 1, 2, 3, 4, 5] * (r + 1), so with 4 ranks each prints

    rank 0: ring all-reduce [0.0, 10.0, 20.0, 30.0, 40.0, 50.0] equals dist.all_reduce: True

and a rank whose ring result differs from dist.all_reduce's exits non-zero.
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import godist  # noqa: F401  (registers the "godist" backend)


def allreduce(send, recv):
    """Sum send over all ranks into recv, passing whole tensors around the ring."""
    rank = dist.get_rank()
    size = dist.get_world_size()
    send_buff = send.clone()
    recv_buff = send.clone()
    accum = send.clone()

    left = ((rank - 1) + size) % size
    right = (rank + 1) % size

    for i in range(size - 1):
        if i % 2 == 0:
            # Send send_buff
            send_req = dist.isend(send_buff, right)
            dist.recv(recv_buff, left)
            accum[:] += recv_buff[:]
        else:
            # Send recv_buff
            send_req = dist.isend(recv_buff, right)
            dist.recv(send_buff, left)
            accum[:] += send_buff[:]
        send_req.wait()
    recv[:] = accum[:]


def run(rank, size):
    # Whole numbers, so the sums are exact whatever order they are added in.
    data = torch.arange(6, dtype=torch.float32) * (rank + 1)
    ring = torch.zeros_like(data)
    allreduce(data, ring)

    reference = data.clone()
    dist.all_reduce(reference, op=dist.ReduceOp.SUM)

    same = torch.equal(ring, reference)
    print(f"rank {rank}: ring all-reduce {ring.tolist()} equals dist.all_reduce: {same}", flush=True)
    if not same:
        raise SystemExit(f"rank {rank}: dist.all_reduce gives {reference.tolist()}")


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
    parser.add_argument("--world-size", type=int, default=4, help="ranks to spawn (torchrun chooses its own)")
    args = parser.parse_args()
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:
        # Started by torchrun, which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
        init_process(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), run)
    else:
        # Started with `python`: spawn the ranks here.
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port())
        mp.spawn(init_process, args=(args.world_size, run), nprocs=args.world_size)
