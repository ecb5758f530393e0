"""CUDA tensors through godist's NCCL path, on a GPU.

Every test here needs a CUDA GPU and is skipped without one (the CPU-side
checks of the NCCL path are test_nccl.py, test_nccl_fake.py and the Go
tests over the fake NCCL in backends/nccl/fakenccl). Each result is checked
against an exact reference of its own (cuda_oracle.py); torch's nccl
backend on the same inputs is a second oracle, whose disagreements are
reported as warnings, not counted against godist. Where ranks outnumber
GPUs they share one (cuda_oracle.setup).

tools/gpu-check.sh runs these within a fixed budget: each test has a
limit that fits it, tests share a world where they can, and they run
cheapest and most telling first (the file order)."""

from __future__ import annotations

import gc
import time
import warnings

import pytest
import torch

from cuda_oracle import Checker, cpu_input, place, reduce_ref, same, setup
from harness import run_world

gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                         reason="needs a CUDA device (torch.cuda.is_available() is False)")
pytestmark = [pytest.mark.gpu, gpu]


def _report(results):
    """Fail on the ranks' problems; warn about their notes (the second
    oracle's disagreements)."""
    problems = [p for ps, _ in results for p in ps]
    for note in (n for _, ns in results for n in ns):
        warnings.warn(f"second oracle: {note}", stacklevel=2)
    assert not problems, "\n".join(problems[:40])


def smoke_worker(rank, n, init_file):
    """One rank: the calls NCCL runs without peers, sync and async."""
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    import cuda_ops

    c = Checker(rank, setup(rank, n, init_file))
    for async_op in (False, True):
        cuda_ops.reductions(c, rank, n, async_op, dtypes=[torch.float32, torch.bfloat16, torch.int64],
                            sizes=(1, 4097))
    xs = [cpu_input((4097,), torch.bfloat16, 0, 5)]

    def premul(g):
        t = place(xs[0])
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=g)
        return [t]
    c.check("all_reduce bfloat16 PREMUL_SUM(0.5)", premul, [reduce_ref(xs, ReduceOp.PREMUL_SUM)])
    return c.problems, c.notes


@pytest.mark.timeout(30)
def test_gpu_smoke_one_rank():
    _report(run_world(smoke_worker, 1, timeout=25))


def stream_checks(rank, n):
    """An op queued behind a long kernel: the call returns while the GPU is
    still busy (the CPU did not block), and the result is checked only
    after wait(), on the caller's stream (which wait() ordered)."""
    import torch.distributed as dist

    problems = []
    dev = torch.device("cuda", torch.cuda.current_device())
    t = torch.zeros(1 << 20, device=dev)
    dist.all_reduce(t)  # the communicator exists before timing
    torch.cuda.synchronize()
    want = float(sum(r + 1 for r in range(n)))
    for async_op in (False, True):
        torch.cuda._sleep(int(2e9))  # about a second of GPU time
        t.fill_(rank + 1)  # after the sleep, on the current stream
        t0 = time.perf_counter()
        w = dist.all_reduce(t, async_op=async_op)
        issued = time.perf_counter() - t0
        busy = not torch.cuda.current_stream().query()
        if w is not None:
            w.wait()
        u = t * 1  # on the current stream, after what wait() ordered
        torch.cuda.synchronize()
        if not busy:
            problems.append(f"rank {rank}: async_op={async_op}: the GPU was idle right after the call; not tested")
        if issued > 0.5:
            problems.append(f"rank {rank}: async_op={async_op}: the call blocked the CPU for {issued:.2f}s")
        if not torch.all(u == want):
            problems.append(f"rank {rank}: async_op={async_op}: after wait() the result is {u[:4].tolist()}, "
                            f"want {want}")
    t.fill_(rank + 1)
    v = dist.all_reduce(t, async_op=True).get_future().wait()[0] * 1
    torch.cuda.synchronize()
    if not torch.all(v == want):
        problems.append(f"rank {rank}: future value {v[:4].tolist()}, want {want}")
    return problems


