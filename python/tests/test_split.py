"""Child groups formed on their parent's connections: ``dist.split_group``
and ``dist.new_group`` on a godist world make no rendezvous. Every op of a
child is checked against gloo's child of the same ranks on the same inputs,
on every rank, at world sizes 3 and 4 (children of uneven sizes, ranks out
of order), and the child's creation is timed beside a rendezvous."""

from __future__ import annotations

import datetime
import time

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world

R = dist.ReduceOp
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
           "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8}
_OPS = {"float": [R.SUM, R.PRODUCT, R.MIN, R.MAX], "int": [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]}


def _has_backend() -> bool:
    import godist

    return godist._HAS_BACKEND


needs_backend = pytest.mark.skipif(not _has_backend(), reason=f"torch {torch.__version__} cannot subclass c10d's "
                                   "Backend in Python (needs 2.14+): split_group reaches no godist backend there")


def _value(dt, rank, k, n):
    """Rank rank's k-th input: small values whose products stay exact."""
    g = torch.Generator().manual_seed(1000 * rank + k)
    if dt.is_floating_point:
        return (torch.rand(n, generator=g) * 2 + 0.5).to(dt)
    return torch.randint(1, 4, (n,), generator=g).to(dt)


def _ops(group, rank, size, me):
    """Every op on group (this rank is me of size), returned as tensors."""
    out = {}
    for name, dt in _DTYPES.items():
        kind = "float" if dt.is_floating_point else "int"
        for op in _OPS[kind]:
            t = _value(dt, rank, int(op), 37)
            dist.all_reduce(t, op=op, group=group)
            out[f"all_reduce {name} {op}"] = t
    t = _value(torch.float32, rank, 50, 1000)
    dist.broadcast(t, group_src=size - 1, group=group)
    out["broadcast"] = t
    outs = [torch.empty(5) for _ in range(size)]
    dist.all_gather(outs, _value(torch.float32, rank, 51, 5), group=group)
    out["all_gather"] = torch.stack(outs)
    rs = torch.empty(3, dtype=torch.int64)
    dist.reduce_scatter_tensor(rs, _value(torch.int64, rank, 52, 3 * size), group=group)
    out["reduce_scatter"] = rs
    a2a = torch.empty(2 * size)
    dist.all_to_all_single(a2a, _value(torch.float32, rank, 53, 2 * size), group=group)
    out["all_to_all"] = a2a
    big = _value(torch.float32, rank, 54, 300_000)
    dist.all_reduce(big, group=group)
    out["all_reduce 1.2 MB"] = big
    if size > 1:  # point to point inside the child: a ring, in the child's numbering
        got = torch.empty(4)
        reqs = [dist.isend(torch.full((4,), float(rank)), group_dst=(me + 1) % size, group=group),
                dist.irecv(got, group_src=(me - 1) % size, group=group)]
        for r in reqs:
            r.wait()
        out["ring"] = got
    dist.barrier(group=group)
    return out


def _children_worker(rank, n, init_file):
    import godist

    gloo = init(rank, n, init_file)
    lists = [[2, 0], [1]] if n == 3 else [[3, 1], [0, 2]]
    mine = next(ls for ls in lists if rank in ls)
    me = mine.index(rank)
    child = dist.split_group(split_ranks=lists)
    gchild = dist.split_group(gloo, split_ranks=lists)
    news = [dist.new_group(sorted(ls)) for ls in lists]
    new = news[lists.index(mine)]
    gnews = [dist.new_group(sorted(ls), backend="gloo") for ls in lists]
    gnew = gnews[lists.index(mine)]
    res = {"split": _ops(child, rank, len(mine), me), "gloo_split": _ops(gchild, rank, len(mine), me),
           "new": _ops(new, rank, len(mine), sorted(mine).index(rank)),
           "gloo_new": _ops(gnew, rank, len(mine), sorted(mine).index(rank))}
    info = {"type": type(child).__name__, "rank": child.rank(), "size": child.size(),
            "offload": godist.topology(child)["offload"], "new_type": type(new).__name__,
            "new_offload": godist.topology(new)["offload"], "world": godist.topology()["offload"]}
    # The world keeps working beside its children.
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    info["world_sum"] = t.tolist()
    return {k: {op: v.tolist() for op, v in d.items()} for k, d in res.items()}, info


