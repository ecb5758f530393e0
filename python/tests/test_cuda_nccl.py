"""CUDA tensors through godist's NCCL path, against torch's own nccl backend.

Every test here needs a CUDA GPU and is skipped without one (the CPU-side
checks of the NCCL path are in test_nccl.py). World sizes 1 and 2; where
ranks outnumber GPUs they share one, with the environment NCCL needs for
that (godist.bench.cuda.share_gpu_env), set in each rank before its first
communicator, for godist's communicators and torch's alike. Results must be
bitwise identical to torch's nccl backend on the same inputs: both run the
same NCCL calls on the same library."""

from __future__ import annotations

import datetime
import os
import time

import pytest
import torch

from harness import run_world

gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                         reason="needs a CUDA device (torch.cuda.is_available() is False)")
pytestmark = [pytest.mark.gpu, gpu]

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
INTS = [torch.int32, torch.int64, torch.int8, torch.uint8]


def _setup(rank, n, init_file, timeout_s=60, mode="nccl"):
    """Init godist as the default group on this rank's GPU, and a torch nccl
    group over the same ranks (the oracle)."""
    import torch.distributed as dist

    from godist.bench.cuda import gpu_of, share_gpu_env

    os.environ.update(share_gpu_env(rank, n))
    os.environ["GODIST_CUDA"] = mode
    torch.cuda.set_device(gpu_of(rank, torch.cuda.device_count()))
    import godist  # noqa: F401

    dist.init_process_group("godist", init_method=f"file://{init_file}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return dist.new_group(backend="nccl")


def _input(shape, dtype, rank, seed):
    g = torch.Generator().manual_seed(seed * 101 + rank)
    if dtype == torch.bool:
        return (torch.rand(shape, generator=g) > 0.5).cuda()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 4).to(dtype).cuda()
    if dtype in (torch.complex64,):
        return torch.randn(shape, generator=g, dtype=dtype).cuda()
    hi = 3 if dtype in (torch.int8, torch.uint8) else 1000
    lo = 0 if dtype == torch.uint8 else -hi
    return torch.randint(lo, hi, shape, generator=g).to(dtype).cuda()


def _bits(t):
    t = t.detach().contiguous().cpu()
    return t if t.dtype == torch.bool else t.view(torch.uint8)


