"""One rank of python/tests/test_mpi.py's training test: DDP and FSDP2 on a
small model, on every group this launch can make, printing a digest of the
final parameters per (framework, group).

``mpi_frameworks_worker.py mpi``: started by mpirun, init with mpi://; the
groups are godist's default (its own transports), a godist group with
GODIST_TRANSPORT=mpi, and gloo. ``mpi_frameworks_worker.py env``: started by
torchrun (env://); godist's default group and gloo. At two ranks every
reduction sums two values, which gives the same bits in any order, so every
digest of one launch, and of the two launches, must be equal.
"""

import datetime
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import godist  # noqa: F401


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))


def batches(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(5)]


def digest(params):
    h = hashlib.sha256()
    for p in params:
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def ddp(group, rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    m = model()
    d = DDP(m, process_group=group)
    opt = torch.optim.SGD(d.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(rank):
        opt.zero_grad()
        F.cross_entropy(d(x), y).backward()
        opt.step()
    return digest(m.parameters())


def fsdp(group, rank):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    m = model()
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(rank):
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        opt.step()
    return digest([p.full_tensor() for p in m.parameters()])


def main():
    torch.set_num_threads(1)
    mode = sys.argv[1]
    timeout = datetime.timedelta(seconds=60)
    if mode == "mpi":
        dist.init_process_group("godist", init_method="mpi://", timeout=timeout)
    else:
        dist.init_process_group("godist", timeout=timeout)
    rank = dist.get_rank()
    groups = {"godist": dist.group.WORLD}
    if mode == "mpi":
        os.environ["GODIST_TRANSPORT"] = "mpi"
        groups["godist-mpi"] = dist.new_group(backend="godist", timeout=timeout)
        del os.environ["GODIST_TRANSPORT"]
    groups["gloo"] = dist.new_group(backend="gloo", timeout=timeout)
    for name, g in groups.items():
        print(f"DIGEST rank {rank} ddp {name} {ddp(g, rank)}", flush=True)
        print(f"DIGEST rank {rank} fsdp2 {name} {fsdp(g, rank)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