def dropped_input_checks(rank, n):
    """Async ops whose inputs Python drops right after the call, queued
    behind a long kernel: godist keeps the inputs alive until the GPU has
    run the ops, so memory reused meanwhile does not change the results."""
    import torch.distributed as dist

    problems = []
    numel = 1 << 18
    xs = [cpu_input((numel,), torch.float32, r, 41) for r in range(n)]
    torch.cuda._sleep(int(1e9))
    out = torch.empty(numel * n, device="cuda")
    w1 = dist.all_gather_into_tensor(out, place(xs[rank]), async_op=True)  # the input is a temporary
    big = [cpu_input((numel * n,), torch.float32, r, 42) for r in range(n)]
    rs = torch.empty(numel, device="cuda")
    w2 = dist.reduce_scatter_tensor(rs, place(big[rank]), async_op=True)
    gc.collect()
    junk = [torch.full((numel * n,), -7.0, device="cuda") for _ in range(8)]  # reuses freed blocks
    w1.wait()
    w2.wait()
    del junk
    torch.cuda.synchronize()
    if not same(out.cpu(), torch.cat(xs)):
        problems.append(f"rank {rank}: all_gather_into_tensor with a dropped input gave a wrong result")
    full = reduce_ref(big, torch.distributed.ReduceOp.SUM)
    if not same(rs.cpu(), full[rank * numel:(rank + 1) * numel]):
        problems.append(f"rank {rank}: reduce_scatter_tensor with a dropped input gave a wrong result")
    return problems


def ops_worker(rank, n, init_file):
    import torch.distributed as dist

    import cuda_ops

    c = Checker(rank, setup(rank, n, init_file))
    c.problems += stream_checks(rank, n)
    c.problems += dropped_input_checks(rank, n)
    for async_op in (False, True):
        cuda_ops.reductions(c, rank, n, async_op)
        cuda_ops.every_op(c, rank, n, async_op)
        for layout in ("strided", "transposed"):
            cuda_ops.every_op(c, rank, n, async_op, layout, dtypes=(torch.float32,))
    dist.barrier()
    for bad in (dist.ReduceOp.BAND, dist.ReduceOp.BXOR):
        try:
            dist.all_reduce(torch.ones(4, dtype=torch.int32, device="cuda"), op=bad)
            c.problems.append(f"rank {rank}: {bad} was not refused")
        except ValueError as e:
            if "bitwise" not in str(e):
                c.problems.append(f"rank {rank}: {bad} refused without naming why: {e}")
    obj = [None] * n
    dist.all_gather_object(obj, {"rank": rank})
    if obj != [{"rank": r} for r in range(n)]:
        c.problems.append(f"rank {rank}: all_gather_object gave {obj}")
    return c.problems, c.notes


@pytest.mark.timeout(60)
def test_gpu_ops_two_ranks():
    _report(run_world(ops_worker, 2, timeout=55))


def timeout_worker(rank, n, init_file):
    """Rank 1 never joins the second all_reduce: rank 0's fails within its
    timeout plus a bound, naming the op and its sequence number, and the
    group then refuses work; neither process hangs."""
    import torch.distributed as dist

    setup(rank, n, init_file, timeout_s=5, oracle=False)
    t = torch.ones(1 << 16, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    if rank == 1:
        time.sleep(9)
        return [], []
    t0 = time.monotonic()
    w = dist.all_reduce(t, async_op=True)
    while not w.is_completed() and time.monotonic() - t0 < 15:
        time.sleep(0.05)
    took = time.monotonic() - t0
    try:
        w.wait()
        return [f"no error after {took:.1f}s"], []
    except dist.DistBackendError as e:
        msg = str(e)
    problems = []
    if not 4 <= took <= 8:
        problems.append(f"failed after {took:.1f}s, want 5s plus at most 3s: {msg}")
    if "allreduce" not in msg or "seq " not in msg:
        problems.append(f"the error does not name the op and its seq: {msg}")
    try:
        dist.all_reduce(t)
        problems.append("the group took work after the failure")
    except dist.DistBackendError as e:
        if "broken" not in str(e):
            problems.append(f"the next op failed without saying the group is broken: {e}")
    return problems, []


@pytest.mark.timeout(40)
def test_gpu_timeout_when_a_rank_never_joins():
    _report(run_world(timeout_worker, 2, timeout=35))


def models_worker(rank, n, init_file):
    import cuda_models

    return cuda_models.check(rank, n, setup(rank, n, init_file))


@pytest.mark.timeout(40)
def test_gpu_ddp_and_fsdp2_two_ranks():
    _report(run_world(models_worker, 2, timeout=35))
