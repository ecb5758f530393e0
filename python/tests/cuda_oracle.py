"""Exact references for the GPU tests of the NCCL path (test_cuda_nccl.py).

Every comparison has a reference of its own, computed on the CPU from the
same inputs (each rank regenerates every rank's input from its seed):
data movement and integer reductions exactly; floating-point reductions in
float64 and rounded as NCCL rounds. For the world sizes the tests use (1
and 2) that is exact: NCCL's PREMUL_SUM (and AVG on floats, a PREMUL_SUM by
1/n) rounds each rank's scaled value to the dtype, then the sum of two
values is rounded once; a sum, product, min or max of two float16,
bfloat16 or float32 values is exact in float64 before its one rounding.
torch's nccl backend is a second oracle: where it disagrees with the
reference, that is reported as a note (torch 2.11 passes PREMUL_SUM's
bfloat16 scalar wrongly, pytorch issue 190745) and not counted against
godist.
"""

from __future__ import annotations

import os

import torch
from torch.distributed import ReduceOp

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
INTS = [torch.int32, torch.int64, torch.int8, torch.uint8]


def setup(rank, n, init_file, timeout_s=60, mode="nccl", oracle=True):
    """Init godist as the default group on this rank's GPU and, with oracle,
    a torch nccl group over the same ranks. Where ranks outnumber GPUs they
    share one, with the environment NCCL needs for that set in each rank
    before its first communicator (godist's and torch's alike)."""
    import datetime

    import torch.distributed as dist

    from godist.bench.cuda import gpu_of, share_gpu_env

    os.environ.update(share_gpu_env(rank, n))
    os.environ["GODIST_CUDA"] = mode
    torch.cuda.set_device(gpu_of(rank, torch.cuda.device_count()))
    import godist  # noqa: F401

    dist.init_process_group("godist", init_method=f"file://{init_file}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return dist.new_group(backend="nccl") if oracle else None


def cpu_input(shape, dtype, rank, seed):
    """Rank rank's input for seed, on the CPU (any rank can make any rank's)."""
    g = torch.Generator().manual_seed(seed * 101 + rank)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 4).to(dtype)
    hi = 3 if dtype in (torch.int8, torch.uint8) else 1000
    lo = 0 if dtype == torch.uint8 else -hi
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def place(t, layout="contig"):
    """t on the current CUDA device in a layout: contiguous, strided (every
    other element of a larger buffer) or transposed (a 2-D tensor stored
    column-major); the logical values are t's."""
    if layout == "contig":
        return t.cuda()
    if layout == "strided":
        buf = torch.zeros(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype, device="cuda")
        v = buf[..., ::2]
    elif layout == "transposed":
        assert t.dim() == 2, "a transposed layout needs a 2-D tensor"
        v = torch.zeros(t.shape[1], t.shape[0], dtype=t.dtype, device="cuda").t()
    else:
        raise ValueError(layout)
    v.copy_(t)
    assert not v.is_contiguous()
    return v


def empty(shape, dtype, layout="contig"):
    return place(torch.zeros(shape, dtype=dtype), layout)


def _kind(op):
    """(name, factor) of a ReduceOp or a premul-sum op."""
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX"):
        if op == getattr(ReduceOp, name):
            return name, None
    return "PREMUL_SUM", 0.5  # the tests make PREMUL_SUM ops with _make_nccl_premul_sum(0.5) only


def reduce_ref(xs, op, n=None):
    """The exact result NCCL gives for reduce op over the ranks' inputs xs."""
    name, factor = _kind(op)
    n = len(xs) if n is None else n
    dtype = xs[0].dtype
    if dtype.is_complex:
        return torch.view_as_complex(reduce_ref([torch.view_as_real(x) for x in xs], op))
    if dtype == torch.bool:
        s = torch.stack(xs)
        return s.any(0) if name in ("SUM", "MAX") else s.all(0)
    if dtype.is_floating_point:
        assert len(xs) <= 2, "the float64 reference is exact for up to two ranks"
        ds = [x.double() for x in xs]
        if name in ("AVG", "PREMUL_SUM"):
            s = torch.tensor(factor if name == "PREMUL_SUM" else 1.0 / n, dtype=dtype).double()
            ds = [(d * s).to(dtype).double() for d in ds]
        acc = ds[0]
        for d in ds[1:]:
            acc = {"PRODUCT": torch.mul, "MIN": torch.minimum, "MAX": torch.maximum}.get(name, torch.add)(acc, d)
        return acc.to(dtype)
    acc = xs[0].long()
    for x in xs[1:]:
        acc = {"PRODUCT": torch.mul, "MIN": torch.minimum, "MAX": torch.maximum}.get(name, torch.add)(acc, x.long())
    if name == "AVG":
        acc = torch.div(acc, n, rounding_mode="trunc")
    return acc.to(dtype)  # wraps as NCCL's int8/uint8/int32 arithmetic does


def bits(t):
    t = t.detach().contiguous().cpu()
    return t if t.dtype == torch.bool else t.reshape(-1).view(torch.uint8)


def same(a, b):
    """Bitwise equality (NaNs and signed zeros included), logical shape too."""
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(bits(a), bits(b))


def first_diff(a, b):
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return f"{tuple(a.shape)} {a.dtype} against {tuple(b.shape)} {b.dtype}"
    n = a.numel()
    i = int((bits(a).reshape(n, -1) != bits(b).reshape(n, -1)).any(1).nonzero()[0])
    return f"element {i}: {a.reshape(-1)[i].item()} against {b.reshape(-1)[i].item()}"


class Checker:
    """Runs each case on godist and on torch's nccl group and compares both
    with the case's reference: a godist mismatch is a problem, a torch nccl
    mismatch (or error) a note."""

    def __init__(self, rank, oracle):
        self.rank, self.oracle = rank, oracle
        self.problems, self.notes = [], []

    def check(self, what, run, want):
        """run(group) -> output tensors (None: godist's default group);
        want: the references, one per output."""
        try:
            got = [t.detach().cpu() for t in run(None)]
            torch.cuda.synchronize()
            self._compare(self.problems, what, "godist", got, want)
        except Exception as e:  # noqa: BLE001 - reported, with the case
            self.problems.append(f"rank {self.rank}: {what}: godist raised {type(e).__name__}: {e}")
        if self.oracle is None:
            return
        try:
            theirs = [t.detach().cpu() for t in run(self.oracle)]
            torch.cuda.synchronize()
            self._compare(self.notes, what, "torch nccl", theirs, want)
        except Exception as e:  # noqa: BLE001
            self.notes.append(f"rank {self.rank}: {what}: torch nccl raised {type(e).__name__}: {e}")

    def _compare(self, out, what, who, got, want):
        if len(got) != len(want):
            out.append(f"rank {self.rank}: {what}: {who} gave {len(got)} outputs, the reference {len(want)}")
            return
        for i, (a, b) in enumerate(zip(got, want)):
            if not same(a, b):
                out.append(f"rank {self.rank}: {what}: {who}'s output {i} differs from the reference: "
                           f"{first_diff(a, b)}")
