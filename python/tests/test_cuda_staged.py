"""The staged CUDA path (godist._staged): CUDA tensors copied through pinned
host memory and run over godist's CPU transports.

Without a GPU the staging logic runs on CPU tensors through HostDevice (a
stand-in for the CUDA steps) on real godist groups, and every op must give
what the group's own CPU method gives. The tests marked gpu run the same
ops on real CUDA tensors (world sizes 1 and 2; two ranks may share one GPU,
the staged path never touches NCCL) and are skipped where CUDA is not
available."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist

from godist._staged import CudaDevice, HostDevice, StagedPath, StagedWork
from godist._group import cuda_mode
from harness import init, run_world
from refs import make_input

C = torch._C._distributed_c10d

gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                         reason="needs a CUDA device (torch.cuda.is_available() is False)")


def _opts(cls: str, async_op: bool, **fields):
    o = getattr(C, cls)()
    o.asyncOp = async_op
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def _flat(x):
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _flat(y)]
    return [x]


def _godist_pg():
    return dist.group.WORLD._get_backend(torch.device("cpu"))


def every_op(path, rank, n, to_dev, async_op=True):
    """Run every op of ``path`` (a GodistProcessGroup, or a StagedPath over
    one) on tensors made by ``to_dev`` from CPU tensors, and return each
    op's outputs on CPU, by name. Outputs include non-contiguous views."""
    res = {}

    def inp(seed, count, dtype=torch.float32, r=None):
        return to_dev(make_input(rank if r is None else r, dtype, count, salt=seed))

    def zeros(*shape, dtype=torch.float32):
        return to_dev(torch.zeros(*shape, dtype=dtype))

    def done(name, w, outs):
        assert w.wait() is True
        res[name] = [t.cpu().clone() for t in _flat(outs)]

    # allreduce: a non-contiguous tensor, several reductions and dtypes
    for op in ("SUM", "MAX", "AVG", "PRODUCT"):
        base = inp(1, 24).view(4, 6)
        t = base[:, ::2]
        assert not t.is_contiguous()
        opts = _opts("AllreduceOptions", async_op, reduceOp=getattr(dist.ReduceOp, op))
        done(f"allreduce {op}", path.allreduce([t], opts), [base])
    t = inp(2, 7, torch.int32)
    done("allreduce int32", path.allreduce([t], _opts("AllreduceOptions", async_op)), [t])
    ts = [inp(3, 5), inp(4, 9, torch.float64)]
    done("allreduce_coalesced", path.allreduce_coalesced(ts, _opts("AllreduceCoalescedOptions", async_op)), ts)
    for root in range(n):
        t = inp(5 + root, 6)
        done(f"broadcast {root}", path.broadcast([t], _opts("BroadcastOptions", async_op, rootRank=root)), [t])
        t = inp(10 + root, 6)
        done(f"reduce {root}", path.reduce([t], _opts("ReduceOptions", async_op, rootRank=root)), [t])
        x = inp(15 + root, 4, torch.int64)
        outs = [[zeros(4, dtype=torch.int64) for _ in range(n)]] if rank == root else []
        done(f"gather {root}", path.gather(outs, [x], _opts("GatherOptions", async_op, rootRank=root)), outs)
        ins = [[inp(20 + root, 3, r=r) for r in range(n)]] if rank == root else []
        out = zeros(3, 2)[:, 1]
        done(f"scatter {root}", path.scatter([out], ins, _opts("ScatterOptions", async_op, rootRank=root)), [out])
    # gathers
    x = inp(30, 10)[::2]
    outs = [[zeros(5) for _ in range(n)]]
    done("allgather", path.allgather(outs, [x], _opts("AllgatherOptions", async_op)), outs)
    xs = [inp(31, 2), inp(32, 3, torch.int16)]
    outl = [[zeros(2), zeros(3, dtype=torch.int16)] for _ in range(n)]
    done("allgather_coalesced", path.allgather_coalesced(outl, xs, _opts("AllgatherOptions", async_op)), outl)
    out = zeros(n * 4, 2)[:, 0]
    done("all_gather_single", path.all_gather_single(out, inp(33, 4), _opts("AllgatherOptions", async_op)), [out])
    outs = [zeros(n * 3), zeros(n * 2, dtype=torch.float64)]
    ins = [inp(34, 3), inp(35, 2, torch.float64)]
    done("all_gather_single_coalesced",
         path.all_gather_single_coalesced(outs, ins, _opts("AllgatherOptions", async_op)), outs)
    # reduce-scatters
    out = zeros(4)
    done("reduce_scatter", path.reduce_scatter([out], [[inp(40 + r, 4) for r in range(n)]],
                                               _opts("ReduceScatterOptions", async_op)), [out])
    out = zeros(3, 2)[:, 0]
    done("reduce_scatter_single", path.reduce_scatter_single(out, inp(41, 3 * n),
                                                             _opts("ReduceScatterOptions", async_op)), [out])
    outs = [zeros(2), zeros(5, dtype=torch.int32)]
    ins = [inp(42, 2 * n), inp(43, 5 * n, torch.int32)]
    done("reduce_scatter_single_coalesced",
         path.reduce_scatter_single_coalesced(outs, ins, _opts("ReduceScatterOptions", async_op)), outs)
    # all-to-alls
    outs = [zeros(3) for _ in range(n)]
    done("alltoall", path.alltoall(outs, [inp(50 + j, 3) for j in range(n)], _opts("AllToAllOptions", async_op)), outs)
    out = zeros(2 * n)
    done("all_to_all_single even", path.all_to_all_single(out, inp(51, 2 * n), [], [],
                                                          _opts("AllToAllOptions", async_op)), [out])
    send = [(rank + j) % 3 for j in range(n)]
    recv = [(j + rank) % 3 for j in range(n)]
    x = inp(52, 2 * sum(send)).view(sum(send), 2)
    out = zeros(2, sum(recv)).t()  # non-contiguous rows
    done("all_to_all_single uneven",
         path.all_to_all_single(out, x, recv, send, _opts("AllToAllOptions", async_op)), [out])
    # barrier
    assert path.barrier(_opts("BarrierOptions", async_op)).wait() is True
    # point to point: a ring, any-source receives, and to self
    right, left = (rank + 1) % n, (rank - 1) % n
    sw = path.send([inp(60, 5)], right, 3)
    got = zeros(5)
    done("recv", path.recv([got], left, 3), [got])
    sw.wait()
    if n > 1:
        if rank == 0:
            srcs = []
            for _ in range(n - 1):
                t = zeros(2)
                w = path.recv_anysource([t], 9)
                w.wait()
                src = w._source_rank()
                srcs.append(src)
                res[f"recv_anysource from {src}"] = [t.cpu().clone()]
            assert sorted(srcs) == list(range(1, n)), srcs
        else:
            path.send([to_dev(torch.full((2,), float(rank)))], 0, 9).wait()
    path.barrier(_opts("BarrierOptions", False)).wait()
    return res


