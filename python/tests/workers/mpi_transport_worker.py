"""One rank of python/tests/test_mpi.py's GODIST_TRANSPORT=mpi tests, started
by mpirun.

``mpi_transport_worker.py ops``: makes a godist group over MPI
(GODIST_TRANSPORT=mpi) beside the default group (godist's own transports)
and a gloo group, runs every collective and point-to-point op on the same
inputs on each, and checks the MPI group's results bitwise against godist's
own transports (every dtype and reduce op: the inputs are small integers,
exact in every dtype) and against gloo where gloo has the op. Prints
"MPI-TRANSPORT-OK rank R" when all agree.

``mpi_transport_worker.py timeout``: rank 1 never joins the second
all_reduce; rank 0's fails with a timeout within its deadline, the group is
then broken, and both ranks exit.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import godist  # noqa: F401

R = dist.ReduceOp
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.int8,
          torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]


def ops_for(dtype):
    if dtype == torch.bool:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]
    if dtype.is_complex:
        return [R.SUM, R.AVG, dist._make_nccl_premul_sum(2.0)]
    if dtype.is_floating_point:
        return [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX, dist._make_nccl_premul_sum(0.5)]
    return [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]


def make(dtype, rank, n, seed=0, product=False):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    hi = 2 if product else 5
    v = torch.randint(1, hi + 1, (n,), generator=g)
    if dtype.is_complex:
        return torch.complex(v.float(), torch.randint(0, hi, (n,), generator=g).float()).to(dtype)
    return v.to(dtype)


def same(name, a, b, problems):
    a, b = a.contiguous(), b.contiguous()
    bits = (lambda t: t) if a.dtype == torch.bool else (lambda t: t.view(torch.uint8))
    if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(bits(a), bits(b)):
        problems.append(f"{name}: MPI group {a.flatten()[:6].tolist()} != {b.flatten()[:6].tolist()}")


def ops(rank, size, problems):
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("godist", init_method="mpi://", timeout=timeout)
    os.environ["GODIST_TRANSPORT"] = "mpi"
    mpi = dist.new_group(backend="godist", timeout=timeout)
    del os.environ["GODIST_TRANSPORT"]
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    own = dist.group.WORLD
    if size > 1 and dist.get_backend(mpi) != "godist":
        problems.append("the MPI group is not a godist group")

    def both(name, fn, with_gloo=False):
        """fn(group) -> tensors, run on the MPI group and on the oracles."""
        try:
            got = fn(mpi)
            for oracle, gname in ((own, "godist's own transports"), (gloo, "gloo")) if with_gloo else ((own, "own"),):
                want = fn(oracle)
                for i, (a, b) in enumerate(zip(got, want)):
                    same(f"{name} [{i}] vs {gname}", a, b, problems)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{name}: {type(e).__name__}: {e}")

    for dtype in DTYPES:
        for op in ops_for(dtype):
            for n in (1, 33, 4099):
                both(f"all_reduce {dtype} {op} {n}", lambda g, dtype=dtype, op=op, n=n: [
                    _ar(make(dtype, rank, n, 1, product=op == R.PRODUCT), op, g)])
        for root in range(size):
            both(f"broadcast {dtype} root {root}", lambda g, dtype=dtype, root=root: [
                _bc(make(dtype, rank, 100, 2), root, g)], with_gloo=dtype not in (torch.bfloat16, torch.complex128, torch.int16))
            both(f"reduce {dtype} root {root}", lambda g, dtype=dtype, root=root: [
                _rd(make(dtype, rank, 100, 3), root, g)])
        both(f"all_gather {dtype}", lambda g, dtype=dtype: _ag(make(dtype, rank, 50, 4), size, g))
        both(f"all_gather_into_tensor in place {dtype}", lambda g, dtype=dtype: [_agt(make(dtype, rank, 50, 5), rank,
                                                                                      size, g)])
        both(f"reduce_scatter_tensor {dtype}", lambda g, dtype=dtype: [_rst(make(dtype, rank, 20 * size, 6), size, g)])
        both(f"reduce_scatter list {dtype}", lambda g, dtype=dtype: [_rsl(dtype, rank, size, g)])
        both(f"all_to_all_single uneven {dtype}", lambda g, dtype=dtype: [_a2a(dtype, rank, size, g)])
        both(f"all_to_all list {dtype}", lambda g, dtype=dtype: _a2al(dtype, rank, size, g))
        for root in range(size):
            both(f"gather {dtype} root {root}", lambda g, dtype=dtype, root=root: _ga(dtype, rank, size, root, g))
            both(f"scatter {dtype} root {root}", lambda g, dtype=dtype, root=root: [_sc(dtype, rank, size, root, g)])
    if size > 1:
        both("send/recv with tags", lambda g: _p2p(rank, size, g))
        both("recv from any source", lambda g: _anysrc(rank, size, g))
        both("batch_isend_irecv", lambda g: _batch(rank, size, g))
        t = (torch.arange(3 << 20) % 1000 + rank).float()  # past the eager sizes; sums stay exact
        both("large all_reduce", lambda g: [_ar(t.clone(), R.SUM, g)], with_gloo=True)
    dist.barrier(group=mpi)
    t0 = time.monotonic()
    w = dist.all_reduce(torch.ones(4), group=mpi, async_op=True)
    w.wait()
    if not w.is_completed() or time.monotonic() - t0 > 30:
        problems.append("async all_reduce")


def _ar(t, op, g):
    dist.all_reduce(t, op=op, group=g)
    return t


def _bc(t, root, g):
    dist.broadcast(t, group_src=root, group=g)
    return t


def _rd(t, root, g):
    dist.reduce(t, group_dst=root, op=R.SUM, group=g)
    return t if dist.get_rank(g) == root else t * 0


def _ag(t, size, g):
    outs = [torch.empty_like(t) for _ in range(size)]
    dist.all_gather(outs, t, group=g)
    return outs


def _agt(t, rank, size, g):
    out = torch.zeros(t.numel() * size, dtype=t.dtype)
    mine = out.narrow(0, rank * t.numel(), t.numel())
    mine.copy_(t)
    dist.all_gather_into_tensor(out, mine, group=g)
    return out


def _rst(t, size, g):
    out = torch.empty(t.numel() // size, dtype=t.dtype)
    dist.reduce_scatter_tensor(out, t, group=g)
    return out


def _rsl(dtype, rank, size, g):
    ins = [make(dtype, rank, 9, 7 + r) for r in range(size)]
    out = torch.empty(9, dtype=dtype)
    dist.reduce_scatter(out, ins, group=g)
    return out


def _a2a(dtype, rank, size, g):
    ins_split = [(rank + r) % 3 + 1 for r in range(size)]
    outs_split = [(r + rank) % 3 + 1 for r in range(size)]
    t = make(dtype, rank, sum(ins_split) * 2, 8).reshape(-1, 2)
    out = torch.empty(sum(outs_split), 2, dtype=dtype)
    dist.all_to_all_single(out, t, outs_split, ins_split, group=g)
    return out


def _a2al(dtype, rank, size, g):
    ins = [make(dtype, rank, r + 1, 9) for r in range(size)]
    outs = [torch.empty(rank + 1, dtype=dtype) for _ in range(size)]
    dist.all_to_all(outs, ins, group=g)
    return outs


def _ga(dtype, rank, size, root, g):
    t = make(dtype, rank, 12, 10)
    outs = [torch.empty_like(t) for _ in range(size)] if rank == root else None
    dist.gather(t, outs, group_dst=root, group=g)
    return outs or []


def _sc(dtype, rank, size, root, g):
    ins = [make(dtype, r, 12, 11) for r in range(size)] if rank == root else None
    out = torch.empty(12, dtype=dtype)
    dist.scatter(out, ins, group_src=root, group=g)
    return out


def _p2p(rank, size, g):
    right, left = (rank + 1) % size, (rank - 1) % size
    outs = []
    for tag in (0, 7, 12345):
        t = torch.full((1000 * (tag % 5 + 1),), float(rank * 100 + tag))
        r = torch.empty_like(t)
        w = dist.isend(t, group_dst=right, tag=tag, group=g)
        dist.recv(r, group_src=left, tag=tag, group=g)
        w.wait()
        outs.append(r)
    return outs


def _anysrc(rank, size, g):
    if rank == 0:
        got = []
        for _ in range(size - 1):
            r = torch.empty(5)
            src = dist.recv(r, tag=3, group=g)
            got.append((src, r[0].item()))
        got.sort()
        return [torch.tensor(got)]
    dist.send(torch.full((5,), float(rank)), group_dst=0, tag=3, group=g)
    return []


def _batch(rank, size, g):
    right, left = (rank + 1) % size, (rank - 1) % size
    t = torch.arange(20000, dtype=torch.float32) * (rank + 1)
    r = torch.empty_like(t)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, group_peer=right, group=g),
                                   dist.P2POp(dist.irecv, r, group_peer=left, group=g)])
    for q in reqs:
        q.wait()
    return [r]


def timeout(rank, size, problems):
    os.environ["GODIST_TRANSPORT"] = "mpi"
    dist.init_process_group("godist", init_method="mpi://", timeout=datetime.timedelta(seconds=3))
    t = torch.ones(8)
    dist.all_reduce(t)
    if rank == 1:
        time.sleep(6)
        return
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
        problems.append("the all_reduce rank 1 never joined did not fail")
    except godist.GodistTimeoutError as e:
        took = time.monotonic() - t0
        if not 2.5 <= took <= 8:
            problems.append(f"failed after {took:.1f}s, want about 3s")
        if "allreduce" not in str(e) or "MPI" not in str(e):
            problems.append(f"the error names neither the op nor MPI: {e}")
    try:
        dist.all_reduce(t)
        problems.append("the broken group took more work")
    except dist.DistBackendError as e:
        if "broken" not in str(e):
            problems.append(f"later op failed without saying the group is broken: {e}")


def main():
    torch.set_num_threads(1)
    mode = sys.argv[1]
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    problems = []
    {"ops": ops, "timeout": timeout}[mode](rank, size, problems)
    if problems:
        print("\n".join(f"rank {rank}: {p}" for p in problems[:30]), flush=True)
        sys.exit(1)
    print(f"MPI-TRANSPORT-OK rank {rank}", flush=True)
    if mode == "ops":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