def _same(a, b):
    """Bitwise equality (NaNs and signed zeros included)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def ops_worker(rank, n, init_file, async_op):
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    ref = _setup(rank, n, init_file)
    problems = []

    def check(what, run):
        """run(group) -> tensors; the same inputs on godist and on nccl."""
        try:
            got = run(None)
            want = run(ref)
            torch.cuda.synchronize()
            for i, (a, b) in enumerate(zip(got, want)):
                if not _same(a, b):
                    problems.append(f"rank {rank}: {what}: output {i} differs from torch nccl's")
        except Exception as e:  # noqa: BLE001
            problems.append(f"rank {rank}: {what}: {type(e).__name__}: {e}")

    def wait(w):
        if w is not None:
            w.wait()

    seed = 0
    for dtype in FLOATS + INTS + [torch.bool]:
        red_ops = [ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT]
        if dtype.is_floating_point:
            red_ops += [ReduceOp.AVG, dist._make_nccl_premul_sum(0.5)]
        for op in red_ops:
            seed += 1
            for numel in (1, 1000, 70000):
                def ar(g, dtype=dtype, op=op, seed=seed, numel=numel):
                    t = _input((numel,), dtype, rank, seed)
                    wait(dist.all_reduce(t, op=op, group=g, async_op=async_op))
                    return [t]
                check(f"all_reduce {dtype} {op} {numel}", ar)
    seed += 1

    def cplx(g):
        t = _input((999,), torch.complex64, rank, 7)
        wait(dist.all_reduce(t, group=g, async_op=async_op))
        return [t]
    check("all_reduce complex64 SUM", cplx)

    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        for root in range(n):
            def bc(g, dtype=dtype, root=root):
                t = _input((4097,), dtype, rank, 11)
                wait(dist.broadcast(t, src=root, group=g, async_op=async_op))
                return [t]
            check(f"broadcast {dtype} root {root}", bc)

            def rd(g, dtype=dtype, root=root):
                t = _input((4097,), dtype, rank, 12)
                wait(dist.reduce(t, dst=root, group=g, async_op=async_op))
                return [t] if rank == root else []
            check(f"reduce {dtype} root {root}", rd)

        def ag(g, dtype=dtype):
            t = _input((300,), dtype, rank, 13)
            outs = [torch.empty_like(t) for _ in range(n)]
            wait(dist.all_gather(outs, t, group=g, async_op=async_op))
            return outs
        check(f"all_gather {dtype}", ag)

        def agt(g, dtype=dtype):
            t = _input((300,), dtype, rank, 14)
            out = torch.empty(300 * n, dtype=dtype, device=t.device)
            wait(dist.all_gather_into_tensor(out, t, group=g, async_op=async_op))
            return [out]
        check(f"all_gather_into_tensor {dtype}", agt)

        def a2a(g, dtype=dtype):
            t = _input((8 * n,), dtype, rank, 15)
            out = torch.empty_like(t)
            wait(dist.all_to_all_single(out, t, group=g, async_op=async_op))
            return [out]
        check(f"all_to_all_single {dtype}", a2a)

    for dtype in (torch.float32, torch.float16, torch.int32):
        def rs(g, dtype=dtype):
            ins = [_input((257,), dtype, rank, 16 + r) for r in range(n)]
            out = torch.empty(257, dtype=dtype, device=ins[0].device)
            wait(dist.reduce_scatter(out, ins, group=g, async_op=async_op))
            return [out]
        check(f"reduce_scatter {dtype}", rs)

        def rst(g, dtype=dtype):
            t = _input((257 * n,), dtype, rank, 20)
            out = torch.empty(257, dtype=dtype, device=t.device)
            wait(dist.reduce_scatter_tensor(out, t, group=g, async_op=async_op))
            return [out]
        check(f"reduce_scatter_tensor {dtype}", rst)

    def a2a_uneven(g):
        ins_split = [r + 1 + rank for r in range(n)]
        outs_split = [rank + 1 + r for r in range(n)]
        t = _input((sum(ins_split), 3), torch.float32, rank, 21)
        out = torch.empty(sum(outs_split), 3, device=t.device)
        wait(dist.all_to_all_single(out, t, outs_split, ins_split, group=g, async_op=async_op))
        return [out]
    check("all_to_all_single uneven", a2a_uneven)

    def a2a_list(g):
        ins = [_input((r + 2,), torch.float32, rank, 22) for r in range(n)]
        outs = [torch.empty(rank + 2, device=ins[0].device) for _ in range(n)]
        wait(dist.all_to_all(outs, ins, group=g, async_op=async_op))
        return outs
    check("all_to_all list", a2a_list)

    for root in range(n):
        def ga(g, root=root):
            t = _input((33,), torch.float32, rank, 23)
            outs = [torch.empty_like(t) for _ in range(n)] if rank == root else None
            wait(dist.gather(t, outs, dst=root, group=g, async_op=async_op))
            return outs or []
        check(f"gather root {root}", ga)

        def sc(g, root=root):
            ins = [_input((33,), torch.float32, 0, 24 + r) for r in range(n)] if rank == root else None
            out = torch.empty(33, device="cuda")
            wait(dist.scatter(out, ins, src=root, group=g, async_op=async_op))
            return [out]
        check(f"scatter root {root}", sc)

    if n > 1:
        def p2p(g):
            t = _input((5000,), torch.float32, rank, 25)
            out = torch.empty_like(t)
            peer = (rank + 1) % n
            src = (rank - 1) % n
            ops = [dist.P2POp(dist.isend, t, peer, group=g), dist.P2POp(dist.irecv, out, src, group=g)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            return [out]
        check("batch_isend_irecv ring", p2p)

        def sendrecv(g):
            t = _input((100000,), torch.float32, rank, 26)
            if rank == 0:
                dist.send(t, 1, group=g)
                return []
            if rank == 1:
                dist.recv(t, 0, group=g)
            return [t]
        check("send/recv", sendrecv)

    def coalesced(g):
        ts = [_input((s,), torch.float32, rank, 27 + s) for s in (5, 500, 50000)]
        from torch.distributed.distributed_c10d import _coalescing_manager

        with _coalescing_manager(group=g, device=ts[0].device, async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t, group=g)
        cm.wait()
        return ts
    check("coalesced all_reduce", coalesced)

    dist.barrier()
    for bad, msg in ((ReduceOp.BAND, "bitwise"), (ReduceOp.BXOR, "bitwise")):
        try:
            dist.all_reduce(torch.ones(4, dtype=torch.int32, device="cuda"), op=bad)
            problems.append(f"rank {rank}: {bad} was not refused")
        except ValueError as e:
            if msg not in str(e):
                problems.append(f"rank {rank}: {bad} refused without naming why: {e}")
    obj = [None] * n
    dist.all_gather_object(obj, {"rank": rank})
    if obj != [{"rank": r} for r in range(n)]:
        problems.append(f"rank {rank}: all_gather_object gave {obj}")
    return problems


@pytest.mark.timeout(600)
@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("n", [1, 2])
def test_gpu_nccl_ops_match_torch_nccl(n, async_op):
    results = run_world(ops_worker, n, async_op, timeout=540)
    problems = [p for ps in results for p in ps]
    assert not problems, "\n".join(problems[:40])


def stream_worker(rank, n, init_file):
    """A long kernel queued before the collective: the call returns while
    the GPU is still busy (the CPU did not block), and later work on the
    caller's stream sees the result (the stream was ordered)."""
    import torch.distributed as dist

    _setup(rank, n, init_file)
    problems = []
    dev = torch.device("cuda", torch.cuda.current_device())
    t = torch.zeros(1 << 20, device=dev)
    dist.all_reduce(t)  # the communicator exists before timing
    torch.cuda.synchronize()
    for async_op in (False, True):
        t.zero_()
        torch.cuda._sleep(int(2e9))  # about a second of GPU time
        t.fill_(rank + 1)  # after the sleep, on the current stream
        t0 = time.perf_counter()
        w = dist.all_reduce(t, async_op=async_op)
        if w is not None:
            w.wait()
        issued = time.perf_counter() - t0
        u = t * 2  # on the current stream, ordered after the collective
        busy = not torch.cuda.current_stream().query()
        torch.cuda.synchronize()
        want = 2 * sum(r + 1 for r in range(n))
        if not busy:
            problems.append(f"async_op={async_op}: the GPU was idle right after the call; the test did not test")
        if issued > 0.5:
            problems.append(f"async_op={async_op}: the call blocked the CPU for {issued:.2f}s")
        if not torch.all(u == want):
            problems.append(f"async_op={async_op}: later work saw {u[:4].tolist()}, want {want}")
    # get_future: a CUDA-aware future whose value is ordered on the stream
    t.fill_(rank + 1)
    fut = dist.all_reduce(t, async_op=True).get_future()
    v = fut.wait()[0] * 1
    torch.cuda.synchronize()
    if not torch.all(v == sum(r + 1 for r in range(n))):
        problems.append(f"future value {v[:4].tolist()}")
    return problems


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [1, 2])
def test_gpu_stream_semantics(n):
    results = run_world(stream_worker, n, timeout=240)
    problems = [f"rank {r}: {p}" for r, ps in enumerate(results) for p in ps]
    assert not problems, "\n".join(problems)