@needs_backend
@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [3, 4])
def test_children_match_gloo_on_every_op(n):
    """split_group and new_group children of a godist world give gloo's
    children's results, bitwise, on every rank, for every dtype and reduce
    op, the rooted and two-buffer ops and point-to-point, and carry their
    collectives on an arena of their own when their ranks share memory."""
    for rank, (res, info) in enumerate(run_world(_children_worker, n, timeout=280)):
        for op, want in res["gloo_split"].items():
            assert res["split"][op] == want, (rank, "split", op)
        for op, want in res["gloo_new"].items():
            assert res["new"][op] == want, (rank, "new_group", op)
        assert info["type"] == info["new_type"] == "GodistProcessGroup", info
        size = 1 if (n == 3 and rank == 1) else 2
        assert info["size"] == size, info
        assert info["world_sum"] == [n * (n + 1) / 2] * 3, info
        if info["world"] == "shm":
            assert info["offload"] == info["new_offload"] == ("shm" if size > 1 else ""), info


def _timing_worker(rank, n, init_file):
    import godist

    gloo = init(rank, n, init_file)
    lists = [[0, 2], [1, 3]]
    best = {"split": 1e9, "new_group": 1e9, "rendezvous": 1e9, "gloo_split": 1e9}
    store = dist.distributed_c10d._get_default_store()
    for i in range(4):
        dist.barrier()
        t0 = time.perf_counter()
        c = dist.split_group(split_ranks=lists)
        best["split"] = min(best["split"], time.perf_counter() - t0)
        dist.barrier()
        t0 = time.perf_counter()
        news = [dist.new_group(ls) for ls in lists]
        best["new_group"] = min(best["new_group"], time.perf_counter() - t0)
        # What a child cost before: a group of its own through the store.
        mine = lists[rank % 2]
        dist.barrier()
        t0 = time.perf_counter()
        own = godist.GodistProcessGroup(dist.PrefixStore(f"own-{i}-{rank % 2}", store), mine.index(rank), 2,
                                        datetime.timedelta(seconds=30), group_name=f"own-{i}-{rank % 2}")
        best["rendezvous"] = min(best["rendezvous"], time.perf_counter() - t0)
        dist.barrier(group=gloo)
        t0 = time.perf_counter()
        g = dist.split_group(gloo, split_ranks=lists)
        best["gloo_split"] = min(best["gloo_split"], time.perf_counter() - t0)
        t = torch.ones(4)
        for grp in (c, news[rank % 2], g):
            dist.all_reduce(t, group=grp)
        own.allreduce([t]).wait()
        assert t.tolist() == [16.0] * 4, t
        own.shutdown()
        for grp in [c, g] + news:
            dist.destroy_process_group(grp)
    return best


@needs_backend
@pytest.mark.timeout(200)
def test_children_are_made_without_a_rendezvous():
    """At 4 ranks a child by split_group or new_group takes a fraction of
    a group formed through the store, and less than gloo's split (in the
    same run: the best of four tries on each rank, the slowest rank's, as a
    group is made when its last rank has it)."""
    res = run_world(_timing_worker, 4, timeout=180)
    worst = {k: max(best[k] for best in res) for k in res[0]}
    assert worst["split"] * 4 < worst["rendezvous"], worst
    assert worst["new_group"] * 4 < worst["rendezvous"], worst
    assert worst["split"] < worst["gloo_split"], worst


def _left_worker(rank, n, init_file):
    gloo = init(rank, n, init_file)
    out = {}
    for how in ("abort", "destroy"):
        g = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=60))
        if rank < 2:
            dist.all_reduce(torch.ones(4), group=g)  # the child works
        t = torch.ones(4)
        if rank == 1:
            # Waiting for rank 0 when it leaves (abort), or coming after it
            # left (destroy): an error naming rank 0, long before the timeout.
            if how == "destroy":
                dist.barrier(group=gloo)
            start = time.monotonic()
            try:
                dist.all_reduce(t, group=g)
                out[how] = {"result": t.tolist()}
            except Exception as e:  # noqa: BLE001
                out[how] = {"error": str(e), "elapsed": time.monotonic() - start}
        elif rank == 0:
            if how == "abort":
                time.sleep(0.5)
                g._get_backend(torch.device("cpu")).abort()
            else:
                dist.destroy_process_group(g)
                dist.barrier(group=gloo)
        else:
            if how == "destroy":
                dist.barrier(group=gloo)
        dist.barrier(group=gloo)
        # The parent goes on.
        t = torch.ones(2)
        dist.all_reduce(t)
        assert t.tolist() == [3.0, 3.0], t
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_a_rank_leaving_a_child_fails_its_peers_at_once(transport):
    """A rank that aborts or destroys a child made on the parent's
    connections leaves them open; its peers in the child learn at once
    that it left (long before the child's 60 s timeout), as over a closed
    connection of a group of its own."""
    res = run_world(_left_worker, 3, timeout=100, env={"GODIST_TRANSPORT": transport})
    for how, r in res[1].items():
        assert "error" in r, (how, r)
        assert "rank 0" in r["error"], (how, r)
        if transport == "tcp":
            assert "shut the group down" in r["error"], (how, r)
        assert r["elapsed"] < 10, (how, r)