def _same(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    bad = [k for k in a if len(a[k]) != len(b[k]) or not all(
        x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y) for x, y in zip(a[k], b[k]))]
    return bad


# ----- CPU: the staging logic through HostDevice ---------------------------

class CountingHost(HostDevice):
    """HostDevice that records its copies ("in": to a host buffer, "back":
    from one) and synchronizations, to see when copies happen."""

    def __init__(self):
        self.copies, self.syncs, self.hosts = [], 0, []

    def host_like(self, t):
        h = super().host_like(t)
        self.hosts.append(h)
        return h

    def copy(self, dst, src, stream):
        self.copies.append("in" if any(dst is h for h in self.hosts) else "back")
        super().copy(dst, src, stream)

    def synchronize(self, event):
        self.syncs += 1


def cpu_same_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    pg = _godist_pg()
    bad = []
    for async_op in (True, False):
        want = every_op(pg, rank, n, lambda t: t, async_op)
        got = every_op(StagedPath(pg, HostDevice()), rank, n, lambda t: t.clone(), async_op)
        bad += [f"async={async_op}: {k}" for k in _same(got, want)]
    return bad


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_staged_ops_match_cpu_ops(n):
    """Every op through the staged path gives what the group's CPU method gives."""
    assert run_world(cpu_same_worker, n) == [[]] * n


