"""Desync detection: a rank that calls another collective than its peers
(or the same one with another shape, dtype, root or reduce op) makes every
rank raise GodistDesyncError within the op, naming both calls, instead of
hanging until the timeout or mixing data. Each scenario runs on a fresh
godist group of the same processes (a desync breaks its group), over TCP
and over shared memory, with 2 and 3 ranks."""

from __future__ import annotations

import datetime
import time

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world

TIMEOUT = datetime.timedelta(seconds=30)

# name: (what rank 1 calls, what the others call, what the error says). A
# call gets the group; "then" marks a scenario where a rank may finish its
# op (it only sends in its own view) and the next collective raises.
SCENARIOS = {
    "op": ("broadcast(float32[1024], root=0)", "all_reduce(float32[1024], SUM)"),
    "shape": ("all_reduce(float32[2048], SUM)", "all_reduce(float32[1024], SUM)"),
    "dtype": ("all_reduce(int32[1024], SUM)", "all_reduce(float32[1024], SUM)"),
    "reduce_op": ("all_reduce(float32[8], MAX)", "all_reduce(float32[8], SUM)"),
    "root": ("broadcast(float32[16], root=1)", "broadcast(float32[16], root=0)"),
    "gather_dtype": ("all_gather(int32[16] per rank)", "all_gather(float32[16] per rank)"),
}


def _call(name, odd, g, n):
    if name == "op":
        t = torch.ones(1024)
        return dist.broadcast(t, src=0, group=g) if odd else dist.all_reduce(t, group=g)
    if name == "shape":
        return dist.all_reduce(torch.ones(2048 if odd else 1024), group=g)
    if name == "dtype":
        return dist.all_reduce(torch.ones(1024, dtype=torch.int32 if odd else torch.float32), group=g)
    if name == "reduce_op":
        return dist.all_reduce(torch.ones(8), op=dist.ReduceOp.MAX if odd else dist.ReduceOp.SUM, group=g)
    if name == "root":
        return dist.broadcast(torch.ones(16), src=1 if odd else 0, group=g)
    if name == "gather_dtype":
        dt = torch.int32 if odd else torch.float32
        return dist.all_gather_into_tensor(torch.zeros(16 * n, dtype=dt), torch.ones(16, dtype=dt), group=g)
    raise ValueError(name)


def _error(e):
    import godist

    return {"type": type(e).__name__, "msg": str(e), "desync": isinstance(e, godist.GodistDesyncError),
            "dist": isinstance(e, dist.DistBackendError), "cause": getattr(e, "cause", None),
            "peer": getattr(e, "peer", None)}


def desync_worker(rank, n, init_file, names):
    init(rank, n, init_file, timeout_s=30, gloo_group=False)
    out = {}
    for name in names:
        g = dist.new_group(backend="godist", timeout=TIMEOUT)
        dist.barrier(group=g)
        start = time.monotonic()
        res = {"err": None, "then": False}
        try:
            _call(name, rank == 1, g, n)
            res["then"] = True  # finished: the next collective must fail
            dist.barrier(group=g)
        except Exception as e:  # noqa: BLE001
            res["err"] = _error(e)
        res["elapsed"] = time.monotonic() - start
        try:
            dist.all_reduce(torch.ones(4), group=g)
            res["refused"] = None
        except Exception as e:  # noqa: BLE001
            res["refused"] = _error(e)
        out[name] = res
    g = dist.new_group(backend="godist", timeout=TIMEOUT)
    t = torch.ones(4)
    dist.all_reduce(t, group=g)
    out["fresh"] = t.tolist()
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("transport", ["tcp", "auto"])
def test_every_rank_raises_desync(transport, n):
    names = list(SCENARIOS)
    results = run_world(desync_worker, n, names, timeout=240, env={"GODIST_TRANSPORT": transport})
    for rank, out in enumerate(results):
        assert out["fresh"] == [float(n)] * 4, f"rank {rank}: a new group after the desyncs"
        for name in names:
            res, (odd, usual) = out[name], SCENARIOS[name]
            err = res["err"]
            where = f"rank {rank}, {name}: {res}"
            assert err is not None, where
            assert err["desync"] and err["dist"] and err["cause"] == "desync", where
            assert res["elapsed"] < 2, where
            # The first rank to find it may be rank 2 (with 3 ranks), which
            # then names itself and rank 1.
            assert f"rank 1 called {odd}" in err["msg"] or f"rank 2 called {usual}" in err["msg"], where
            assert f"rank 0 called {usual}" in err["msg"] or f"where rank 1 called {odd}" in err["msg"], where
            if name not in ("root",):
                # Only a broadcast root in its own view may finish first.
                assert not res["then"] or rank != 1, where
            refused = res["refused"]
            assert refused is not None and refused["dist"] and refused["cause"] == "broken", where
            assert "called" in refused["msg"], where


def detail_worker(rank, n, init_file):
    init(rank, n, init_file, timeout_s=30, gloo_group=False)
    g = dist.new_group(backend="godist", timeout=TIMEOUT)
    shape = (3, 2) if rank == 1 else (2, 3)
    try:
        dist.all_gather([torch.zeros(shape) for _ in range(n)], torch.ones(shape), group=g)
    except Exception as e:  # noqa: BLE001
        return _error(e)
    return None


@pytest.mark.timeout(120)
def test_detail_compares_shapes():
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL, calls that agree in every count
    but not in their tensors' shapes raise too, and show this rank's."""
    results = run_world(detail_worker, 2, timeout=100,
                        env={"GODIST_TRANSPORT": "tcp", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    for rank, err in enumerate(results):
        assert err is not None and err["desync"], (rank, err)
        assert "with tensors of other shapes" in err["msg"], err["msg"]
        shape = "[3, 2]" if rank == 1 else "[2, 3]"
        assert f"input_tensor=float32{shape}" in err["msg"], err["msg"]
