"""godist inside torch's process-group model (torch 2.14+): the group's c10d
Backend, its capability flags and error state, torch's call forms, hooks,
the flight recorder, device routing, split_group and shrink_group, each
checked against gloo on the same inputs where gloo has the feature."""

from __future__ import annotations

import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world

C = torch._C._distributed_c10d


def _has_backend() -> bool:
    import godist

    return godist._HAS_BACKEND


needs_backend = pytest.mark.skipif(not _has_backend(), reason=f"torch {torch.__version__} cannot subclass c10d's "
                                   "Backend in Python (needs 2.14+): godist groups have no c10d Backend there")

_FLAGS = ("supports_splitting", "supports_shrinking", "supports_reconfigure", "supports_coalescing",
          "supports_window", "supports_abort_hooks", "supports_completion_hooks", "_supports_time_estimate")


def _flags_worker(rank, n, init_file):
    import godist

    gloo = init(rank, n, init_file)
    pg = dist.group.WORLD
    b = pg._get_backend(torch.device("cpu"))
    out = {"type": type(b).__name__, "same": b is pg._get_backend(torch.device("cpu")),
           "flags": {f: getattr(b, f) for f in _FLAGS},
           "alloc": b.supports_tensor_alloc(torch.device("cpu")),
           "error": str(b.get_error()), "gloo_error": str(gloo._get_backend(torch.device("cpu")).get_error()),
           "pg_window": pg.supports_window, "pg_reconfigure": pg.supports_reconfigure,
           "dist_reconfigure": dist._supports_reconfigure() if hasattr(dist, "_supports_reconfigure") else None,
           "name": b.name(), "rank": b.rank(), "size": b.size(), "options": b.options.backend,
           "seq0": b._get_sequence_number_for_group()}
    t = torch.ones(3)
    dist.all_reduce(t)
    out["seq1"] = b._get_sequence_number_for_group()
    out["sum"] = t.tolist()
    b.set_timeout(datetime.timedelta(seconds=7))
    out["timeout"] = b._g._timeout.total_seconds()
    out["group_of"] = godist.group_of(pg) is b._g
    return out


@needs_backend
@pytest.mark.timeout(120)
def test_backend_flags_error_and_timeout():
    """The group's cpu backend is a GodistBackend that answers every flag
    torch asks (none raises: each once fell through to torch's default and
    recursed), get_error, set_timeout and sequence numbers."""
    res = run_world(_flags_worker, 3, timeout=100)
    for r, out in enumerate(res):
        assert out["type"] == "GodistBackend" and out["same"], out
        assert out["flags"] == {"supports_splitting": True, "supports_shrinking": True,
                                "supports_reconfigure": True, "supports_coalescing": True,
                                "supports_window": False, "supports_abort_hooks": True,
                                "supports_completion_hooks": False, "_supports_time_estimate": False}, out
        assert out["alloc"] is False
        assert out["error"] == out["gloo_error"] == "ErrorType.SUCCESS"
        assert out["pg_window"] is False and out["pg_reconfigure"] is True and out["dist_reconfigure"] in (True, None)
        assert (out["name"], out["rank"], out["size"], out["options"]) == ("godist", r, 3, "godist")
        assert out["seq1"] == out["seq0"] + 1
        assert out["sum"] == [3.0] * 3
        assert out["timeout"] == 7.0 and out["group_of"]


