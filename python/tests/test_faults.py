"""Faults: a rank that never joins a collective, a rank killed with SIGKILL,
a rank that leaves the group. The others must get an error naming the op,
the group and the rank at fault, within the group's timeout, never a hang."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world

TIMEOUT_S = 3


def skip_worker(rank, n, init_file, op, late=0.0):
    import datetime

    init(rank, n, init_file, timeout_s=TIMEOUT_S, gloo_group=False)
    store = dist.distributed_c10d._get_default_store()
    dist.barrier()
    missing = n - 1
    if rank == missing:
        # Never joins; stays alive until every other rank has its answer.
        store.wait([f"answered{r}" for r in range(missing)], datetime.timedelta(seconds=TIMEOUT_S + late + 60))
        return None
    if rank == 1:
        time.sleep(late)  # rank 0 times out and leaves first
    out = _skipped_op(n, op, missing)
    store.set(f"answered{rank}", "1")
    return out


def _skipped_op(n, op, missing):
    t = torch.ones(8)
    start = time.monotonic()
    try:
        if op == "all_reduce":
            dist.all_reduce(t)
        elif op == "broadcast":
            dist.broadcast(t, src=missing)  # the others depend on the missing root
        elif op == "all_gather":
            dist.all_gather([torch.zeros(8) for _ in range(n)], t)
        elif op == "barrier":
            dist.barrier()
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(torch.zeros(8), torch.ones(8 * n))
    except Exception as e:  # noqa: BLE001
        return {"type": type(e).__name__, "msg": str(e), "elapsed": time.monotonic() - start,
                "is_dist_error": isinstance(e, dist.DistBackendError),
                "missing": getattr(e, "missing_ranks", None), "cause": getattr(e, "cause", None),
                "op": getattr(e, "op", None), "seq": getattr(e, "seq", None), "group": getattr(e, "group", None),
                "after": getattr(e, "after", None)}
    return {"type": None, "elapsed": time.monotonic() - start}


@pytest.mark.parametrize("op,transport", [("all_reduce", "auto"), ("broadcast", "auto"), ("all_gather", "auto"),
                                          ("barrier", "auto"), ("reduce_scatter", "auto"), ("all_reduce", "tcp")])
def test_rank_that_never_joins_is_named(op, transport):
    n = 3
    results = run_world(skip_worker, n, op, timeout=120, env={"GODIST_TRANSPORT": transport})
    for rank, r in enumerate(results[:-1]):
        assert r["type"] is not None, f"rank {rank}: {op} did not fail"
        assert r["is_dist_error"], r
        assert "timed out" in r["msg"], r["msg"]
        assert f"group" in r["msg"] and "seq" in r["msg"], r["msg"]
        assert r["missing"] == [n - 1], r["msg"]
        assert r["elapsed"] < TIMEOUT_S + 5, r
        # The same facts arrive as fields, not only in the message.
        assert r["cause"] == "timeout", r
        assert r["op"] == GO_OP[op] and f"godist: {r['op']} (seq {r['seq']})" in r["msg"], r
        assert r["seq"] >= 1 and r["group"] and f'group "{r["group"]}"' in r["msg"], r
        assert r["after"] == TIMEOUT_S, r


# The op names Go gives each collective in its errors.
GO_OP = {"all_reduce": "allreduce", "broadcast": "broadcast", "all_gather": "allgather", "barrier": "barrier",
         "reduce_scatter": "reduce_scatter"}


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_rank_that_left_after_joining_is_not_named(transport):
    """Rank 1 starts the all_reduce 1.5 s after rank 0, so rank 0 times out,
    reports and destroys its group before rank 1 asks it how far it got:
    its farewell says it joined, and only the rank that never came is named."""
    n = 3
    results = run_world(skip_worker, n, "all_reduce", 1.5, timeout=120, env={"GODIST_TRANSPORT": transport})
    for rank, r in enumerate(results[:-1]):
        assert r["is_dist_error"] and "timed out" in r["msg"], r
        assert r["missing"] == [n - 1], r["msg"]


def kill_worker(rank, n, init_file):
    init(rank, n, init_file, timeout_s=120, gloo_group=False)
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    dist.barrier()
    if rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(5):
            dist.all_reduce(t)
    except Exception as e:  # noqa: BLE001
        return {"msg": str(e), "elapsed": time.monotonic() - start, "is_dist_error": isinstance(e, dist.DistBackendError),
                "cause": getattr(e, "cause", None), "peer": getattr(e, "peer", None)}
    return {"msg": None, "elapsed": time.monotonic() - start}


@pytest.mark.parametrize("n,transport", [(2, "auto"), (3, "auto"), (3, "tcp")])
def test_killed_peer_fails_others_quickly(n, transport):
    results = run_world(kill_worker, n, timeout=120, expect_exit={n - 1: None}, env={"GODIST_TRANSPORT": transport})
    for rank, r in enumerate(results[:-1]):
        assert r["msg"] is not None, f"rank {rank}: all_reduce succeeded with a dead peer"
        assert r["is_dist_error"], r
        assert f"rank {n - 1}" in r["msg"], r["msg"]
        assert "connection lost" in r["msg"], r["msg"]
        assert r["elapsed"] < 10, r
        # The rank whose connection failed: the dead one, or with 3 ranks
        # possibly the survivor that relayed its loss (which may have left
        # first, its farewell naming the dead rank: peer_left).
        assert r["cause"] in ("conn_lost", "peer_left") and r["peer"] in range(n) and r["peer"] != rank, r
        assert r["cause"] == "conn_lost" or n > 2, r
        assert n > 2 or r["peer"] == n - 1, r


def kill_during_copy_worker(rank, n, init_file, op, victim):
    init(rank, n, init_file, timeout_s=60, gloo_group=False)
    t = torch.full(((256 << 20) // 4,), float(rank))
    dist.barrier()
    if rank == victim:
        threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGKILL)).start()
    start = time.monotonic()
    try:
        for _ in range(20):
            if op == "broadcast":
                dist.broadcast(t, src=0)
            elif rank == 0:
                dist.send(t, 1)
            else:
                dist.recv(t, 0)
    except Exception as e:  # noqa: BLE001
        return {"msg": str(e), "elapsed": time.monotonic() - start, "is_dist_error": isinstance(e, dist.DistBackendError)}
    return {"msg": None, "elapsed": time.monotonic() - start}


@pytest.mark.parametrize("op,victim", [("send_recv", 0), ("send_recv", 1), ("broadcast", 0), ("broadcast", 1)])
def test_killed_peer_during_large_copy(op, victim):
    """Two ranks over shared memory copy 256 MiB messages straight between
    their processes, both of them copying (the sender helps its receiver,
    the root its peer); SIGKILL of either in the middle fails the other."""
    results = run_world(kill_during_copy_worker, 2, op, victim, timeout=120, expect_exit={victim: None})
    r = results[1 - victim]
    assert r["msg"] is not None, f"{op}: succeeded with a dead peer"
    assert r["is_dist_error"], r
    assert f"rank {victim}" in r["msg"], r["msg"]
    assert r["elapsed"] < 10, r


def broken_after_timeout_worker(rank, n, init_file):
    init(rank, n, init_file, timeout_s=2, gloo_group=False)
    errs = []
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(4))
        except Exception as e:  # noqa: BLE001
            errs.append(str(e))
        try:
            dist.all_reduce(torch.ones(4))
        except Exception as e:  # noqa: BLE001
            errs.append(str(e))
    else:
        time.sleep(3)
    return errs


def test_group_refuses_work_after_a_timeout():
    results = run_world(broken_after_timeout_worker, 2, timeout=60)
    errs = results[0]
    assert len(errs) == 2
    assert "timed out" in errs[0]
    assert "broken" in errs[1]


def work_wait_timeout_worker(rank, n, init_file):
    init(rank, n, init_file, timeout_s=30, gloo_group=False)
    import datetime

    if rank == 0:
        w = dist.all_reduce(torch.ones(4), async_op=True)
        start = time.monotonic()
        try:
            w.wait(timeout=datetime.timedelta(seconds=0.5))
            return "completed"
        except Exception as e:  # noqa: BLE001
            elapsed = time.monotonic() - start
            info = {"type": type(e).__name__, "elapsed": elapsed, "timeout": isinstance(e, TimeoutError)}
        w.wait()  # the op itself is unaffected and completes once rank 1 joins
        return info
    time.sleep(1.5)
    dist.all_reduce(torch.ones(4))
    return None


def test_work_wait_with_timeout_raises():
    results = run_world(work_wait_timeout_worker, 2, timeout=60)
    r = results[0]
    assert r != "completed"
    assert r["timeout"] and r["elapsed"] < 1.5, r