def cpu_copy_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    pg = _godist_pg()
    want = float(sum(range(1, n + 1)))
    dev = CountingHost()
    sp = StagedPath(pg, dev)

    # inputs are copied in (and waited for) at the call; outputs come back at wait, once
    t = torch.full((6,), float(rank + 1))
    w = sp.allreduce([t], _opts("AllreduceOptions", True))
    assert dev.copies == ["in"] and dev.syncs == 1, (dev.copies, dev.syncs)
    assert torch.equal(t, torch.full((6,), float(rank + 1))), "copied back before wait"
    assert w.wait() is True
    assert dev.copies == ["in", "back"], dev.copies
    assert torch.equal(t, torch.full((6,), want))
    w.wait()
    assert dev.copies == ["in", "back"], "copied back twice"
    assert w.is_completed() and w.is_success() and w.exception() is None
    assert w.result() == [t]

    # get_future: completes with the caller's tensors once they are copied back
    dev.copies.clear()
    t = torch.full((4,), float(rank + 1))
    fut = sp.allreduce([t], _opts("AllreduceOptions", True)).get_future()
    val = fut.wait()
    assert val[0] is t and torch.equal(t, torch.full((4,), want))
    fut = sp.allreduce([torch.ones(3)], _opts("AllreduceOptions", True)).get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    assert torch.equal(chained.wait(), torch.full((3,), 2.0 * n))
    # wait after get_future does not copy again
    dev.copies.clear()
    t = torch.full((4,), float(rank + 1))
    w = sp.allreduce([t], _opts("AllreduceOptions", True))
    w.get_future().wait()
    w.wait()
    assert dev.copies == ["in", "back"], dev.copies

    # polling is_completed alone completes the op and copies back
    t = torch.full((4,), float(rank + 1))
    w = sp.allreduce([t], _opts("AllreduceOptions", True))
    import time
    deadline = time.monotonic() + 30
    while not w.is_completed():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert torch.equal(t, torch.full((4,), want))

    # a non-root's broadcast tensor is not copied in; a non-root's reduce tensor not back
    dev.copies.clear()
    t = torch.full((2,), float(rank))
    sp.broadcast([t], _opts("BroadcastOptions", True, rootRank=0)).wait()
    assert dev.copies == (["in", "back"] if rank == 0 else ["back"]), dev.copies
    assert torch.equal(t, torch.zeros(2))
    dev.copies.clear()
    t = torch.full((2,), float(rank + 1))
    sp.reduce([t], _opts("ReduceOptions", True, rootRank=0)).wait()
    assert dev.copies == (["in", "back"] if rank == 0 else ["in"]), dev.copies
    assert torch.equal(t, torch.full((2,), want if rank == 0 else float(rank + 1)))

    # inside _start/_end_coalescing the group's Work is the staged one: it copies back
    xs = [torch.full((k + 1,), float(rank + 1)) for k in range(3)]
    pg._start_coalescing(torch.device("cpu"))
    for x in xs:
        sp.allreduce([x], _opts("AllreduceOptions", True))
    cw = pg._end_coalescing(torch.device("cpu"))
    cw.wait()
    for k, x in enumerate(xs):
        assert torch.equal(x, torch.full((k + 1,), want)), (k, x)

    # the CPU method's own checks still apply (dtype rules)
    try:
        sp.allgather([[torch.zeros(2, dtype=torch.int32) for _ in range(n)]], [torch.zeros(2)],
                     _opts("AllgatherOptions", True))
    except TypeError as e:
        assert "allgather" in str(e) and "dtype" in str(e), e
    else:
        raise AssertionError("dtype mismatch accepted")
    pg.barrier(_opts("BarrierOptions", False)).wait()
    return True


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_staged_work_copies_back_at_wait(n):
    assert run_world(cpu_copy_worker, n) == [True] * n


def cpu_error_worker(rank, n, init_file):
    from godist import GodistTimeoutError
    init(rank, n, init_file, gloo_group=False, timeout_s=30)
    pg = _godist_pg()
    sp = StagedPath(pg, HostDevice())
    pg.barrier(_opts("BarrierOptions", False)).wait()
    if rank == 1:
        import time

        time.sleep(4)  # long enough for rank 0's op to time out
        return "skipped"
    # rank 1 never joins: rank 0's op times out, in wait(), with the CPU op's own error
    t = torch.full((3,), 5.0)
    w = sp.allreduce([t], _opts("AllreduceOptions", True, timeout=datetime.timedelta(seconds=1)))
    fut = w.get_future()
    try:
        w.wait()
    except GodistTimeoutError as e:
        assert e is w._work.exception(), "a different exception than the CPU op's"
        assert w.exception() is e and w.is_completed() and not w.is_success()
    else:
        raise AssertionError("wait() did not raise")
    try:
        fut.wait()
    except Exception as e:  # noqa: BLE001
        assert "allreduce" in str(e) or "timed out" in str(e).lower(), e
    else:
        raise AssertionError("the future did not fail")
    assert torch.equal(t, torch.full((3,), 5.0)), "outputs of a failed op were overwritten"
    return "raised"


@pytest.mark.timeout(180)
def test_staged_errors_propagate():
    assert run_world(cpu_error_worker, 2) == ["raised", "skipped"]


