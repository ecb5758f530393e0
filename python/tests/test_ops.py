"""The rest of the c10d surface on godist, at world sizes 1-4: rooted ops,
list forms, uneven all_to_all_single, point-to-point (any source, tags,
batch_isend_irecv, self), coalesced forms, monitored_barrier, object
collectives, subgroups, and init/destroy without leaks. Compared with gloo
where gloo supports the op, else with a hand-computed expectation."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

import godist
from harness import init, run_world
from refs import make_input, reduce_op, reference


def rooted_worker(rank, n, init_file):
    gloo = init(rank, n, init_file)
    bad = []

    def check(what, got, want):
        if not torch.equal(got, want):
            bad.append(f"{what}: {got.tolist()[:6]} != {want.tolist()[:6]}")

    for root in range(n):
        for op in ("SUM", "MAX", "PRODUCT", "AVG", "PREMUL_SUM"):
            x = make_input(rank, torch.float64, 9, op)
            ours = x.clone()
            dist.reduce(ours, dst=root, op=reduce_op(op))
            if rank == root:
                check(f"reduce {op} root {root}", ours, reference(op, [make_input(r, torch.float64, 9, op) for r in range(n)], torch.float64))
            else:
                check(f"reduce {op} leaves non-root input alone", ours, x)
            if op in ("SUM", "MAX", "PRODUCT"):
                g = x.clone()
                dist.reduce(g, dst=root, op=reduce_op(op), group=gloo)
                if rank == root:
                    check(f"reduce {op} vs gloo", ours, g)
        # gather / scatter
        mine = make_input(rank, torch.int32, 5)
        gl = [torch.zeros(5, dtype=torch.int32) for _ in range(n)] if rank == root else None
        dist.gather(mine, gl, dst=root)
        if rank == root:
            for r in range(n):
                check(f"gather from {r}", gl[r], make_input(r, torch.int32, 5))
        sl = [make_input(100 + r, torch.int32, 5) for r in range(n)] if rank == root else None
        out = torch.zeros(5, dtype=torch.int32)
        dist.scatter(out, sl, src=root)
        check(f"scatter root {root}", out, make_input(100 + rank, torch.int32, 5))
        g_out = torch.zeros(5, dtype=torch.int32)
        dist.scatter(g_out, sl, src=root, group=gloo)
        check("scatter vs gloo", out, g_out)
    # reduce_scatter (list form)
    ins = [make_input(rank * n + i, torch.float32, 4) for i in range(n)]
    out = torch.zeros(4)
    dist.reduce_scatter(out, ins)
    check("reduce_scatter list", out, sum(make_input(r * n + rank, torch.float32, 4) for r in range(n)))
    # all_to_all (list form) vs gloo
    ins = [make_input(rank * 10 + j, torch.float32, 3) for j in range(n)]
    outs = [torch.zeros(3) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for j in range(n):
        check(f"all_to_all from {j}", outs[j], make_input(j * 10 + rank, torch.float32, 3))
    gouts = [torch.zeros(3) for _ in range(n)]
    try:
        dist.all_to_all(gouts, ins, group=gloo)
    except RuntimeError as e:  # torch 2.11's gloo has no list form (refused on every rank, before any traffic)
        if "does not support alltoall" not in str(e):
            raise
    else:
        for j in range(n):
            check(f"all_to_all vs gloo {j}", outs[j], gouts[j])
    # all_to_all_single: even, uneven with zero-sized splits, 2-D rows
    x = torch.arange(4 * n, dtype=torch.float32) + 100 * rank
    y = torch.zeros(4 * n)
    dist.all_to_all_single(y, x)
    gy = torch.zeros(4 * n)
    dist.all_to_all_single(gy, x, group=gloo)
    check("all_to_all_single even vs gloo", y, gy)
    send_splits = [(rank + j) % 3 for j in range(n)]          # rank -> j sends (rank+j)%3 rows
    recv_splits = [(j + rank) % 3 for j in range(n)]
    x = torch.stack([torch.full((2,), float(rank * 100 + k)) for k in range(sum(send_splits))]) if sum(send_splits) else torch.zeros(0, 2)
    y = torch.zeros(sum(recv_splits), 2)
    dist.all_to_all_single(y, x, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    gy = torch.zeros_like(y)
    dist.all_to_all_single(gy, x, output_split_sizes=recv_splits, input_split_sizes=send_splits, group=gloo)
    check("all_to_all_single uneven vs gloo", y, gy)
    # large blocks (64 KiB and more) are read straight out of the senders'
    # memory between ranks on one host; uneven, with an empty block
    rows = [0 if (rank + j) % 4 == 3 else 20_000 + 3_000 * ((rank + j) % 4) for j in range(n)]
    cols = [0 if (j + rank) % 4 == 3 else 20_000 + 3_000 * ((j + rank) % 4) for j in range(n)]
    x = torch.arange(sum(rows), dtype=torch.float32) + 1e6 * rank
    y = torch.full((sum(cols),), -1.0)
    dist.all_to_all_single(y, x, output_split_sizes=cols, input_split_sizes=rows)
    gy = torch.zeros_like(y)
    dist.all_to_all_single(gy, x, output_split_sizes=cols, input_split_sizes=rows, group=gloo)
    check("all_to_all_single large uneven vs gloo", y, gy)
    ins = [torch.full((70_000,), float(rank * 10 + j)) for j in range(n)]
    outs = [torch.zeros(70_000) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for j in range(n):
        check(f"all_to_all large from {j}", outs[j], torch.full((70_000,), float(j * 10 + rank)))
    return bad


def p2p_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    bad = []
    if n > 1:
        # recv from any source reports the sender. Its own tag: a rank done
        # with this phase may already send the next phases' messages to rank
        # 0, and a tag-0 receive from any source could match those.
        if rank == 0:
            got = set()
            for _ in range(n - 1):
                t = torch.zeros(2)
                w = dist.irecv(t, src=None, tag=7)
                w.wait()
                src = w._source_rank()
                if t[0].item() != src:
                    bad.append(f"any-source: payload {t.tolist()} from {src}")
                got.add(src)
            if got != set(range(1, n)):
                bad.append(f"any-source senders {got}")
        else:
            dist.send(torch.full((2,), float(rank)), dst=0, tag=7)
        # tags match sends to receives even when posted in the other order
        right, left = (rank + 1) % n, (rank - 1) % n
        ws = [dist.isend(torch.full((1,), float(10 * rank + tag)), right, tag=tag) for tag in (1, 2, 3)]
        outs = {tag: torch.zeros(1) for tag in (3, 1, 2)}
        rs = [dist.irecv(outs[tag], left, tag=tag) for tag in (3, 1, 2)]
        for w in ws + rs:
            w.wait()
        for tag, t in outs.items():
            if t.item() != 10 * left + tag:
                bad.append(f"tag {tag}: got {t.item()}")
        # batch_isend_irecv ring: every rank sends and receives in one batch
        send = torch.full((4,), float(rank))
        recv = torch.zeros(4)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)])
        for r in reqs:
            r.wait()
        if not torch.equal(recv, torch.full((4,), float(left))):
            bad.append(f"batch_isend_irecv ring: {recv.tolist()}")
    # isend/irecv to self
    s, r = torch.full((3,), 7.0), torch.zeros(3)
    ws = dist.isend(s, dst=rank)
    wr = dist.irecv(r, src=rank)
    ws.wait()
    wr.wait()
    if not torch.equal(r, s):
        bad.append(f"self isend/irecv: {r.tolist()}")
    return bad


def coalesced_worker(rank, n, init_file):
    gloo = init(rank, n, init_file)
    bad = []
    ts = [make_input(rank, torch.float32, k + 1) for k in range(4)]
    # fast path: allreduce_coalesced through the coalescing manager
    for async_ops in (False, True):
        xs = [t.clone() for t in ts]
        with dist._coalescing_manager(async_ops=async_ops) as cm:
            for x in xs:
                dist.all_reduce(x)
        if async_ops:
            cm.wait()
        for k, x in enumerate(xs):
            want = reference("SUM", [make_input(r, torch.float32, k + 1) for r in range(n)], torch.float32)
            if not torch.equal(x, want):
                bad.append(f"coalesced all_reduce async={async_ops} #{k}")
    # device path: _start_coalescing/_end_coalescing
    xs = [t.clone() for t in ts]
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        for x in xs:
            dist.all_reduce(x)
    cm.wait()
    for k, x in enumerate(xs):
        if not torch.equal(x, reference("SUM", [make_input(r, torch.float32, k + 1) for r in range(n)], torch.float32)):
            bad.append(f"device-coalesced all_reduce #{k}")
    # all_gather_into_tensor and reduce_scatter_tensor coalesced
    outs = [torch.zeros(n * (k + 1)) for k in range(3)]
    with dist._coalescing_manager():
        for k in range(3):
            dist.all_gather_into_tensor(outs[k], ts[k])
    for k in range(3):
        if not torch.equal(outs[k], torch.cat([make_input(r, torch.float32, k + 1) for r in range(n)])):
            bad.append(f"coalesced all_gather_into_tensor #{k}")
    rs_out = [torch.zeros(2) for _ in range(3)]
    ins = [make_input(rank + 10 * k, torch.float32, 2 * n) for k in range(3)]
    with dist._coalescing_manager():
        for k in range(3):
            dist.reduce_scatter_tensor(rs_out[k], ins[k], op=dist.ReduceOp.AVG)
    for k in range(3):
        full = reference("AVG", [make_input(r + 10 * k, torch.float32, 2 * n) for r in range(n)], torch.float32)
        try:
            torch.testing.assert_close(rs_out[k], full[2 * rank:2 * rank + 2])
        except AssertionError as e:
            bad.append(f"coalesced reduce_scatter_tensor AVG #{k}: {e}")
    # all_gather_coalesced (deprecated API) vs gloo
    outl = [[torch.zeros(k + 1) for k in range(2)] for _ in range(n)]
    w = dist.all_gather_coalesced(outl, ts[:2], async_op=True)
    w.wait()
    for r in range(n):
        for k in range(2):
            if not torch.equal(outl[r][k], make_input(r, torch.float32, k + 1)):
                bad.append(f"all_gather_coalesced [{r}][{k}]")
    return bad


def monitored_worker(rank, n, init_file, late_rank):
    import datetime
    import time

    init(rank, n, init_file, gloo_group=False)
    godist.monitored_barrier(timeout=datetime.timedelta(seconds=2))
    if rank == late_rank:
        time.sleep(4)
        return None
    try:
        godist.monitored_barrier(timeout=datetime.timedelta(seconds=1), wait_all_ranks=True)
    except Exception as e:  # noqa: BLE001
        return str(e)
    return "no error"


def torch_monitored_worker(rank, n, init_file, late_rank):
    """torch's own dist.monitored_barrier on a godist group."""
    import datetime
    import time

    init(rank, n, init_file, gloo_group=False)
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=5))
    except ValueError as e:  # torch itself refuses every backend but gloo (torch < 2.15 checks the name)
        return {"refused": str(e)}
    if rank == late_rank:
        time.sleep(4)
        return {"late": True}
    start = time.monotonic()
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=1), wait_all_ranks=True)
    except Exception as e:  # noqa: BLE001
        return {"error": str(e), "elapsed": time.monotonic() - start}
    return {"error": None}


