"""GODIST_SECRET: authenticated transport connections and godist TCPStore.

* a 3-rank job with a secret all-reduces correctly;
* a rank with the wrong secret fails its rendezvous with an error naming
  authentication while the right ranks train on (the Go tests in
  backends/tcp cover strangers hammering a rank's transport listener);
* godist's TCPStore with a secret: the right secret works, a wrong or
  missing one gets a clear exception, and the server goes on serving;
* torch's TCPStore client still works against godist's store without one.
"""

from __future__ import annotations

import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist

from harness import run_world

T = datetime.timedelta(seconds=30)


def _allreduce_job(rank, n, init_file):
    import godist  # noqa: F401

    assert os.environ["GODIST_SECRET"] == "s3cret"
    dist.init_process_group("godist", init_method=f"file://{init_file}", rank=rank, world_size=n, timeout=T)
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), float(n * (n + 1) // 2)))
    return True


@pytest.mark.timeout(120)
def test_job_with_secret_all_reduces():
    assert run_world(_allreduce_job, 3, env={"GODIST_SECRET": "s3cret"}, timeout=100) == [True] * 3


def _right_and_wrong(rank, n, init_file):
    import godist

    port_file = init_file + ".port"
    done_file = init_file + ".stranger"
    if rank == 2:  # started with the wrong secret
        os.environ["GODIST_SECRET"] = "wrong"
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file) or not open(port_file).read().endswith("\n"):
            assert time.monotonic() < deadline, "no port published"
            time.sleep(0.05)
        port = int(open(port_file).read())
        try:
            store = godist.TCPStore("127.0.0.1", port, timeout=datetime.timedelta(seconds=10))
            dist.init_process_group("godist", store=store, rank=2, world_size=3, timeout=T)
        except Exception as e:  # noqa: BLE001 - reported to the parent
            msg = f"{type(e).__name__}: {e}"
        else:
            msg = "not refused"
        finally:
            open(done_file, "w").write("done")
        return msg
    os.environ["GODIST_SECRET"] = "right"
    store = godist.TCPStore("127.0.0.1", 0, 2, rank == 0, timeout=T, wait_for_workers=False) if rank == 0 else None
    if rank == 0:
        with open(port_file + ".tmp", "w") as f:
            f.write(f"{store.port}\n")
        os.rename(port_file + ".tmp", port_file)
    else:
        while not os.path.exists(port_file):
            time.sleep(0.05)
        store = godist.TCPStore("127.0.0.1", int(open(port_file).read()), 2, False, timeout=T)
    dist.init_process_group("godist", store=store, rank=rank, world_size=2, timeout=T)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    deadline = time.monotonic() + 60
    # Train until the stranger has been refused, and a few steps after.
    while True:
        x = torch.randn(16, 8, generator=torch.Generator().manual_seed(steps * 2 + rank))
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= 2
        opt.step()
        steps += 1
        flag = torch.tensor([1.0 if os.path.exists(done_file) else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if flag.item() == 1.0 and steps >= 20:
            break
        assert time.monotonic() < deadline, "the stranger never finished"
    w = model.weight.detach().clone()
    ws = [torch.empty_like(w) for _ in range(2)]
    dist.all_gather(ws, w)
    assert torch.equal(ws[0], ws[1]), "the ranks' models diverged"
    return steps


@pytest.mark.timeout(150)
def test_wrong_secret_refused_while_job_trains():
    res = run_world(_right_and_wrong, 3, timeout=120)
    assert res[0] >= 20 and res[1] == res[0]
    assert "authentication failed" in res[2] and "wrong secret" in res[2], res[2]


@pytest.mark.timeout(60)
def test_godist_store_with_secret():
    import godist

    t = datetime.timedelta(seconds=10)
    srv = godist.TCPServer("127.0.0.1", 0, secret="s3cret")
    try:
        a = godist.TCPStore("127.0.0.1", srv.port, timeout=t, secret="s3cret")
        a.set("k", "v")
        start = time.monotonic()
        with pytest.raises(dist.DistStoreError, match="authentication failed.*wrong secret"):
            godist.TCPStore("127.0.0.1", srv.port, timeout=t, secret="nope")
        assert time.monotonic() - start < 5, "a wrong secret is not worth retrying"
        with pytest.raises(dist.DistStoreError, match="authentication failed.*requires GODIST_SECRET"):
            godist.TCPStore("127.0.0.1", srv.port, timeout=t, secret="")
        b = godist.TCPStore("127.0.0.1", srv.port, timeout=t, secret=b"s3cret")
        assert b.get("k") == b"v"
        a.set("k2", "v2")
        assert b.get("k2") == b"v2"
        with pytest.raises(TypeError, match="secret"):
            godist.TCPStore("127.0.0.1", srv.port, timeout=t, secret=42)
    finally:
        srv.close()


@pytest.mark.timeout(60)
def test_secret_from_environment(monkeypatch):
    import godist

    t = datetime.timedelta(seconds=10)
    monkeypatch.setenv("GODIST_SECRET", "from-env")
    m = godist.TCPStore("127.0.0.1", 0, 1, True, timeout=t, wait_for_workers=False)
    try:
        assert godist.TCPStore("127.0.0.1", m.port, timeout=t).add("c", 1) == 1
        with pytest.raises(dist.DistStoreError, match="authentication failed"):
            godist.TCPStore("127.0.0.1", m.port, timeout=t, secret="other")
        monkeypatch.delenv("GODIST_SECRET")
        with pytest.raises(dist.DistStoreError, match="requires GODIST_SECRET"):
            godist.TCPStore("127.0.0.1", m.port, timeout=t)
    finally:
        m.close()


@pytest.mark.timeout(60)
def test_torch_client_without_secret(monkeypatch):
    import godist

    monkeypatch.delenv("GODIST_SECRET", raising=False)
    srv = godist.TCPServer("127.0.0.1", 0)
    try:
        c = dist.TCPStore("127.0.0.1", srv.port, timeout=datetime.timedelta(seconds=10))
        c.set("x", "1")
        assert godist.TCPStore("127.0.0.1", srv.port, timeout=T).get("x") == b"1"
    finally:
        srv.close()
    # With a secret, torch's client cannot authenticate: it is refused.
    srv = godist.TCPServer("127.0.0.1", 0, secret="s3cret")
    try:
        with pytest.raises(RuntimeError):
            dist.TCPStore("127.0.0.1", srv.port, timeout=datetime.timedelta(seconds=1))
    finally:
        srv.close()