def _forms(pg, rank, n):
    """Every shorthand call form of torch's ProcessGroup, run on pg; the
    results in order."""
    R = dist.ReduceOp
    res = []
    x = torch.arange(4, dtype=torch.float32) + rank
    pg.allreduce([x], R.MAX).wait()
    res.append(x)
    x = torch.arange(4, dtype=torch.float32) + rank
    pg.allreduce(x).wait()
    res.append(x)
    x = torch.arange(4, dtype=torch.float32) * (rank + 1)
    pg.allreduce(x, op=R.PRODUCT).wait()
    res.append(x)
    x = torch.full((3,), float(rank + 1))
    pg.broadcast(x, n - 1).wait()
    res.append(x)
    x = torch.full((3,), float(rank + 1))
    pg.reduce(x, 0, R.MIN).wait()
    if rank == 0:
        res.append(x)
    outs = [torch.zeros(2) for _ in range(n)]
    pg.allgather(outs, torch.full((2,), float(rank))).wait()
    res.extend(outs)
    outs = [torch.zeros(2) for _ in range(n)] if rank == 0 else []
    pg.gather(outs, torch.full((2,), float(rank * 10)), 0).wait()
    res.extend(outs)
    out = torch.zeros(2)
    ins = [torch.full((2,), float(i + 100)) for i in range(n)] if rank == 1 % n else []
    pg.scatter(out, ins, 1 % n).wait()
    res.append(out)
    out = torch.zeros(2)
    pg.reduce_scatter(out, [torch.full((2,), float(rank + i)) for i in range(n)], R.SUM).wait()
    res.append(out)
    out = torch.zeros(n * 2)
    pg.alltoall_base(out, torch.arange(n * 2, dtype=torch.float32) + 10 * rank, [], []).wait()
    res.append(out)
    pg.barrier(timeout=datetime.timedelta(seconds=30)).wait()
    return [t.tolist() for t in res]


def _forms_worker(rank, n, init_file):
    gloo = init(rank, n, init_file)
    return {"godist": _forms(dist.group.WORLD, rank, n), "gloo": _forms(gloo, rank, n),
            "backend": _forms(dist.group.WORLD._get_backend(torch.device("cpu")), rank, n)}  # itself before 2.14


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 3])
def test_call_forms_match_gloo(n):
    """pg.allreduce([t], ReduceOp.MAX), pg.allreduce(t), pg.broadcast(t, root),
    pg.reduce(t, root, op), pg.allgather(outs, t), ... give gloo's answers,
    on the group and on its backend."""
    for out in run_world(_forms_worker, n, timeout=100):
        assert out["godist"] == out["gloo"], out
        assert out["backend"] == out["gloo"], out


def _hooks_worker(rank, n, init_file):
    gloo = init(rank, n, init_file)
    seen = {}

    def ops(pg):
        t = torch.ones(4)
        dist.all_reduce(t, group=pg)
        dist.broadcast(t, 0, group=pg)
        outs = [torch.zeros(4) for _ in range(n)]
        dist.all_gather(outs, t, group=pg)
        big = torch.zeros(4 * n)
        dist.all_gather_into_tensor(big, t, group=pg)
        dist.reduce_scatter_tensor(t, big, group=pg)
        dist.all_to_all_single(torch.zeros(4 * n), big, group=pg)
        dist.barrier(group=pg)
        return t.tolist()

    results = {}
    for name, pg in (("godist", dist.group.WORLD), ("gloo", gloo)):
        calls = seen[name] = []
        pg.register_pre_hook(7, lambda a, calls=calls: calls.append(("pre", str(a.name), a.async_op)))
        pg.register_post_hook(7, lambda a, calls=calls: calls.append(("post", str(a.name))))
        results[name] = ops(pg)
        pg.unregister_pre_hook(7)
        pg.unregister_post_hook(7)
        results[name + "_after"] = ops(pg)
        calls.append("unregistered")
    return seen, results


@needs_backend
@pytest.mark.timeout(120)
def test_pre_and_post_hooks_fire_as_on_gloo():
    """Pre/post hooks registered on a godist group fire for every collective,
    with the same names and order as on a gloo group; unregistered, they
    stop, and results stay right either way."""
    for seen, results in run_world(_hooks_worker, 2, timeout=100):
        assert seen["godist"] == seen["gloo"], seen
        assert len(seen["godist"]) == 2 * 7 + 1, seen
        assert results["godist"] == results["gloo"] == results["godist_after"] == results["gloo_after"]