def timeout_worker(rank, n, init_file):
    """Rank 1 never joins the second all_reduce: rank 0's fails within its
    timeout plus a small bound, naming the op and its sequence number, and
    the group then refuses work; neither process hangs."""
    import torch.distributed as dist

    _setup(rank, n, init_file, timeout_s=5)
    t = torch.ones(1 << 16, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    if rank == 1:
        time.sleep(12)
        return "skipped"
    t0 = time.monotonic()
    w = dist.all_reduce(t, async_op=True)
    while not w.is_completed() and time.monotonic() - t0 < 30:
        time.sleep(0.05)
    took = time.monotonic() - t0
    try:
        w.wait()
        return f"no error after {took:.1f}s"
    except dist.DistBackendError as e:
        msg = str(e)
    if not (4 <= took <= 12):
        return f"failed after {took:.1f}s, want about 5s: {msg}"
    if "allreduce" not in msg or "seq " not in msg:
        return f"error does not name the op and its seq: {msg}"
    try:
        dist.all_reduce(t)
        return "the group took work after the failure"
    except dist.DistBackendError as e:
        if "broken" not in str(e):
            return f"later op failed without saying the group is broken: {e}"
    return "raised"


@pytest.mark.timeout(180)
def test_gpu_timeout_aborts_and_names_the_op():
    assert run_world(timeout_worker, 2, timeout=120) == ["raised", "skipped"]


def ddp_worker(rank, n, init_file):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    ref = _setup(rank, n, init_file)
    finals = []
    for group in (None, ref):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).cuda()
        ddp = DDP(model, process_group=group or dist.group.WORLD, bucket_cap_mb=1)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        for _ in range(5):
            x = torch.randn(32, 64, generator=g).cuda()
            loss = ddp(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        finals.append([p.detach().cpu() for p in model.parameters()])
    return all(torch.equal(a, b) for a, b in zip(*finals))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [1, 2])
