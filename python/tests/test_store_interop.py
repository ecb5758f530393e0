"""godist's stores interoperate with torch's, in real processes:

* a torch TCPStore client against a godist server, and a godist client
  against torch's libuv and classic servers (including the "init/"
  world-size registration each side's master waits for);
* torch's FileStore and godist's sharing one file, including the clean-up
  when the last opener closes (in both orders);
* init_process_group("gloo", store=godist.TCPStore(...)) and
  init_process_group("godist", store=godist.TCPStore(...)) with 3 ranks, the
  latter through the Go rendezvous path; mixed with a torch store and the
  Python path;
* a load test (threads, no subprocess) of torch and godist clients against
  a godist server and torch's server in the same run, printing ops/s.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import socket
import threading
import time

import pytest
import torch
import torch.distributed as dist

from harness import run_world

T = datetime.timedelta(seconds=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(cond, what, limit=30.0):
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _sync(s, rank, name):
    """A two-rank barrier on store s."""
    s.set(f"sync/{name}/{rank}", "1")
    s.wait([f"sync/{name}/0", f"sync/{name}/1"], T)


def _exchange(s, rank, queues=True):
    """Two ranks, each on its own store object (torch's or godist's) over one
    server or file, exercise every operation on each other's keys."""
    me, other = f"r{rank}", f"r{1 - rank}"
    out = {}
    s.set(f"{me}/hello", f"from {rank}")
    s.wait([f"{other}/hello"], T)
    out["hello"] = s.get(f"{other}/hello").decode()
    s.add("ctr", rank + 1)
    s.append("app", me)
    s.multi_set([f"{me}/a", f"{me}/b"], [b"1", bytes([0, 255])])
    if queues:
        s.queue_push(f"q/{other}", me)
        out["pop"] = s.queue_pop(f"q/{me}").decode()
    _sync(s, rank, "written")
    out["ctr"] = s.get("ctr").decode()
    out["app_len"] = len(s.get("app"))
    out["multi"] = [list(v) for v in s.multi_get([f"{other}/a", f"{other}/b"])]
    out["check"] = [s.check([f"{other}/a"]), s.check([f"{other}/nope"])]
    if rank == 0:
        out["cs"] = [s.compare_set("cs", "", "first").decode(), s.compare_set("cs", "zzz", "no").decode()]
        s.set("late", "arrives")  # wakes rank 1's wait below
    else:
        s.wait(["late"], T)
        out["cs"] = [s.get("cs").decode(), s.compare_set("cs", "first", "second").decode()]
    try:
        s.wait([f"{me}/never"], datetime.timedelta(milliseconds=100))
        out["timeout"] = "no error"
    except Exception as e:  # noqa: BLE001 - compare what each side raises
        out["timeout"] = f"{type(e).__name__}: {e}"
    _sync(s, rank, "read")
    if rank == 0:
        out["deleted"] = s.delete_key(f"{me}/a")
    _sync(s, rank, "deleted")
    out["other_a_gone"] = not s.check([f"{other}/a"]) if rank == 1 else None
    # Count in turn, so that nothing is written while a rank counts: rank 1
    # sees exactly one key more ("counted/0").
    if rank == 1:
        s.wait(["counted/0"], T)
    out["num_keys"] = s.num_keys()
    out["keys"] = sorted(s.list_keys())
    s.set(f"counted/{rank}", "1")
    if rank == 0:
        s.wait(["counted/1"], T)
    return out


def _check_exchange(res, godist_side, prefix="/", queues=True):
    r0, r1 = res
    assert r0["hello"] == "from 1" and r1["hello"] == "from 0"
    assert r0["ctr"] == r1["ctr"] == "3"
    assert r0["app_len"] == r1["app_len"] == 4
    assert r0["multi"] == r1["multi"] == [[49], [0, 255]]
    assert r0["check"] == r1["check"] == [True, False]
    assert r0["cs"] == ["first", "first"]  # present and mismatched: the current value
    assert r1["cs"] == ["first", "second"]
    if queues:
        assert r0["pop"] == "r1" and r1["pop"] == "r0"
    for rank, r in enumerate(res):
        assert r["timeout"].startswith("DistStoreError: ") or r["timeout"].startswith("RuntimeError: "), r["timeout"]
        assert "imeout" in r["timeout"], r["timeout"]
        if godist_side[rank]:  # torch's FileStore says only "Wait timeout"; torch's TCPStore and godist name keys
            assert f"wait timeout after 100ms, keys: {prefix}r{rank}/never" in r["timeout"], r["timeout"]
    assert r1["other_a_gone"]
    assert r1["num_keys"] == r0["num_keys"] + 1
    assert r1["keys"] == sorted(r0["keys"] + ["counted/0"])