def _fr_worker(rank, n, init_file):
    import pickle

    gloo = init(rank, n, init_file)
    counts = {}
    for name, pg in (("godist", dist.group.WORLD), ("gloo", gloo)):
        t = torch.ones(8)
        for _ in range(2):
            dist.all_reduce(t, group=pg)
        dist.broadcast(t, 0, group=pg)
        dist.all_gather_into_tensor(torch.zeros(8 * n), t, group=pg)
        entries = pickle.loads(C._dump_fr_trace(backend=name)).get("entries", [])
        counts[name] = [e["profiling_name"].split(":")[-1] for e in entries]
    return counts


@needs_backend
@pytest.mark.timeout(120)
def test_flight_recorder_records_godist_collectives():
    """With TORCH_FR_BUFFER_SIZE set, torch's flight recorder holds an
    entry for each of 4 collectives on a godist group, as it does on gloo."""
    for counts in run_world(_fr_worker, 2, timeout=100, env={"TORCH_FR_BUFFER_SIZE": "100"}):
        assert counts["godist"][:3] == ["all_reduce", "all_reduce", "broadcast"], counts
        assert len(counts["godist"]) == len(counts["gloo"]) == 4, counts


def _compose_worker(rank, n, init_file):
    import godist

    init(rank, n, init_file, gloo_group=False)
    store = dist.PrefixStore("composed/", dist.distributed_c10d._get_default_store())
    pg = dist.ProcessGroup(store, rank, n)
    b = godist.GodistBackend(store, rank, n, datetime.timedelta(seconds=30), "composed")
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, b)
    pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
    pg._set_group_name("composed")
    t = torch.full((5,), float(rank + 1))
    pg.allreduce([t]).wait()
    u = torch.full((5,), float(rank))
    pg.broadcast([u], dist.BroadcastOptions()).wait()
    ok = pg._get_backend(torch.device("cpu")) is b
    b.shutdown()
    return t.tolist(), u.tolist(), ok


@needs_backend
@pytest.mark.timeout(120)
def test_users_compose_a_group_with_a_godist_backend():
    """A ProcessGroup built by the user, with a GodistBackend registered
    for cpu (as torchft and DeviceMesh helpers compose groups), runs its
    collectives on godist."""
    for t, u, ok in run_world(_compose_worker, 3, timeout=100):
        assert t == [6.0] * 5 and u == [0.0] * 5 and ok


def _mixed_worker(rank, n, init_file):
    import godist

    dist.init_process_group("cpu:godist,cuda:gloo", init_method=f"file://{init_file}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=60))
    pg = dist.group.WORLD
    cpu, cuda = pg._get_backend(torch.device("cpu")), pg._get_backend(torch.device("cuda"))
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    # A rank in no child group: torch cannot take None from a Python
    # backend's split, so godist's backend says why instead of crashing.
    try:
        child = dist.split_group(split_ranks=[[0]])
        split = ("ok", child.size())
    except RuntimeError as e:
        split = ("error", "none of the child groups" in str(e))
    u = torch.ones(2)
    dist.all_reduce(u)
    return type(pg).__name__, isinstance(cpu, godist.GodistBackend), type(cuda).__name__, t.tolist(), split, u.tolist()


@needs_backend
@pytest.mark.timeout(120)
def test_device_map_routes_cpu_to_godist_and_cuda_elsewhere():
    """init_process_group("cpu:godist,cuda:gloo"): torch's ProcessGroup
    routes CPU tensors to godist's backend and CUDA tensors to the other
    backend (gloo stands in for nccl on a host without a GPU)."""
    for r, (pg_type, cpu_is_godist, cuda_type, t, split, u) in enumerate(run_world(_mixed_worker, 2, timeout=100)):
        assert pg_type == "ProcessGroup" and cpu_is_godist and cuda_type == "ProcessGroupGloo"
        assert t == [3.0] * 4 and u == [2.0] * 2
        assert split == (("ok", 1) if r == 0 else ("error", True)), split


def _split_worker(rank, n, init_file):
    import godist

    gloo = init(rank, n, init_file)
    dist.barrier()
    t0 = time.perf_counter()
    child = dist.split_group(split_ranks=[[0, 2], [1, 3]])
    split_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    a = dist.new_group([0, 2])
    b = dist.new_group([1, 3])
    new_s = time.perf_counter() - t0
    mine = a if rank in (0, 2) else b
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t, group=child)
    u = torch.full((4,), float(rank + 1))
    dist.all_reduce(u, group=mine)
    dist.barrier(group=gloo)
    t0 = time.perf_counter()
    gchild = dist.split_group(gloo, split_ranks=[[0, 2], [1, 3]])
    gloo_split_s = time.perf_counter() - t0
    v = torch.full((4,), float(rank + 1))
    dist.all_reduce(v, group=gchild)
    # Ranks 2 and 3 are in no child group: they are not members.
    part = dist.split_group(split_ranks=[[0, 1]])
    member = part is not None and part != dist.GroupMember.NON_GROUP_MEMBER
    w = torch.full((2,), float(rank + 1))
    if member:
        dist.all_reduce(w, group=part)
    dist.barrier()
    return {"t": t.tolist(), "u": u.tolist(), "v": v.tolist(), "child_rank": child.rank(), "child_size": child.size(),
            "godist": isinstance(godist.group_of(child), godist._group.Group), "split_s": split_s, "new_s": new_s,
            "gloo_split_s": gloo_split_s, "member": member, "w": w.tolist()}


