"""Every init method reaches godist's rendezvous through the c10d store:
env:// (also under torchrun), tcp://, file:// and store=; and groups can be
created and destroyed repeatedly in one process."""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from harness import run_world


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_worker(rank, n, init_file, method, port):
    import godist  # noqa: F401

    kw = dict(backend="godist", timeout=datetime.timedelta(seconds=60))
    if method == "env":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(n))
        dist.init_process_group(init_method="env://", **kw)
    elif method == "tcp":
        dist.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n, **kw)
    elif method == "file":
        dist.init_process_group(init_method=f"file://{init_file}", rank=rank, world_size=n, **kw)
    elif method == "store":
        store = dist.TCPStore("127.0.0.1", port, n, is_master=(rank == 0), timeout=datetime.timedelta(seconds=60))
        dist.init_process_group(store=store, rank=rank, world_size=n, **kw)
    assert dist.get_backend() == "godist"
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    return t.tolist()


@pytest.mark.parametrize("method", ["env", "tcp", "file", "store"])
def test_init_methods(method):
    n = 3
    results = run_world(init_worker, n, method, free_port(), timeout=120)
    assert results == [[3.0, 3.0, 3.0]] * n


def reinit_worker(rank, n, init_file):
    import godist  # noqa: F401

    out = []
    for i in range(3):
        store = dist.FileStore(f"{init_file}.{i}", n)
        dist.init_process_group("godist", store=store, rank=rank, world_size=n)
        sub = dist.new_group(ranks=list(range(n)), backend="godist")
        t = torch.ones(2) * (i + 1)
        dist.all_reduce(t)
        dist.all_reduce(t, group=sub)
        out.append(t[0].item())
        dist.destroy_process_group()
    return out


def test_init_destroy_repeatedly():
    n = 2
    results = run_world(reinit_worker, n, timeout=120)
    assert results == [[4.0, 8.0, 12.0]] * n


SCRIPT = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    import godist
    dist.init_process_group("godist")
    r, n = dist.get_rank(), dist.get_world_size()
    t = torch.full((4,), float(r + 1))
    dist.all_reduce(t)
    assert t.tolist() == [n * (n + 1) / 2] * 4, t
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r, "local": int(os.environ["LOCAL_RANK"])})
    assert [o["rank"] for o in objs] == list(range(n))
    dist.barrier()
    print("torchrun-ok", r, flush=True)
    dist.destroy_process_group()
""")


@pytest.mark.timeout(240)
def test_torchrun(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4",
                           f"--master-port={free_port()}", str(script)],
                          capture_output=True, text=True, timeout=200, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("torchrun-ok") == 4, proc.stdout


class _FakeStore:
    """A store whose wait never succeeds: only this rank's record is there,
    or (dead) every call after set fails as if its server were gone."""

    def __init__(self, dead):
        self.data, self.dead = {}, dead

    def add(self, key, n):
        return n

    def set(self, key, value):
        self.data[key] = value

    def wait(self, keys, timeout):
        raise RuntimeError("wait timeout (fake)")

    def check(self, keys):
        if self.dead:
            raise RuntimeError("connection reset by peer (fake)")
        return all(k in self.data for k in keys)


def test_rendezvous_failure_names_the_missing_ranks_or_the_store():
    """A rendezvous that times out names the ranks that never published
    (not this one) as a GodistTimeoutError with missing_ranks; one whose
    store stops answering says so instead of blaming every rank."""
    import datetime

    import godist
    from godist import GodistProcessGroup

    live = godist.runtime_stats()["handles"]
    with pytest.raises(godist.GodistTimeoutError) as ei:
        GodistProcessGroup(_FakeStore(dead=False), 0, 3, datetime.timedelta(seconds=2), group_name="rdv-timeout")
    assert ei.value.missing_ranks == [1, 2] and ei.value.cause == "timeout" and ei.value.after == 2, ei.value
    assert "rank(s) [1, 2] never published their address" in str(ei.value)
    with pytest.raises(dist.DistBackendError, match="the store does not answer") as ei:
        GodistProcessGroup(_FakeStore(dead=True), 1, 3, datetime.timedelta(seconds=2), group_name="rdv-dead")
    assert "never published" not in str(ei.value)
    assert godist.runtime_stats()["handles"] == live, "a failed rendezvous left its group open"
