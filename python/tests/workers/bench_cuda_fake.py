"""A stand-in GPU for the CUDA benchmark's tests on machines without one:
torch.cuda answers as if one GPU were there, the ranks' tensors stay on the
CPU and gloo stands in for nccl. It runs the CUDA mode's code (ranks, timing,
rows, table, report) end to end; its numbers mean nothing."""

import sys


def patch_torch():
    import torch
    import torch.distributed as dist

    from godist.bench import cuda_worker

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.set_device = lambda d: None
    torch.cuda.synchronize = lambda d=None: None
    torch.cuda.get_device_name = lambda d=None: "stand-in GPU"
    torch.cuda.nccl.version = lambda: (2, 28, 9)
    dist.is_nccl_available = lambda: True
    new_group = dist.new_group
    dist.new_group = lambda *a, backend=None, **k: new_group(*a, backend="gloo" if backend == "nccl" else backend,
                                                             **k)
    cuda_worker._device = lambda torch, gpu: torch.device("cpu")


def rank_main(*args):
    """A spawned rank: the stand-in first, then the CUDA mode's rank."""
    patch_torch()
    from godist.bench import cuda_worker

    cuda_worker.rank_main(*args)


def main(argv):
    patch_torch()
    from godist.bench import cli, cuda_worker

    cuda_worker.rank_main = rank_main  # what spawn.run_world spawns
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