class _FailedWork(dist.Work):
    def __init__(self, exc):
        super().__init__()
        self.exc = exc

    def wait(self, timeout=None):
        raise self.exc

    def is_completed(self):
        return True

    def exception(self):
        return self.exc

    def get_future(self):
        f = torch.futures.Future()
        f.set_exception(self.exc)
        return f


@pytest.mark.timeout(60)
def test_staged_work_raises_the_cpu_work_error():
    exc = RuntimeError("boom")
    t = torch.zeros(2)
    w = StagedWork("allreduce", _FailedWork(exc), [t], [(t, torch.ones(2))], HostDevice(), torch.device("cpu"))
    with pytest.raises(RuntimeError) as info:
        w.wait()
    assert info.value is exc
    assert torch.equal(t, torch.zeros(2))
    assert w.is_completed() and not w.is_success() and w.exception() is exc
    with pytest.raises(RuntimeError, match="boom"):
        w.get_future().wait()
    assert torch.equal(t, torch.zeros(2))


class _Pg:
    """Just enough of a group for the checks that run before any op."""

    def rank(self):
        return 0

    def size(self):
        return 1


@pytest.mark.timeout(60)
def test_mixed_devices_are_refused():
    sp = StagedPath(_Pg(), HostDevice())
    cpu, meta = torch.zeros(2), torch.zeros(2, device="meta")
    with pytest.raises(ValueError, match=r"allreduce_coalesced: tensors\[1\] is on device meta but tensors\[0\] "
                                         r"is on cpu: every tensor of an op must be on the same device"):
        sp.allreduce_coalesced([cpu, meta])
    with pytest.raises(ValueError, match=r"allgather: output_tensors\[0\]\[1\] is on device meta "
                                         r"but input_tensors\[0\]"):
        sp.allgather([[cpu, meta]], [cpu])
    with pytest.raises(ValueError, match=r"all_to_all_single: output is on device meta but input is on cpu"):
        sp.all_to_all_single(meta, cpu)
    with pytest.raises(ValueError, match=r"send: tensors\[0\] is on device meta; the staged cpu path"):
        sp.send([meta], 0, 0)
    with pytest.raises(TypeError, match=r"broadcast: tensors\[0\] must be a torch.Tensor"):
        sp.broadcast([3])
    # the CUDA device refuses CPU tensors before touching CUDA
    cuda = StagedPath(_Pg(), CudaDevice())
    with pytest.raises(ValueError, match=r"reduce_scatter_tensor: input is on device cpu; "
                                         r"the staged cuda path takes cuda"):
        cuda.reduce_scatter_single(cpu, cpu)
    with pytest.raises(ValueError, match=r"recv: tensors\[0\] is on device cpu"):
        cuda.recv([cpu], 0, 0)


@pytest.mark.timeout(60)
def test_method_names_and_signatures_match_the_group():
    import inspect

    from godist._group import Group
    names = ["allreduce", "allreduce_coalesced", "broadcast", "reduce", "allgather", "allgather_coalesced",
             "all_gather_single", "all_gather_single_coalesced", "gather", "scatter", "reduce_scatter",
             "reduce_scatter_single", "reduce_scatter_single_coalesced", "alltoall", "all_to_all_single", "barrier",
             "send", "recv", "recv_anysource"]
    for name in names:
        want = inspect.signature(getattr(Group, name))
        assert inspect.signature(getattr(StagedPath, name)) == want, name


@pytest.mark.timeout(60)
def test_cuda_mode(monkeypatch):
    monkeypatch.delenv("GODIST_CUDA", raising=False)
    assert cuda_mode() == "auto"
    for v, want in (("nccl", "nccl"), ("staged", "staged"), (" STAGED ", "staged"), ("", "auto"), ("Auto", "auto")):
        monkeypatch.setenv("GODIST_CUDA", v)
        assert cuda_mode() == want
    monkeypatch.setenv("GODIST_CUDA", "gloo")
    with pytest.raises(ValueError, match=r"GODIST_CUDA='gloo'.*'auto', 'nccl' or 'staged'"):
        cuda_mode()


# ----- GPU: real CUDA tensors ----------------------------------------------

def gpu_staged_worker(rank, n, init_file):
    """GODIST_CUDA=staged (set by the test): the group's CUDA tensors take
    the staged path; its ops, then its streams and pinned buffers."""
    torch.cuda.set_device(rank % torch.cuda.device_count())
    init(rank, n, init_file, gloo_group=False)
    bad = []
    if type(dist.group.WORLD._get_backend(torch.device("cuda"))._device_path()).__name__ != "StagedPath":
        bad.append("GODIST_CUDA=staged did not pick the staged path")
    return bad + gpu_same_checks(rank, n) + gpu_stream_checks(rank, n)


