"""One rank of python/tests/test_mpi.py, started by mpirun.

Inits godist with init_method="mpi://", checks the rank, world size and
LOCAL_RANK against the launcher's variables, runs all_reduce, broadcast and
all_gather of a few dtypes on godist and on a gloo group over the same
inputs, and prints one line "MPI-OK rank R size N impl I" when all agree.
Any mismatch raises (nonzero exit; mpirun then fails the whole run).
"""

import datetime
import os

import torch
import torch.distributed as dist

import godist

LAUNCHERS = {  # impl: (rank, size, local rank, local size)
    "openmpi": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE"),
    "mpich": ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
}
DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16)


def launcher():
    for impl, names in LAUNCHERS.items():
        if names[1] in os.environ:
            return impl, [int(os.environ[n]) for n in names]
    raise SystemExit("mpi_worker.py: not started by mpirun (no OMPI_COMM_WORLD_SIZE or PMI_SIZE)")


def check(name, got, want):
    if not torch.equal(got, want):
        raise AssertionError(f"{name}: godist {got.tolist()} != gloo {want.tolist()}")


def main():
    torch.set_num_threads(1)
    impl, (rank, size, local_rank, local_size) = launcher()
    if os.environ.get("LOCAL_RANK") != str(local_rank) or os.environ.get("LOCAL_WORLD_SIZE") != str(local_size):
        raise AssertionError(f"LOCAL_RANK/LOCAL_WORLD_SIZE {os.environ.get('LOCAL_RANK')}/"
                             f"{os.environ.get('LOCAL_WORLD_SIZE')} after import godist, launcher says "
                             f"{local_rank}/{local_size}")
    timeout = datetime.timedelta(seconds=60)
    # A world size that MPI contradicts is refused, naming both numbers.
    try:
        dist.init_process_group("godist", init_method="mpi://", world_size=size + 1, rank=rank, timeout=timeout)
    except ValueError as e:
        if f"world_size={size + 1}" not in str(e) or f"{size} ranks" not in str(e):
            raise AssertionError(f"the error does not name both world sizes: {e}") from e
    else:
        raise AssertionError("init_process_group accepted a world size MPI contradicts")

    dist.init_process_group("godist", init_method="mpi://", timeout=timeout)
    assert (dist.get_rank(), dist.get_world_size()) == (rank, size), (dist.get_rank(), dist.get_world_size())
    assert dist.get_backend() == "godist"
    info = godist.mpi_info()
    assert info is not None and (info["rank"], info["size"], info["impl"]) == (rank, size, impl), info
    gloo = dist.new_group(backend="gloo")

    for dtype in DTYPES:
        base = (torch.arange(17) % 7 + rank * 3 + 1).to(dtype)  # small integers: exact in every dtype
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
            a, b = base.clone(), base.clone()
            dist.all_reduce(a, op=op)
            dist.all_reduce(b, op=op, group=gloo)
            check(f"all_reduce {op} {dtype}", a, b)
        a = base.clone() if rank == size - 1 else torch.zeros_like(base)
        b = a.clone()
        dist.broadcast(a, src=size - 1)
        dist.broadcast(b, src=size - 1, group=gloo)
        check(f"broadcast {dtype}", a, b)
        outs_a = [torch.empty_like(base) for _ in range(size)]
        outs_b = [torch.empty_like(base) for _ in range(size)]
        dist.all_gather(outs_a, base)
        dist.all_gather(outs_b, base, group=gloo)
        check(f"all_gather {dtype}", torch.stack(outs_a), torch.stack(outs_b))
    dist.barrier()
    print(f"MPI-OK rank {rank} size {size} impl {impl} local_rank {os.environ['LOCAL_RANK']}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