def objects_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    bad = []
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank, "data": list(range(rank))})
    if objs != [{"rank": r, "data": list(range(r))} for r in range(n)]:
        bad.append(f"all_gather_object {objs}")
    lst = [f"hello-{rank}", 3.5] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    if lst != ["hello-0", 3.5]:
        bad.append(f"broadcast_object_list {lst}")
    out = [None] * n if rank == 0 else None
    dist.gather_object(("g", rank), out, dst=0)
    if rank == 0 and out != [("g", r) for r in range(n)]:
        bad.append(f"gather_object {out}")
    got = [None]
    dist.scatter_object_list(got, [{"to": r} for r in range(n)] if rank == 0 else None, src=0)
    if got != [{"to": rank}]:
        bad.append(f"scatter_object_list {got}")
    if n > 1:
        if rank == 0:
            dist.send_object_list([{"x": 1}, "two"], dst=1)
        elif rank == 1:
            recv = [None, None]
            dist.recv_object_list(recv, src=0)
            if recv != [{"x": 1}, "two"]:
                bad.append(f"recv_object_list {recv}")
    return bad


def groups_worker(rank, n, init_file):
    gloo = init(rank, n, init_file)
    bad = []
    evens = [r for r in range(n) if r % 2 == 0]
    odds = [r for r in range(n) if r % 2 == 1]
    g_even = dist.new_group(evens, backend="godist")
    g_odd = dist.new_group(odds, backend="godist") if odds else None
    g_over = dist.new_group(list(range(min(n, 2))), backend="godist")  # overlaps with g_even
    g_tail = dist.new_group(list(range(n - 1, -1, -1)), backend="godist")  # all ranks, listed reversed
    g_tail_gloo = dist.new_group(list(range(n - 1, -1, -1)), backend="gloo")
    g_local = dist.new_group([rank], backend="godist", use_local_synchronization=True)
    mine = g_even if rank % 2 == 0 else g_odd
    members = evens if rank % 2 == 0 else odds
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=mine)
    if t.item() != sum(members):
        bad.append(f"disjoint group all_reduce {t.item()}")
    # broadcast from a global rank that is group rank 1 (maps global -> group)
    if len(members) > 1:
        b = torch.tensor([float(rank)])
        dist.broadcast(b, src=members[1], group=mine)
        if b.item() != members[1]:
            bad.append(f"subgroup broadcast from global {members[1]}: {b.item()}")
        r = torch.zeros(1)
        if dist.get_rank(mine) == 0:
            dist.send(torch.tensor([42.0]), dst=members[1], group=mine)
        elif dist.get_rank(mine) == 1:
            dist.recv(r, src=members[0], group=mine)
            if r.item() != 42.0:
                bad.append("subgroup send/recv by global rank")
    if rank < 2:
        o = torch.tensor([1.0])
        dist.all_reduce(o, group=g_over)
        if o.item() != min(n, 2):
            bad.append("overlapping group")
    else:
        if dist.get_rank(g_over) != -1:
            bad.append("non-member rank should be -1")
    # a group listed in reverse: same rank mapping as gloo's
    x = torch.tensor([float(rank)])
    dist.broadcast(x, src=n - 1, group=g_tail)
    if x.item() != n - 1:
        bad.append(f"reversed group broadcast {x.item()}")
    out = [torch.zeros(1) for _ in range(n)]
    dist.all_gather(out, torch.tensor([float(rank)]), group=g_tail)
    gout = [torch.zeros(1) for _ in range(n)]
    dist.all_gather(gout, torch.tensor([float(rank)]), group=g_tail_gloo)
    if [o.item() for o in out] != [o.item() for o in gout]:
        bad.append(f"reversed group all_gather order {[o.item() for o in out]} vs gloo {[o.item() for o in gout]}")
    one = torch.tensor([5.0])
    dist.all_reduce(one, group=g_local)
    if one.item() != 5.0:
        bad.append("single-rank local group")
    # nested: a group built from a subgroup's members (g_over's), with local
    # synchronization, made after every group that all ranks make: torch
    # 2.15 counts it only on its members, which shifts the names of groups
    # made later. Its members hold the same number of groups: torch 2.11
    # salts its name with that number (rank 0 and 2 would differ by g_over).
    over = list(range(min(n, 2)))
    if rank in over and len(over) > 1:
        nested = dist.new_group(over, backend="godist", use_local_synchronization=True)
        z = torch.ones(1)
        dist.all_reduce(z, group=nested)
        if z.item() != 2:
            bad.append("nested group")
    dist.barrier(group=gloo)
    return bad


