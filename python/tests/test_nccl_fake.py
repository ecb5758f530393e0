"""The NCCL path's Python side over the fake NCCL (backends/nccl/fakenccl),
without a GPU: the fake stands in for libnccl and the CUDA runtime, and its
"device memory" is host memory, so CPU tensors stand in for CUDA ones and
the current stream is the fake's default stream."""

from __future__ import annotations

import ctypes
import datetime
import os
import shutil
import subprocess
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as C

from harness import init, run_world

FAKE = os.path.join(os.path.dirname(__file__), "..", "..", "backends", "nccl", "fakenccl")


@pytest.fixture(scope="module")
def fake_so(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the fake NCCL library cannot be built")
    so = str(tmp_path_factory.mktemp("fakenccl") / "libfakenccl.so")
    srcs = [os.path.join(FAKE, f) for f in ("fake_nccl.c", "fake_cuda.c", "fake_run.c")]
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", so, *srcs, "-lpthread"], check=True, timeout=120)
    return so


def _env(monkeypatch, so):
    """The fake for NCCL and the CUDA runtime, in the environment the rank
    processes start with (Go reads its environment when the library loads)."""
    for k, v in {"GODIST_CUDA": "nccl", "GODIST_NCCL_LIBRARY": so, "GODIST_CUDART_LIBRARY": so}.items():
        monkeypatch.setenv(k, v)


def sync_timeout_worker(rank, n, init_file, so, blocking):
    import torch.distributed as dist

    from godist import _describe, _nccl

    init(rank, n, init_file, gloo_group=False)
    _nccl._BLOCKING_WAIT = blocking
    fake = ctypes.CDLL(so)  # the copy Go loaded (same path): the same state
    torch.cuda.current_stream = lambda device=None: SimpleNamespace(cuda_stream=0)
    pg = dist.group.WORLD._get_backend(torch.device("cpu"))
    path = pg._device_path()
    dev = torch.device("cuda", 0)
    out = {"path": type(path).__name__}

    def run(t, timeout_ms):
        rules = _nccl.CudaRules()
        rules.device = dev  # the fake's "device memory" is host memory: a CPU tensor stands in
        opts = C.AllreduceOptions()
        opts.timeout = datetime.timedelta(milliseconds=timeout_ms)
        if hasattr(opts, "asyncOp"):
            opts.asyncOp = False
        return path._run(_describe.allreduce(_describe.CPU, pg, [t], opts), rules, async_op=False)

    t = torch.arange(4, dtype=torch.float32)
    w = run(t, 5000)
    out["work"] = type(w).__name__
    out["first"] = w.wait()
    fake.fake_set_hang(1)
    try:
        t0 = time.monotonic()
        w = run(t, 300)
        out["returned_after"] = time.monotonic() - t0
        try:
            if not blocking:
                while not w.is_completed() and time.monotonic() - t0 < 5:
                    time.sleep(0.01)
            w.wait()
            out["raised"] = None
        except Exception as e:  # noqa: BLE001 - the test checks what it is
            out["raised"] = (type(e).__name__, str(e), isinstance(e, dist.DistBackendError),
                             isinstance(e, TimeoutError))
        out["failed_after"] = time.monotonic() - t0
        try:
            run(t, 300)
            out["next"] = None
        except Exception as e:  # noqa: BLE001
            out["next"] = str(e)
    finally:
        fake.fake_set_hang(0)
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("blocking", [False, True])
def test_sync_op_timeout_raises_naming_the_op(fake_so, blocking, monkeypatch):
    """A synchronous op whose device work never finishes (a rank that never
    joins) has a Work of its own: its wait() (which torch's frontend calls
    for every synchronous op) raises a timeout naming the op, at once with
    GODIST_CUDA_BLOCKING_WAIT=1 and once the watchdog has found it without
    (the call itself never waited then); the group's next op is refused."""
    _env(monkeypatch, fake_so)
    (r,) = run_world(sync_timeout_worker, 1, fake_so, blocking, timeout=90)
    assert r["path"] == "NcclPath" and r["work"] == "SyncCudaWork" and r["first"], r
    assert r["raised"] is not None, r
    name, msg, is_backend, is_timeout = r["raised"]
    assert is_backend and is_timeout and "allreduce (seq 2)" in msg and "timed out" in msg, r
    assert 0.3 <= r["failed_after"] < 2.5, r
    if not blocking:
        assert r["returned_after"] < 0.3, r
    assert r["next"] is not None and "allreduce (seq 2)" in r["next"], r


# ----- every op of the NCCL path, on several ranks ----------------------

# The fake forms a communicator of the communicators made in one process
# with one unique id: the ranks of these tests are threads of one process,
# each with its own godist group, its own stream (fake_stream) and its own
# tensors. CPU tensors stand in for CUDA ones (the fake's device memory is
# host memory), and the ops are synchronous: a copy-back of a
# non-contiguous output would run on the CPU before the fake ran the op, so
# the outputs here are contiguous.

_RED = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
        "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
_FAKE_REDUCES = (torch.float32, torch.float64, torch.int32, torch.int64)


def _x(r, k, dtype, salt=0):
    """Rank r's input: k values, small enough that a product stays exact."""
    v = (torch.arange(k) * (r + 2 + salt) + 3 * r + salt) % 7 - 2
    return v.to(dtype)


def _opts(cls, **fields):
    o = cls()
    for name, v in fields.items():
        setattr(o, name, v)
    if hasattr(o, "asyncOp"):
        o.asyncOp = False
    return o


def _rank_cases(g, path, r, n):
    """Every op on thread-rank r of n; returns {case: the output tensors}."""
    from godist.work import GodistWork

    def done(w):
        GodistWork.wait(w)  # the CPU waits for the device's verdict
        return w

    out = {}
    for dt in _FAKE_REDUCES:
        for name, rop in _RED.items():
            if name == "avg" and not dt.is_floating_point:
                continue
            t = _x(r, 5, dt)
            done(path.allreduce([t], _opts(C.AllreduceOptions, reduceOp=rop)))
            out[f"allreduce/{dt}/{name}"] = t
    if hasattr(dist, "_make_nccl_premul_sum"):
        t = _x(r, 5, torch.float64)
        done(path.allreduce([t], _opts(C.AllreduceOptions, reduceOp=dist._make_nccl_premul_sum(2.0))))
        out["allreduce/premul_sum"] = t
    a, b = _x(r, 3, torch.float32), _x(r, 4, torch.int64, 1)
    done(path.allreduce_coalesced([a, b], _opts(C.AllreduceCoalescedOptions)))
    out["allreduce_coalesced"] = [a, b]
    t = _x(r, 6, torch.bfloat16)
    done(path.broadcast([t], _opts(C.BroadcastOptions, rootRank=n - 1)))
    out["broadcast/bf16"] = t
    t = _x(r, 5, torch.int32)
    done(path.reduce([t], _opts(C.ReduceOptions, rootRank=n - 1, reduceOp=dist.ReduceOp.MAX)))
    out["reduce/max"] = t
    inp = _x(r, 3, torch.uint8)
    outs = [torch.empty(3, dtype=torch.uint8) for _ in range(n)]
    done(path.allgather([outs], [inp], _opts(C.AllgatherOptions)))
    out["allgather"] = outs
    ins = [_x(r, 2, torch.float16), _x(r, 3, torch.int64, 1)]
    lists = [[torch.empty(2, dtype=torch.float16), torch.empty(3, dtype=torch.int64)] for _ in range(n)]
    done(path.allgather_coalesced(lists, ins, _opts(C.AllgatherOptions)))
    out["allgather_coalesced"] = [x for lst in lists for x in lst]
    flat = torch.empty(4 * n, dtype=torch.float32)
    done(path.all_gather_single(flat, _x(r, 4, torch.float32), _opts(C.AllgatherOptions)))
    out["all_gather_into_tensor"] = flat
    flats = [torch.empty(2 * n, dtype=torch.int32), torch.empty(3 * n, dtype=torch.float64)]
    done(path.all_gather_single_coalesced(flats, [_x(r, 2, torch.int32), _x(r, 3, torch.float64, 1)],
                                          _opts(C.AllgatherOptions)))
    out["all_gather_into_tensor_coalesced"] = flats
    gouts = [[torch.empty(3, dtype=torch.int64) for _ in range(n)]] if r == n - 1 else []
    done(path.gather(gouts, [_x(r, 3, torch.int64)], _opts(C.GatherOptions, rootRank=n - 1)))
    out["gather"] = gouts[0] if gouts else []
    so = torch.empty(3, dtype=torch.float32)
    sins = [[_x(k, 3, torch.float32, 5) for k in range(n)]] if r == 0 else []
    done(path.scatter([so], sins, _opts(C.ScatterOptions, rootRank=0)))
    out["scatter"] = so
    ro = torch.empty(3, dtype=torch.float32)
    done(path.reduce_scatter([ro], [[_x(r, 3, torch.float32, k) for k in range(n)]],
                             _opts(C.ReduceScatterOptions, reduceOp=dist.ReduceOp.SUM)))
    out["reduce_scatter"] = ro
    ro = torch.empty(2, dtype=torch.int64)
    done(path.reduce_scatter_single(ro, _x(r, 2 * n, torch.int64),
                                    _opts(C.ReduceScatterOptions, reduceOp=dist.ReduceOp.MIN)))
    out["reduce_scatter_tensor"] = ro
    ros = [torch.empty(2, dtype=torch.float64), torch.empty(1, dtype=torch.int32)]
    done(path.reduce_scatter_single_coalesced(ros, [_x(r, 2 * n, torch.float64), _x(r, n, torch.int32, 1)],
                                              _opts(C.ReduceScatterOptions, reduceOp=dist.ReduceOp.SUM)))
    out["reduce_scatter_tensor_coalesced"] = ros
    aouts = [torch.empty(k + 1, dtype=torch.int16) for k in range(n)]
    done(path.alltoall(aouts, [_x(r, r + 1, torch.int16, k) for k in range(n)], _opts(C.AllToAllOptions)))
    out["alltoall"] = aouts
    sizes_in = [k + 1 for k in range(n)]          # rank r sends k+1 rows to rank k
    sizes_out = [r + 1] * n                       # and gets r+1 rows from every rank
    ao = torch.empty(sum(sizes_out), 2, dtype=torch.float32)
    ai = torch.stack([_x(r, 2, torch.float32, k) for k in range(n) for _ in range(k + 1)])
    done(path.all_to_all_single(ao, ai, sizes_out, sizes_in, _opts(C.AllToAllOptions)))
    out["all_to_all_single"] = ao
    # A batch (batch_isend_irecv): a send to the next rank and a receive from the previous one.
    rx = torch.empty(4, dtype=torch.float32)
    path.start_batch(torch.device("cuda", 0))
    path.send([_x(r, 4, torch.float32, 9)], (r + 1) % n)
    path.recv([rx], (r - 1) % n)
    done(path.end_batch(async_op=False))
    out["batch_send_recv"] = rx
    # A coalescing block of two collectives (_coalescing_manager).
    c1, c2 = _x(r, 2, torch.float32), _x(r, 3, torch.int32)
    path.start_batch(torch.device("cuda", 0))
    path.allreduce([c1], _opts(C.AllreduceOptions))
    path.allreduce([c2], _opts(C.AllreduceOptions, reduceOp=dist.ReduceOp.MAX))
    done(path.end_batch(async_op=False))
    out["coalesced"] = [c1, c2]
    return out


def _expected(n):
    """What every case of _rank_cases must give on each rank."""
    def red(name, xs):
        s = torch.stack([x.double() for x in xs])
        v = {"sum": s.sum(0), "product": s.prod(0), "min": s.min(0).values, "max": s.max(0).values,
             "avg": s.mean(0)}[name]
        return v.to(xs[0].dtype)

    exp = [dict() for _ in range(n)]
    for r in range(n):
        e = exp[r]
        for dt in _FAKE_REDUCES:
            for name in _RED:
                if name == "avg" and not dt.is_floating_point:
                    continue
                e[f"allreduce/{dt}/{name}"] = red(name, [_x(k, 5, dt) for k in range(n)])
        e["allreduce/premul_sum"] = red("sum", [_x(k, 5, torch.float64) for k in range(n)]) * 2
        e["allreduce_coalesced"] = [red("sum", [_x(k, 3, torch.float32) for k in range(n)]),
                                    red("sum", [_x(k, 4, torch.int64, 1) for k in range(n)])]
        e["broadcast/bf16"] = _x(n - 1, 6, torch.bfloat16)
        e["reduce/max"] = red("max", [_x(k, 5, torch.int32) for k in range(n)]) if r == n - 1 else None
        e["allgather"] = [_x(k, 3, torch.uint8) for k in range(n)]
        e["allgather_coalesced"] = [x for k in range(n) for x in (_x(k, 2, torch.float16), _x(k, 3, torch.int64, 1))]
        e["all_gather_into_tensor"] = torch.cat([_x(k, 4, torch.float32) for k in range(n)])
        e["all_gather_into_tensor_coalesced"] = [torch.cat([_x(k, 2, torch.int32) for k in range(n)]),
                                                 torch.cat([_x(k, 3, torch.float64, 1) for k in range(n)])]
        e["gather"] = [_x(k, 3, torch.int64) for k in range(n)] if r == n - 1 else []
        e["scatter"] = _x(r, 3, torch.float32, 5)
        e["reduce_scatter"] = red("sum", [_x(k, 3, torch.float32, r) for k in range(n)])
        e["reduce_scatter_tensor"] = red("min", [_x(k, 2 * n, torch.int64)[2 * r:2 * r + 2] for k in range(n)])
        e["reduce_scatter_tensor_coalesced"] = [
            red("sum", [_x(k, 2 * n, torch.float64)[2 * r:2 * r + 2] for k in range(n)]),
            red("sum", [_x(k, n, torch.int32, 1)[r:r + 1] for k in range(n)])]
        e["alltoall"] = [_x(k, k + 1, torch.int16, r) for k in range(n)]
        e["all_to_all_single"] = torch.stack([_x(k, 2, torch.float32, r) for k in range(n) for _ in range(r + 1)])
        e["batch_send_recv"] = _x((r - 1) % n, 4, torch.float32, 9)
        e["coalesced"] = [red("sum", [_x(k, 2, torch.float32) for k in range(n)]),
                          red("max", [_x(k, 3, torch.int32) for k in range(n)])]
    return exp


def every_op_worker(rank, nprocs, init_file, so, n):
    import threading
    import traceback

    from godist import _flight, _group, _nccl

    fake = ctypes.CDLL(so)  # the copy Go loaded (same path): the same state
    fake.fake_stream.restype = ctypes.c_void_p
    local = threading.local()

    def current_stream(device=None):
        s = getattr(local, "stream", None)
        if s is None:
            s = local.stream = SimpleNamespace(cuda_stream=fake.fake_stream(0))
        return s

    class HostRules(_nccl.CudaRules):
        """CudaRules for CPU tensors standing in for tensors of cuda:0."""

        def tensor(self, op, name, t):
            assert isinstance(t, torch.Tensor) and t.is_cpu, (op, name)
            self.device = torch.device("cuda", 0)
            return t

    torch.cuda.current_stream = current_stream
    _nccl.CudaRules = HostRules
    store = dist.HashStore()
    results, errors, recorded = [None] * n, [], [None] * n

    def one(r):
        g = None
        try:
            g = _group.Group(store, r, n, datetime.timedelta(seconds=60), "fake")
            path = g._device_path()
            results[r] = (type(path).__name__, _rank_cases(g, path, r, n))
            # (sizes differ by rank: a gather's root, uneven all_to_all)
            recorded[r] = [(e["process_group"][0], e["profiling_name"], e["collective_seq_id"], e["state"])
                           for e in _flight.trace([g])["entries"] if not e["is_p2p"]]
        except BaseException:  # noqa: BLE001 - reported to the test
            errors.append(f"thread-rank {r}:\n{traceback.format_exc()}")
        finally:
            if g is not None:
                g._close()

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    errs = ctypes.create_string_buffer(4096)
    fake.fake_errors(errs, len(errs))
    if any(t.is_alive() for t in threads):
        errors.append("a thread-rank did not finish")
    return {"errors": errors, "paths": [x and x[0] for x in results], "misuse": errs.value.decode(), "recorded": recorded,
            "wrong": _compare([x[1] for x in results], _expected(n)) if not errors else None}


def _compare(got, exp):
    """Every case whose outputs differ from the expected ones, by rank
    (compared in the worker: tensors do not travel back to the test)."""
    wrong = []
    for rank, (g, e) in enumerate(zip(got, exp)):
        if set(g) != set(e):
            wrong.append((rank, "cases", sorted(set(g) ^ set(e))))
        for case, want in e.items():
            have = g.get(case)
            if want is None or have is None:
                continue
            pairs = list(zip(have, want)) if isinstance(want, list) else [(have, want)]
            if isinstance(want, list) and len(have) != len(want):
                wrong.append((rank, case, f"{len(have)} outputs, expected {len(want)}"))
            for h, w in pairs:
                if h.dtype != w.dtype or not torch.equal(h, w):
                    wrong.append((rank, case, f"got {h.tolist()} ({h.dtype}), expected {w.tolist()} ({w.dtype})"))
    return wrong


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_op_on_the_nccl_path(fake_so, n, monkeypatch):
    """Every op the NCCL path describes (godist._describe), through the
    library's device path and the NCCL shim to the fake, on n ranks: every
    dtype the fake reduces with every reduce op, root ranks other than 0,
    lists of mixed dtypes, uneven all_to_all_single splits, a
    batch_isend_irecv ring and a coalescing block; every rank's outputs
    are checked against the values computed from all ranks' inputs."""
    _env(monkeypatch, fake_so)
    (r,) = run_world(every_op_worker, 1, fake_so, n, timeout=200)
    assert not r["errors"], "\n".join(r["errors"])
    assert r["misuse"] == "", r["misuse"]
    assert r["paths"] == ["NcclPath"] * n, r["paths"]
    assert r["wrong"] == [], "\n".join(map(str, r["wrong"]))
    # The flight recorder holds every rank's CUDA collectives alike, numbered
    # 1, 2, ... in a group of their own, each completed.
    rec = r["recorded"]
    assert all(x == rec[0] for x in rec), rec
    assert len(rec[0]) > 10 and {e[0] for e in rec[0]} == {"fake:cuda"}, rec[0]
    assert [e[2] for e in rec[0]] == list(range(1, len(rec[0]) + 1)), rec[0]
    assert {e[-1] for e in rec[0]} == {"completed"}, rec[0]