def test_gpu_ddp_matches_torch_nccl(n):
    assert run_world(ddp_worker, n, timeout=240) == [True] * n


def staged_worker(rank, n, init_file):
    """GODIST_CUDA=staged: the group's CUDA tensors go through pinned host
    memory; results match torch nccl's for exact dtypes."""
    import torch.distributed as dist

    ref = _setup(rank, n, init_file, mode="staged")
    problems = []
    for dtype in (torch.int64, torch.float32):
        a = _input((10000,), dtype, rank, 31)
        b = a.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=ref)
        out = torch.empty(10000 * n, dtype=dtype, device="cuda")
        out_ref = torch.empty_like(out)
        dist.all_gather_into_tensor(out, a)
        dist.all_gather_into_tensor(out_ref, b, group=ref)
        torch.cuda.synchronize()
        ok = torch.equal(a, b) if dtype == torch.int64 else torch.allclose(a, b, rtol=1e-5, atol=1e-5)
        if not ok or not torch.equal(out.cpu(), out_ref.cpu()) and dtype == torch.int64:
            problems.append(f"{dtype}: staged result differs")
    if type(dist.group.WORLD._get_backend(torch.device("cuda"))._device_path()).__name__ != "StagedPath":
        problems.append("GODIST_CUDA=staged did not pick the staged path")
    return problems


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [1, 2])
def test_gpu_staged_through_the_group(n):
    results = run_world(staged_worker, n, timeout=240)
    problems = [f"rank {r}: {p}" for r, ps in enumerate(results) for p in ps]
    assert not problems, "\n".join(problems)


def fsdp_worker(rank, n, init_file):
    """FSDP2 (fully_shard) of a small CUDA model over godist and over torch's
    nccl: the same parameters after a few steps, bitwise."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    ref = _setup(rank, n, init_file)
    finals = []
    for group in (dist.group.WORLD, ref):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 4)).cuda()
        mesh = DeviceMesh.from_group(group, "cuda")
        for m in model:
            if isinstance(m, torch.nn.Linear):
                fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        for _ in range(4):
            x = torch.randn(16, 32, generator=g).cuda()
            y = torch.randint(0, 4, (16,), generator=g).cuda()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        finals.append(torch.cat([p.full_tensor().detach().reshape(-1).cpu() for p in model.parameters()]))
    return torch.equal(finals[0], finals[1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [1, 2])
def test_gpu_fsdp2_matches_torch_nccl(n):
    assert run_world(fsdp_worker, n, timeout=240) == [True] * n