def leak_worker(rank, n, init_file):
    import gc

    bad = []
    stats = []
    for i in range(6):
        store = dist.FileStore(f"{init_file}.{i}", n)
        dist.init_process_group("godist", store=store, rank=rank, world_size=n)
        sub = dist.new_group(backend="godist")
        t = torch.ones(1000)
        dist.all_reduce(t)
        dist.all_reduce(t, group=sub)
        dist.barrier()
        dist.destroy_process_group()
        gc.collect()
        fds = len(os.listdir("/proc/self/fd"))
        st = godist.runtime_stats()
        stats.append((fds, st["goroutines"], st["handles"]))
    first, last = stats[1], stats[-1]
    if last[0] > first[0] + 2:
        bad.append(f"file descriptors grow: {stats}")
    if last[1] > first[1] + 3:
        bad.append(f"goroutines grow: {stats}")
    if last[2] != 0:
        bad.append(f"handles leak: {stats}")
    return bad


WORLD = [1, 2, 3, 4]


@pytest.mark.parametrize("n", WORLD)
def test_rooted_and_list_ops(n):
    assert run_world(rooted_worker, n) == [[]] * n


@pytest.mark.parametrize("n", WORLD)
def test_point_to_point(n):
    assert run_world(p2p_worker, n) == [[]] * n