@needs_backend
@pytest.mark.timeout(150)
def test_split_group_forms_working_children():
    """dist.split_group on a godist group: each child sums over its own
    ranks, in the rank order given, as gloo's children do."""
    res = run_world(_split_worker, 4, timeout=130)
    for r, out in enumerate(res):
        want = [4.0] * 4 if r in (0, 2) else [6.0] * 4
        assert out["t"] == out["u"] == out["v"] == want, out
        assert out["child_size"] == 2 and out["child_rank"] == r // 2 and out["godist"], out
        assert out["member"] == (r < 2) and out["w"] == ([3.0] * 2 if r < 2 else [r + 1.0] * 2), out


def _shrink_worker(rank, n, init_file, flags):
    import signal

    init(rank, n, init_file, gloo_group=False)
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.barrier()
    if rank == n - 1:
        store.set("killed_at", repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    killed_at = float(store.get("killed_at"))
    new = dist.shrink_group([n - 1], shrink_flags=flags)
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t, group=new)
    after = time.time() - killed_at
    return {"t": t.tolist(), "size": new.size(), "rank": new.rank(), "after": after}


@needs_backend
@pytest.mark.timeout(150)
@pytest.mark.parametrize("flags", [0, 1], ids=["SHRINK_DEFAULT", "SHRINK_ABORT"])
def test_shrink_group_after_a_rank_is_killed(flags):
    """A rank of four is SIGKILLed; the three survivors shrink the group
    without it and their next collective sums over them, well within a
    second of the kill (gloo cannot shrink)."""
    res = run_world(_shrink_worker, 4, flags, timeout=130, expect_exit={3: None})
    for r, out in enumerate(res[:3]):
        assert out["t"] == [6.0] * 4 and out["size"] == 3 and out["rank"] == r, out
        assert out["after"] < 2.0, out