def gpu_same_checks(rank, n):
    """Every op on the staged path, on CUDA tensors, gives what the group's
    own CPU method gives on the same inputs (the exact reference)."""
    pg = _godist_pg()
    sp = StagedPath(pg)
    bad = []
    side = torch.cuda.Stream()
    for async_op in (True, False):
        want = every_op(pg, rank, n, lambda t: t, async_op)
        got = every_op(sp, rank, n, lambda t: t.cuda(), async_op)
        bad += [f"async={async_op}: {k}" for k in _same(got, want)]
        # on a stream that is not the default one
        with torch.cuda.stream(side):
            got = every_op(sp, rank, n, lambda t: t.cuda(), async_op)
        torch.cuda.synchronize()
        bad += [f"side stream async={async_op}: {k}" for k in _same(got, want)]
    return bad


def gpu_stream_checks(rank, n):
    sp = StagedPath(_godist_pg())
    want = float(sum(range(1, n + 1)))
    bad = []
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        # the copy in follows the work queued before it on the current stream
        t = torch.zeros(1 << 20, device="cuda")
        torch.cuda._sleep(50_000_000)
        t.fill_(rank + 1)
        w = sp.allreduce([t], _opts("AllreduceOptions", True))
        w.wait()
        # the copy back is on the current stream: ops queued after see it
        u = t * 1
        if not torch.equal(u.cpu(), torch.full((1 << 20,), want)):
            bad.append("stream order")
        # the pinned buffer stays valid until its copy back ends: a fresh pinned
        # buffer of the same size, filled right away, does not change the result
        for k in range(5):
            t = torch.full((1 << 22,), float(rank + k), device="cuda")
            w = sp.allreduce([t], _opts("AllreduceOptions", True))
            torch.cuda._sleep(20_000_000)  # the copy back waits behind this
            w.wait()
            del w
            junk = torch.empty(1 << 22, pin_memory=True)
            junk.fill_(-1.0)
            if not torch.equal(t.cpu(), torch.full((1 << 22,), float(sum(r + k for r in range(n))))):
                bad.append(f"pinned buffer reused before its copy back ended ({k})")
    torch.cuda.synchronize()
    # pinned buffers are reused: repeated ops of one size allocate no new ones
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is not None:
        for _ in range(3):
            sp.allreduce([torch.ones(4096, device="cuda")], _opts("AllreduceOptions", True)).wait()
        torch.cuda.synchronize()
        before = stats().get("num_host_alloc")
        for _ in range(20):
            sp.allreduce([torch.ones(4096, device="cuda")], _opts("AllreduceOptions", True)).wait()
        torch.cuda.synchronize()
        after = stats().get("num_host_alloc")
        if before is not None and after != before:
            bad.append(f"pinned allocations grew from {before} to {after}")
    # the future: completed with the CUDA tensors once they are copied back
    t = torch.full((5,), float(rank + 1), device="cuda")
    val = sp.allreduce([t], _opts("AllreduceOptions", True)).get_future().wait()
    if val[0] is not t or not torch.equal(t.cpu(), torch.full((5,), want)):
        bad.append("future")
    # mixing devices is refused
    for args in (([torch.zeros(2, device="cuda"), torch.zeros(2)],),):
        try:
            sp.allreduce_coalesced(*args)
        except ValueError as e:
            if "CPU and CUDA" not in str(e):
                bad.append(f"mixed devices message: {e}")
        else:
            bad.append("mixed CPU and CUDA accepted")
    if torch.cuda.device_count() > 1:
        try:
            sp.allreduce_coalesced([torch.zeros(2, device="cuda:0"), torch.zeros(2, device="cuda:1")])
        except ValueError as e:
            if "same device" not in str(e):
                bad.append(f"two devices message: {e}")
        else:
            bad.append("two CUDA devices accepted")
    return bad


@pytest.mark.gpu
@gpu
@pytest.mark.timeout(40)
def test_gpu_staged_two_ranks():
    """One two-rank world (the staged path never touches NCCL, so the ranks
    may share a GPU without NCCL's settings) for the ops, the streams and
    the buffers, within tools/gpu-check.sh's budget."""
    assert run_world(gpu_staged_worker, 2, timeout=35, env={"GODIST_CUDA": "staged"}) == [[]] * 2