@pytest.mark.parametrize("n", [1, 3, 4])
def test_coalesced(n):
    assert run_world(coalesced_worker, n) == [[]] * n


def test_monitored_barrier_names_late_rank():
    n = 3
    res = run_world(monitored_worker, n, 2)
    assert "rank" in res[0] and "[2]" in res[0] and "did not arrive" in res[0], res[0]
    assert res[1] != "no error" and "monitored_barrier" in res[1], res[1]


def test_torch_monitored_barrier():
    """dist.monitored_barrier works on godist groups where torch lets it:
    from torch 2.15 it asks for a group whose device types include cpu,
    which godist's are; before, it accepts only groups named gloo."""
    n = 3
    res = run_world(torch_monitored_worker, n, 2)
    if "refused" in res[0]:
        assert torch.__version__ < "2.15", res[0]
        assert "GLOO" in res[0]["refused"], res[0]
        return
    assert "did not arrive" in res[0]["error"] and "[2]" in res[0]["error"], res[0]
    assert res[0]["elapsed"] < 4, res[0]
    assert res[1]["error"] and "monitored_barrier" in res[1]["error"], res[1]


@pytest.mark.parametrize("n", WORLD)
def test_object_collectives(n):
    assert run_world(objects_worker, n) == [[]] * n


@pytest.mark.parametrize("n", [2, 3, 4])
def test_subgroups(n):
    assert run_world(groups_worker, n) == [[]] * n


def test_init_destroy_does_not_leak():
    assert run_world(leak_worker, 2) == [[]] * 2