def _tcp_world(rank, n, init_file, port, server, client):
    """Rank 0 hosts a `server` ("godist"/"torch"/"torch-classic") master
    with world_size=2 (it waits for both clients' "init/"); rank 1 connects
    with a `client` ("godist"/"torch") store."""
    import godist

    libuv = server != "torch-classic"
    if rank == 0:
        if server == "godist":
            s = godist.TCPStore("127.0.0.1", port, 2, True, timeout=T)
        else:
            s = dist.TCPStore("127.0.0.1", port, 2, True, timeout=T, use_libuv=libuv)
    else:
        mk = godist.TCPStore if client == "godist" else dist.TCPStore
        s = mk("127.0.0.1", port, 2, False, timeout=T, use_libuv=libuv)
    out = _exchange(s, rank, queues=libuv)
    out["type"] = type(s).__module__
    if not libuv and rank == 1:
        try:
            s.queue_push("q", "x")
            out["legacy_queue"] = "no error"
        except NotImplementedError as e:
            out["legacy_queue"] = str(e)
    _sync(s, rank, "bye")
    # The rank that hosts the server leaves last, so the other rank's last
    # reply is never cut off by the server going away.
    if rank == 1:
        s.set("done/1", "1")
    else:
        s.wait(["done/1"], T)
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("server,client", [("godist", "torch"), ("torch", "godist"), ("torch-classic", "godist")])
def test_tcpstore_interop(server, client):
    res = run_world(_tcp_world, 2, free_port(), server, client, timeout=150)
    _check_exchange(res, [True, True], queues=server != "torch-classic")
    assert res[0]["num_keys"] >= 1  # counts "init/" (registered by both)
    assert ("godist" in res[0]["type"]) == (server == "godist")
    assert ("godist" in res[1]["type"]) == (client == "godist")
    if server == "torch-classic":
        assert res[1]["legacy_queue"] == "queues not implemented on legacy TCPStore backend"


def _file_world(rank, n, init_file):
    """Rank 0 uses torch's FileStore, rank 1 godist's, on two shared files:
    on file A torch closes first, on file B godist does; the last closer
    removes the file (world_size=2)."""
    import godist

    pa, pb = init_file + ".a", init_file + ".b"
    mk = dist.FileStore if rank == 0 else godist.FileStore
    a = mk(pa, 2)
    b = mk(pb, 2)
    out = _exchange(a, rank, queues=False)
    out["b"] = _exchange(b, rank, queues=False)
    _sync(a, rank, "both_done")
    closed = lambda s: "leanup/" in s.list_keys()  # noqa: E731 - the "cleanup/" record of a close
    if rank == 0:
        del a  # torch closes A first
        gc.collect()
        _until(lambda: closed(b), "godist to close B")
        out["b_exists_before_last_close"] = os.path.exists(pb)
        del b
        gc.collect()
        out["b_exists_after"] = os.path.exists(pb)
    else:
        b.close()  # godist closes B first
        _until(lambda: closed(a), "torch to close A")
        out["a_exists_before_last_close"] = os.path.exists(pa)
        a.close()
        out["a_exists_after"] = os.path.exists(pa)
    return out


@pytest.mark.timeout(180)
def test_filestore_interop_and_cleanup():
    res = run_world(_file_world, 2, timeout=150)
    _check_exchange(res, [False, True], prefix="", queues=False)
    _check_exchange([r["b"] for r in res], [False, True], prefix="", queues=False)
    assert "efcount/" in res[0]["keys"]  # torch's list_keys quirk, matched by godist
    assert res[1]["a_exists_before_last_close"] and not res[1]["a_exists_after"]
    assert res[0]["b_exists_before_last_close"] and not res[0]["b_exists_after"]


def _pg_world(rank, n, init_file, port, backend, stores):
    """init_process_group(backend, store=...) with 3 ranks; stores[rank] is
    "godist" or "torch" (rank 0 hosts the server)."""
    import godist
    from godist import _rendezvous

    timeout = datetime.timedelta(seconds=60)
    mk = godist.TCPStore if stores[rank] == "godist" else dist.TCPStore
    store = mk("127.0.0.1", port, n, rank == 0, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=n, timeout=timeout)
    out = {"init_stats": dict(_rendezvous.stats)}
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    out["sum"] = t.tolist()
    g = dist.new_group(backend=backend)  # a godist world splits it: no rendezvous
    out["new_group_stats"] = dict(_rendezvous.stats)
    t = torch.ones(2)
    dist.all_reduce(t, group=g)
    out["sub_sum"] = t.tolist()
    dist.barrier(group=g)
    if backend == "godist":
        # A group formed through the store, rank 2 on the Python path.
        if rank == 2:
            os.environ["GODIST_STORE_RENDEZVOUS"] = "0"
        own = godist.GodistProcessGroup(dist.PrefixStore("own/", store), rank, n, timeout, group_name="own")
        os.environ.pop("GODIST_STORE_RENDEZVOUS", None)
        t = torch.ones(2)
        own.allreduce([t]).wait()
        out["own_sum"] = t.tolist()
        own.shutdown()
    objs = [None] * n
    dist.all_gather_object(objs, rank)
    out["objs"] = objs
    out["stats"] = dict(_rendezvous.stats)
    dist.destroy_process_group()
    store.set(f"bye/{rank}", "1")
    if rank == 0:
        store.wait([f"bye/{r}" for r in range(n)])
    if hasattr(store, "close"):
        store.close()
    return out


