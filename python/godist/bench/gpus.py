"""Which GPU a rank of ``--device cuda`` uses, and what NCCL needs where
ranks share one (``cuda.py`` in the parent, ``cuda_worker.py`` in the
ranks)."""

from __future__ import annotations


def gpu_of(rank: int, n_gpus: int) -> int:
    """The CUDA device rank ``rank`` uses."""
    return rank % max(1, n_gpus)


def share_gpu_env(rank: int, world: int, n_gpus: int | None = None, nccl_version=None) -> dict:
    """The environment rank ``rank`` of ``world`` needs before its first NCCL
    communicator: empty when every rank has a GPU of its own; where ranks
    share a GPU, NCCL_MULTI_RANK_GPU_ENABLE=1 on NCCL >= 2.30, else a host id
    of its own per rank (NCCL then takes the ranks for different hosts and
    allows them one GPU) with NCCL's socket transport over loopback.

    n_gpus and nccl_version default to torch's (torch.cuda.device_count(),
    torch.cuda.nccl.version())."""
    if n_gpus is None or nccl_version is None:
        import torch

        if n_gpus is None:
            n_gpus = torch.cuda.device_count()
        if nccl_version is None:
            nccl_version = torch.cuda.nccl.version()
    if world <= n_gpus:
        return {}
    if isinstance(nccl_version, int):  # very old torch: one number, e.g. 2708
        nccl_version = (nccl_version // 1000, nccl_version // 100 % 10, nccl_version % 100)
    if tuple(nccl_version)[:3] >= (2, 30, 0):
        return {"NCCL_MULTI_RANK_GPU_ENABLE": "1"}
    return {"NCCL_HOSTID": f"godist-bench-{rank}", "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "lo"}