def _reconfigure_worker(rank, n, init_file):
    """torch 2.15's reconfigure scenarios (as its own tests of the API run
    them on gloo), one after another on one default group of n ranks."""
    import godist

    store = dist.FileStore(init_file + ".rc", n)
    dist.init_process_group("godist", rank=rank, world_size=n, store=store, timeout=datetime.timedelta(seconds=30),
                            enable_reconfigure=True)
    pg = dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    out = {"supports": (dist._supports_reconfigure(), backend.supports_reconfigure)}
    try:
        dist.all_reduce(torch.ones(1))
    except RuntimeError as e:
        out["before"] = str(e)

    def handles(key):
        store.set(f"{key}_{rank}", dist._get_reconfigure_handle())
        return [store.get(f"{key}_{r}").decode() for r in range(n)]

    def barrier(key):
        store.set(f"{key}_{rank}", "1")
        for r in range(n):
            store.get(f"{key}_{r}")

    def reconf(uuid, hs, timeout=30):
        dist._reconfigure(uuid, hs, timeout=datetime.timedelta(seconds=timeout)).wait()

    def total():
        t = torch.full((4,), dist.get_rank() + 1.0)
        dist.all_reduce(t)
        return t[0].item()

    everyone = handles("init")
    reconf(100, everyone)
    out["basic"] = (dist.get_rank(), dist.get_world_size(), total())
    send, recv = torch.full((4,), rank + 1.0), torch.zeros(4)
    if rank % 2 == 0:
        sw, rw = backend.send([send], (rank + 1) % n, 0), backend.recv([recv], (rank - 1) % n, 0)
    else:
        rw, sw = backend.recv([recv], (rank - 1) % n, 0), backend.send([send], (rank + 1) % n, 0)
    sw.wait()
    rw.wait()
    out["p2p"] = recv[0].item()
    # shrink: the middle rank left out, the others renumbered
    mid = n // 2
    if rank != mid:
        reconf(200, [h for r, h in enumerate(everyone) if r != mid])
        out["shrink"] = (dist.get_rank(), dist.get_world_size(), total())
    barrier("shrunk")
    # every rank alone, then all together again, in handle order (a set)
    reconf(300 + rank, [dist._get_reconfigure_handle()])
    out["alone"] = (dist.get_rank(), dist.get_world_size(), total())
    reconf(400, set(everyone))
    out["set"] = (dist.get_rank(), dist.get_world_size(), total(), sorted(everyone).index(everyone[rank]))
    # merge and split
    half = n // 2
    reconf(500 if rank < half else 501, everyone[:half] if rank < half else everyone[half:])
    out["split"] = (dist.get_world_size(), total())
    reconf(502, everyone)
    out["merge"] = total()
    # a member that does not come: every other fails within the timeout,
    # keeps its group, and a retry without it succeeds
    if rank != n - 1:
        t0 = time.monotonic()
        try:
            reconf(600, everyone, timeout=3)
            out["missing"] = "formed"
        except Exception as e:  # noqa: BLE001
            out["missing"] = (type(e).__name__, round(time.monotonic() - t0, 1))
        out["kept"] = dist.get_world_size()
        reconf(601, everyone[:-1])
        out["retry"] = (dist.get_world_size(), total())
    barrier("retried")
    reconf(700 + rank, [dist._get_reconfigure_handle()])
    try:
        reconf(700 + rank, [dist._get_reconfigure_handle()])
    except RuntimeError as e:
        out["reuse"] = str(e)
    out["handle_same"] = dist._get_reconfigure_handle() == everyone[rank]
    out["godist"] = isinstance(godist.group_of(pg), godist._group.Group)
    return out


@needs_backend
@pytest.mark.timeout(150)
def test_reconfigure_grows_shrinks_and_retries():
    """dist._reconfigure on a group made with enable_reconfigure=True: ranks
    by list position or chosen for a set, shrink, every rank alone and back,
    split and merge, a member that never comes (every other rank fails
    within the timeout, keeps its group and retries), a reused uuid."""
    n = 3
    res = run_world(_reconfigure_worker, n, timeout=130)
    for r, out in enumerate(res):
        assert out["supports"] == (True, True), out
        assert "enable_reconfigure=True" in out["before"], out
        assert out["basic"] == (r, n, 6.0), out
        assert out["p2p"] == ((r - 1) % n) + 1.0, out
        if r != n // 2:
            assert out["shrink"] == (r if r < n // 2 else r - 1, n - 1, 1.0 + 2.0), out
        assert out["alone"] == (0, 1, 1.0), out
        assert out["set"][0] == out["set"][3] and out["set"][1:3] == (n, 6.0), out
        assert out["split"] == ((1, 1.0) if r < n // 2 else (2, 3.0)), out
        assert out["merge"] == 6.0, out
        if r != n - 1:
            assert out["missing"][0] in ("GodistTimeoutError", "DistStoreError", "DistBackendError"), out
            assert out["missing"][1] < 10, out
            assert out["kept"] == n and out["retry"] == (n - 1, 3.0), out
        assert "already used" in out["reuse"], out
        assert out["handle_same"] and out["godist"], out
