"""Every rank agrees on a collective's outcome, and a timeout raises at its
deadline. A rank that comes back to a collective after its peer gave up on
it (timed out, then aborted, closed or kept its group) must get an error,
never a result built from the peer's abandoned contribution: under torchft
the two replicas would otherwise commit different steps."""

from __future__ import annotations

import datetime
import time

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world

OP_TIMEOUT_S = 1.0


THENS = ("abort", "close", "keep")


def late_peer_worker(rank, n, init_file):
    """For each way rank 0 may carry on after its timeout, a fresh group:
    rank 0's all_reduce times out, then it aborts, closes or keeps the
    group; rank 1 comes to the all_reduce after that."""
    gloo = init(rank, n, init_file, timeout_s=60)
    outs = {}
    for then in THENS:
        g = dist.new_group(backend="godist", timeout=datetime.timedelta(seconds=OP_TIMEOUT_S))
        dist.all_reduce(torch.ones(4), group=g)  # the group works
        t = torch.full((4,), float(rank + 1))
        out = outs[then] = {}
        if rank == 1:
            time.sleep(OP_TIMEOUT_S + 0.5)  # comes back after rank 0 gave up
        try:
            dist.all_reduce(t, group=g)
            out["result"] = t.tolist()
        except Exception as e:  # noqa: BLE001
            out["error"] = str(e)
        if rank == 0 and then == "abort":
            g._get_backend(torch.device("cpu")).abort()
        elif rank == 0 and then == "close":
            dist.destroy_process_group(g)
        dist.barrier(group=gloo)  # rank 0 keeps its side until rank 1 is done
    return outs


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_late_rank_gets_an_error_not_a_result(transport):
    r0, r1 = run_world(late_peer_worker, 2, timeout=50, env={"GODIST_TRANSPORT": transport})
    for then in THENS:
        assert "timed out" in r0[then].get("error", ""), (then, r0[then])
        assert "error" in r1[then], f"rank 1 got {r1[then]} after rank 0 gave up and did {then} ({r0[then]})"
        assert "rank 0" in r1[then]["error"], (then, r1[then])


def stopped_peer_worker(rank, n, init_file, transport):
    import os
    import signal

    gloo = init(rank, n, init_file, timeout_s=60)
    g = dist.new_group(backend="godist", timeout=datetime.timedelta(seconds=OP_TIMEOUT_S))
    dist.all_reduce(torch.ones(4), group=g)
    pids = [None] * n
    dist.all_gather_object(pids, os.getpid(), group=gloo)
    out = {}
    t = torch.full((4,), float(rank + 1))
    if rank == 1:
        time.sleep(0.5)  # rank 0 stops this process in here
    else:
        os.kill(pids[1], signal.SIGSTOP)
    start = time.monotonic()
    try:
        dist.all_reduce(t, group=g)
        out["result"] = t.tolist()
    except Exception as e:  # noqa: BLE001
        out["error"] = str(e)
    out["elapsed"] = time.monotonic() - start
    if rank == 0:
        os.kill(pids[1], signal.SIGCONT)
    dist.barrier(group=gloo)
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_stopped_peer_times_out_at_deadline_and_fails_when_resumed(transport):
    """Rank 1 is stopped before its all_reduce: rank 0's raises at its
    deadline (the query of the silent rank fits inside the timeout) and
    names it; resumed, rank 1's all_reduce fails too."""
    r0, r1 = run_world(stopped_peer_worker, 2, transport, timeout=50, env={"GODIST_TRANSPORT": transport})
    assert "timed out" in r0.get("error", ""), r0
    assert "rank(s) [1] did not answer" in r0["error"], r0
    assert OP_TIMEOUT_S <= r0["elapsed"] < OP_TIMEOUT_S + 0.25, r0
    assert "error" in r1, f"rank 1 got {r1} after rank 0 gave up ({r0['error']})"
