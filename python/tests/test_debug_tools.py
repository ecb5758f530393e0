"""Torch's debugging tools on godist groups: TORCH_DISTRIBUTED_DEBUG sets
godist's log level (DETAIL: a start and a done line per op), and a Python
traceback of a rank stuck in a collective names the op it waits in."""

from __future__ import annotations

import datetime
import faulthandler
import logging
import os
import tempfile
import time

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append((record.levelno, record.getMessage()))


def detail_worker(rank, n, init_file):
    from godist import _log

    h = _Records()
    logging.getLogger("godist").addHandler(h)
    init(rank, n, init_file, gloo_group=False)
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    _log.flush()
    return h.records, t.tolist()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("level", ["DETAIL", "INFO"])
def test_torch_distributed_debug(level):
    """DETAIL: every op logs its start and its end at DEBUG (torch also wraps
    the group in its ProcessGroupWrapper, which checks the ops' fingerprints
    over gloo first); INFO: the group's INFO line and no per-op traces."""
    results = run_world(detail_worker, 2, env={"TORCH_DISTRIBUTED_DEBUG": level, "GODIST_LOG_LEVEL": ""},
                        timeout=100)
    for rank, (recs, t) in enumerate(results):
        assert t == [3.0] * 5
        msgs = [m for _, m in recs]
        started = [m for lvl, m in recs if lvl == logging.DEBUG and "allreduce seq" in m and "started" in m]
        done = [m for lvl, m in recs if lvl == logging.DEBUG and "allreduce seq" in m and "done in" in m]
        if level == "DETAIL":
            assert started and done, msgs
            assert all(m.startswith(f"[rank {rank}] ") for m in started + done), msgs
        else:
            assert not [m for lvl, m in recs if lvl == logging.DEBUG], msgs
            assert any(lvl == logging.INFO and "rendezvous" in m for lvl, m in recs), msgs


def stuck_worker(rank, n, init_file, dump):
    init(rank, n, init_file, timeout_s=8, gloo_group=False)
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        # Never joins the all_reduce; leaves once rank 0 has its traceback.
        store.set_timeout(datetime.timedelta(seconds=60))
        store.get("rank0-done")
        return None
    with open(dump, "w") as f:
        faulthandler.dump_traceback_later(3, file=f)
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4))
            err = None
        except Exception as e:  # noqa: BLE001 - the op must fail, not hang
            err = f"{type(e).__name__}: {e}"
        finally:
            faulthandler.cancel_dump_traceback_later()
    took = time.monotonic() - t0
    store.set("rank0-done", "1")
    with open(dump) as f:
        return f.read(), err, took


@pytest.mark.timeout(120)
def test_traceback_of_stuck_rank_names_the_op():
    """Rank 0 waits in an all_reduce rank 1 never joins; faulthandler's dump
    of rank 0's threads shows godist's allreduce frame in process_group.py,
    and the op then fails with a timeout instead of hanging."""
    with tempfile.TemporaryDirectory() as d:
        dump = os.path.join(d, "traceback.txt")
        tb, err, took = run_world(stuck_worker, 2, dump, timeout=100)[0]
    assert err is not None and took < 60, (err, took)
    assert "process_group.py" in tb, tb
    lines = [line for line in tb.splitlines() if "process_group.py" in line]
    assert any("in allreduce" in line for line in lines), tb
