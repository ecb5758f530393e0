"""The op cases of the NCCL path's GPU tests (test_cuda_nccl.py): every op,
every reducible dtype and reduce op, contiguous and non-contiguous
(strided, transposed) tensors, synchronous and asynchronous; each against
its exact reference (cuda_oracle.py), torch's nccl backend as a second
oracle."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from cuda_oracle import FLOATS, INTS, Checker, cpu_input, empty, place, reduce_ref


def _wait(w):
    if w is not None:
        w.wait()


def reductions(c: Checker, rank, n, async_op, dtypes=None, sizes=(1, 1000, 70000)):
    """all_reduce over dtypes x reduce ops x sizes (the larger sizes for
    float32 and bfloat16 only)."""
    seed = 1000 * async_op
    for dtype in dtypes or FLOATS + INTS + [torch.bool]:
        ops = [ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT]
        if dtype.is_floating_point:
            ops += [ReduceOp.AVG, dist._make_nccl_premul_sum(0.5)]
        for op in ops:
            for numel in sizes if dtype in (torch.float32, torch.bfloat16) else sizes[:2]:
                seed += 1
                xs = [cpu_input((numel,), dtype, r, seed) for r in range(n)]

                def ar(g, xs=xs, op=op):
                    t = place(xs[rank])
                    _wait(dist.all_reduce(t, op=op, group=g, async_op=async_op))
                    return [t]
                c.check(f"all_reduce {dtype} {op} {numel} async={async_op}", ar, [reduce_ref(xs, op)])
    xs = [cpu_input((999,), torch.complex64, r, seed + 1) for r in range(n)]

    def cplx(g):
        t = place(xs[rank])
        _wait(dist.all_reduce(t, group=g, async_op=async_op))
        return [t]
    c.check(f"all_reduce complex64 SUM async={async_op}", cplx, [reduce_ref(xs, ReduceOp.SUM)])


def every_op(c: Checker, rank, n, async_op, layout="contig", dtypes=(torch.float32, torch.bfloat16, torch.int64)):
    """Each op other than all_reduce's matrix, on tensors in layout (2-D
    tensors, so that every layout applies), and all_reduce itself."""
    R, K = 6, 5  # rows per rank, columns
    tag = f"{layout} async={async_op}"
    for dtype in dtypes:
        s = 100 + 37 * FLOATS.index(dtype) if dtype in FLOATS else 300
        xs = [cpu_input((R, K), dtype, r, s) for r in range(n)]

        def ar(g, xs=xs):
            t = place(xs[rank], layout)
            _wait(dist.all_reduce(t, group=g, async_op=async_op))
            return [t]
        c.check(f"all_reduce {dtype} {tag}", ar, [reduce_ref(xs, ReduceOp.SUM)])

        for root in range(n):
            def bc(g, xs=xs, root=root):
                t = place(xs[rank], layout)
                _wait(dist.broadcast(t, src=root, group=g, async_op=async_op))
                return [t]
            c.check(f"broadcast {dtype} root {root} {tag}", bc, [xs[root]])

            def rd(g, xs=xs, root=root):
                t = place(xs[rank], layout)
                _wait(dist.reduce(t, dst=root, group=g, async_op=async_op))
                return [t] if rank == root else []
            c.check(f"reduce {dtype} root {root} {tag}", rd, [reduce_ref(xs, ReduceOp.SUM)] if rank == root else [])

            def ga(g, xs=xs, root=root):
                outs = [empty((R, K), dtype, layout) for _ in range(n)] if rank == root else None
                _wait(dist.gather(place(xs[rank], layout), outs, dst=root, group=g, async_op=async_op))
                return outs or []
            c.check(f"gather {dtype} root {root} {tag}", ga, list(xs) if rank == root else [])

            def sc(g, root=root, dtype=dtype):
                ins = [place(cpu_input((R, K), dtype, r, s + 7), layout) for r in range(n)] if rank == root else None
                out = empty((R, K), dtype, layout)
                _wait(dist.scatter(out, ins, src=root, group=g, async_op=async_op))
                return [out]
            c.check(f"scatter {dtype} root {root} {tag}", sc, [cpu_input((R, K), dtype, rank, s + 7)])

        def ag(g, xs=xs, dtype=dtype):
            outs = [empty((R, K), dtype, layout) for _ in range(n)]
            _wait(dist.all_gather(outs, place(xs[rank], layout), group=g, async_op=async_op))
            return outs
        c.check(f"all_gather {dtype} {tag}", ag, list(xs))

        def agt(g, xs=xs, dtype=dtype):
            out = empty((R * n, K), dtype, layout)
            _wait(dist.all_gather_into_tensor(out, place(xs[rank], layout), group=g, async_op=async_op))
            return [out]
        c.check(f"all_gather_into_tensor {dtype} {tag}", agt, [torch.cat(xs)])

        big = [cpu_input((R * n, K), dtype, r, s + 11) for r in range(n)]
        full = reduce_ref(big, ReduceOp.SUM)

        def rst(g, dtype=dtype):
            out = empty((R, K), dtype, layout)
            _wait(dist.reduce_scatter_tensor(out, place(big[rank], layout), group=g, async_op=async_op))
            return [out]
        c.check(f"reduce_scatter_tensor {dtype} {tag}", rst, [full[rank * R:(rank + 1) * R]])

        def rs(g, dtype=dtype):
            out = empty((R, K), dtype, layout)
            ins = [place(big[rank][r * R:(r + 1) * R], layout) for r in range(n)]
            _wait(dist.reduce_scatter(out, ins, group=g, async_op=async_op))
            return [out]
        c.check(f"reduce_scatter {dtype} {tag}", rs, [full[rank * R:(rank + 1) * R]])

        def a2a(g, dtype=dtype):
            out = empty((R * n, K), dtype, layout)
            _wait(dist.all_to_all_single(out, place(big[rank], layout), group=g, async_op=async_op))
            return [out]
        c.check(f"all_to_all_single {dtype} {tag}", a2a,
                [torch.cat([big[r][rank * R:(rank + 1) * R] for r in range(n)])])

        def a2al(g, dtype=dtype):
            outs = [empty((R, K), dtype, layout) for _ in range(n)]
            ins = [place(big[rank][r * R:(r + 1) * R], layout) for r in range(n)]
            _wait(dist.all_to_all(outs, ins, group=g, async_op=async_op))
            return outs
        c.check(f"all_to_all {dtype} {tag}", a2al, [big[r][rank * R:(rank + 1) * R] for r in range(n)])

    ins_split = [r + 1 + rank for r in range(n)]
    outs_split = [rank + 1 + r for r in range(n)]
    mine = [cpu_input((sum(r + 1 + q for q in range(n)), 3), torch.float32, r, 21) for r in range(n)]

    def a2a_uneven(g):
        out = empty((sum(outs_split), 3), torch.float32, layout)
        w = dist.all_to_all_single(out, place(mine[rank], layout), outs_split, ins_split, group=g,
                                   async_op=async_op)
        _wait(w)
        return [out]
    want = []
    for r in range(n):  # rank r's rows for this rank: after its splits for the ranks before this one
        off = sum(q + 1 + r for q in range(rank))
        want.append(mine[r][off:off + rank + 1 + r])
    c.check(f"all_to_all_single uneven {tag}", a2a_uneven, [torch.cat(want)])

    if n > 1:
        xs = [cpu_input((R, K), torch.float32, r, 25) for r in range(n)]
        src, dst = (rank - 1) % n, (rank + 1) % n

        def ring(g):
            out = empty((R, K), torch.float32, layout)
            ops = [dist.P2POp(dist.isend, place(xs[rank], layout), dst, group=g),
                   dist.P2POp(dist.irecv, out, src, group=g)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            return [out]
        c.check(f"batch_isend_irecv ring {tag}", ring, [xs[src]])

        def sendrecv(g):
            if rank == 0:
                t = place(xs[0], layout)
                w = dist.isend(t, 1, group=g) if async_op else dist.send(t, 1, group=g)
                _wait(w)
                return []
            if rank == 1:
                out = empty((R, K), torch.float32, layout)
                w = dist.irecv(out, 0, group=g) if async_op else dist.recv(out, 0, group=g)
                _wait(w)
                return [out]
            return []
        c.check(f"send/recv {tag}", sendrecv, [xs[0]] if rank == 1 else [])

    ts = [cpu_input((k,), torch.float32, r, 27 + k) for k in (5, 500) for r in range(n)]

    def coalesced(g):
        from torch.distributed.distributed_c10d import _coalescing_manager

        mine = [place(ts[i * n + rank]) for i in range(2)]
        with _coalescing_manager(group=g, device=mine[0].device, async_ops=async_op) as cm:
            for t in mine:
                dist.all_reduce(t, group=g)
        if async_op:
            cm.wait()
        return mine
    c.check(f"coalesced all_reduce async={async_op}", coalesced,
            [reduce_ref(ts[i * n:(i + 1) * n], ReduceOp.SUM) for i in range(2)])