def _check_pg(res, n=3):
    for r in res:
        assert r["sum"] == [6.0] * 4
        assert r["sub_sum"] == [float(n)] * 2
        assert r["objs"] == list(range(n))


@pytest.mark.timeout(240)
def test_init_gloo_on_godist_tcpstore():
    res = run_world(_pg_world, 3, free_port(), "gloo", ["godist"] * 3, timeout=200)
    _check_pg(res)


@pytest.mark.timeout(240)
def test_init_godist_on_godist_tcpstore_uses_go_rendezvous():
    res = run_world(_pg_world, 3, free_port(), "godist", ["godist"] * 3, timeout=200)
    _check_pg(res)
    for r in res:
        assert r["init_stats"] == {"go": 1, "python": 0}, "the default group must rendezvous in Go"
        assert r["new_group_stats"] == r["init_stats"], "new_group splits from the world without a rendezvous"
        assert r["own_sum"] == [3.0] * 2
    # a group through the store: ranks 0 and 1 in Go, rank 2 forced onto the Python path; same keys, so they meet
    assert res[0]["stats"] == res[1]["stats"] == {"go": 2, "python": 0}
    assert res[2]["stats"] == {"go": 1, "python": 1}


@pytest.mark.timeout(240)
def test_init_godist_mixed_torch_server_godist_clients():
    res = run_world(_pg_world, 3, free_port(), "godist", ["torch", "godist", "godist"], timeout=200)
    _check_pg(res)
    assert res[0]["init_stats"] == {"go": 0, "python": 1}  # torch store: the Python path
    assert res[1]["init_stats"] == res[2]["init_stats"] == {"go": 1, "python": 0}


# ----- load ----------------------------------------------------------------------

def _load_client(s, cid, ops):
    """Mixed operations on one client; returns how many store calls it made."""
    key = lambda j: f"c{cid}/k{j % 16}"  # noqa: E731
    calls = 0
    for j in range(ops):
        m = j % 10
        if m in (0, 1):
            s.set(key(j), f"{cid}-{j}")
        elif m in (2, 3):
            s.get(key(j - 2))
        elif m == 4:
            s.add(f"c{cid}/ctr", 1)
            s.add("shared/ctr", 1)
            calls += 1
        elif m == 5:
            s.compare_set(key(j), "x", "y")
        elif m == 6:
            s.append(f"c{cid}/app", "xy")
        elif m == 7:
            s.multi_set([key(j), key(j + 1)], [b"a", b"b"])
        elif m == 8:
            s.multi_get([key(j)])
        else:
            s.check([key(j)])
        calls += 1
    return calls


def _load_run(port, client_kind, clients, ops):
    import godist

    mk = godist.TCPStore if client_kind == "godist" else dist.TCPStore
    stores = [mk("127.0.0.1", port, timeout=T) for _ in range(clients)]
    calls = [0] * clients
    errors = []

    def run(i):
        try:
            calls[i] = _load_client(stores[i], i, ops)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    assert not errors, errors[:3]
    adds = sum(1 for j in range(ops) if j % 10 == 4) * clients
    shared = int(stores[0].get("shared/ctr"))
    stores[0].delete_key("shared/ctr")
    for s in stores:
        if hasattr(s, "close"):
            s.close()
    assert shared == adds, "lost ADDs"
    return sum(calls) / elapsed


@pytest.mark.timeout(600)
def test_load_godist_vs_torch_server():
    """CLIENTSxOPS from GODIST_STORE_LOAD (default 16x1000; the Go test in
    store/load_test.go covers 64 clients), GODIST_STORE_LOAD_ROUNDS rounds
    (default 2) with the servers' order alternating; the best round of each
    pairing counts. Prints ops/s; with GODIST_STORE_LOAD_REPORT=path also
    writes them as JSON."""
    import godist

    clients, ops = (int(x) for x in os.environ.get("GODIST_STORE_LOAD", "16x1000").split("x"))
    rounds = int(os.environ.get("GODIST_STORE_LOAD_ROUNDS", "2"))
    gsrv = godist.TCPServer("127.0.0.1", 0)
    tsrv = dist.TCPStore("127.0.0.1", 0, None, True, timeout=T)  # torch's default (libuv) server
    servers = [("godist", gsrv.port), ("torch", tsrv.port)]
    results = {}
    try:
        for rnd in range(rounds):
            for client in ("torch", "godist"):
                for server, port in (servers if rnd % 2 == 0 else servers[::-1]):
                    k = f"{client} clients -> {server} server"
                    results[k] = max(results.get(k, 0.0), _load_run(port, client, clients, ops))
    finally:
        gsrv.close()
    results["ratio godist/torch server (torch clients)"] = (results["torch clients -> godist server"]
                                                            / results["torch clients -> torch server"])
    results["ratio godist/torch server (godist clients)"] = (results["godist clients -> godist server"]
                                                             / results["godist clients -> torch server"])
    results["clients"], results["ops_per_client"], results["rounds"] = clients, ops, rounds
    print("\nstore load:", json.dumps(results, indent=1))
    report = os.environ.get("GODIST_STORE_LOAD_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump(results, f, indent=1)
    for k, v in results.items():
        if k.endswith("server"):
            assert v > 0, k
