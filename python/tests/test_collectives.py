"""Every collective, dtype and reduce op on godist against gloo (same inputs,
same processes) and against a hand-computed reference, at world sizes 1-4.
Results must also be bitwise identical on every rank."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world
from refs import COMPLEX, DTYPES, OPS, defined, exact, make_input, reduce_op, reference, same


class Checker:
    def __init__(self, rank, n, gloo):
        self.rank, self.n, self.gloo = rank, n, gloo
        self.failures, self.checks, self.gloo_compared = [], 0, 0

    def fail(self, what):
        self.failures.append(f"rank {self.rank}: {what}")

    def identical(self, what, t):
        """Every rank holds the same bytes."""
        b = t.contiguous().view(-1).view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8)
        bs = [torch.empty_like(b) for _ in range(self.n)]
        dist.all_gather(bs, b, group=self.gloo)
        if any(not torch.equal(bs[0], x) for x in bs):
            self.fail(f"{what}: results differ across ranks")

    def expect(self, what, got, want, is_exact=True):
        self.checks += 1
        if not same(got, want, is_exact):
            self.fail(f"{what}: got {got.tolist()[:8]} want {want.tolist()[:8]}")

    def gloo_all_reduce(self, t, op) -> bool:
        """all_reduce t on gloo; False if gloo does not support it."""
        try:
            dist.all_reduce(t, op=op, group=self.gloo)
            return True
        except (RuntimeError, ValueError, TypeError):
            return False


def _all_reduce_matrix(c: Checker, counts):
    rank, n = c.rank, c.n
    for dtype in DTYPES:
        for op in OPS:
            for count in counts:
                what = f"all_reduce {op} {dtype} x{count}"
                x = make_input(rank, dtype, count, op)
                if dtype in COMPLEX and op not in ("SUM", "AVG", "PREMUL_SUM"):
                    # torch rejects these before the backend is called
                    continue
                if not defined(op, dtype):
                    try:
                        dist.all_reduce(x.clone(), op=reduce_op(op))
                        c.fail(f"{what}: expected an error for an undefined combination")
                    except (ValueError, TypeError, RuntimeError) as e:
                        if "godist" not in str(e) and "does not support" not in str(e):
                            c.fail(f"{what}: unclear error {e!r}")
                    continue
                got = x.clone()
                dist.all_reduce(got, op=reduce_op(op))
                want = reference(op, [make_input(r, dtype, count, op) for r in range(n)], dtype)
                c.expect(what, got, want, exact(op, dtype))
                c.identical(what, got)
                # gloo on the same input: AVG/PREMUL_SUM as SUM of the prepared input
                g = x.clone()
                gop = reduce_op(op)
                if op == "AVG":
                    gop = dist.ReduceOp.SUM
                if op == "PREMUL_SUM":
                    g, gop = g * 0.5, dist.ReduceOp.SUM
                if c.gloo_all_reduce(g, gop):
                    if op == "AVG":
                        g = (g / n).to(dtype) if (dtype.is_floating_point or dtype in COMPLEX) else torch.div(g, n, rounding_mode="trunc")
                    c.gloo_compared += 1
                    c.expect(f"{what} vs gloo", got, g, exact(op, dtype))


def collectives_worker(rank, n, init_file):
    gloo = init(rank, n, init_file)
    c = Checker(rank, n, gloo)
    _all_reduce_matrix(c, [0, 1, 37])
    # large tensors take the ring path
    for dtype, op in [(torch.float32, "SUM"), (torch.float32, "MAX"), (torch.float64, "AVG"), (torch.int64, "SUM"),
                      (torch.bfloat16, "SUM"), (torch.float16, "PREMUL_SUM")]:
        count = 70_001
        x = make_input(rank, dtype, count, op)
        dist.all_reduce(x, op=reduce_op(op))
        c.expect(f"all_reduce large {op} {dtype}", x,
                 reference(op, [make_input(r, dtype, count, op) for r in range(n)], dtype), exact(op, dtype))
        c.identical(f"all_reduce large {op} {dtype}", x)
    # a broadcast over 4 MiB goes through the segmented tree over TCP
    count = (4 << 20) // 4 + 1001
    for root in range(n):
        x = make_input(root, torch.float32, count) if rank == root else torch.zeros(count)
        g = x.clone()
        dist.broadcast(x, src=root)
        dist.broadcast(g, src=root, group=c.gloo)
        c.expect(f"broadcast large root {root}", x, make_input(root, torch.float32, count))
        c.expect(f"broadcast large root {root} vs gloo", x, g)
    # async all_reduce: several in flight at once
    xs = [make_input(rank, torch.float32, 100 + i) for i in range(5)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for i, (w, x) in enumerate(zip(works, xs)):
        w.wait()
        c.expect(f"async all_reduce #{i}", x, reference("SUM", [make_input(r, torch.float32, 100 + i) for r in range(n)], torch.float32))
        fut_val = w.get_future().value()
        if not (isinstance(fut_val, list) and fut_val[0] is x):
            c.fail(f"async all_reduce #{i}: future value {type(fut_val)} is not [tensor]")
    _movement(c)
    _reduce_scatter(c)
    _p2p(c)
    dist.barrier()
    w = dist.barrier(async_op=True)
    w.wait()
    return {"failures": c.failures, "checks": c.checks, "gloo": c.gloo_compared,
            "shm": dist.group.WORLD.shared_memory}


def _movement(c: Checker):
    rank, n = c.rank, c.n
    for dtype in DTYPES + [torch.float8_e4m3fn if hasattr(torch, "float8_e4m3fn") else torch.uint8, torch.uint16]:
        for count in (0, 5, 1000):
            for root in range(n):
                x = make_input(root, torch.float32, count).to(dtype) if rank == root else torch.zeros(count).to(dtype)
                w = dist.broadcast(x, src=root, async_op=(count == 5))
                if w is not None:
                    w.wait()
                c.expect(f"broadcast {dtype} x{count} root {root}", x.view(torch.uint8) if dtype.itemsize == 1 and x.dtype != torch.uint8 else x,
                         (make_input(root, torch.float32, count).to(dtype).view(torch.uint8) if dtype.itemsize == 1 and x.dtype != torch.uint8 else make_input(root, torch.float32, count).to(dtype)))
            mine = make_input(rank, torch.float32, count).to(dtype)
            outs = [torch.full((count,), 9).to(dtype) for _ in range(n)]
            dist.all_gather(outs, mine)
            for r in range(n):
                want = make_input(r, torch.float32, count).to(dtype)
                c.expect(f"all_gather {dtype} x{count} from {r}", _bytes(outs[r]), _bytes(want))
            out = torch.zeros(n * count).to(dtype)
            dist.all_gather_into_tensor(out, mine)
            want = torch.cat([make_input(r, torch.float32, count).to(dtype) for r in range(n)])
            c.expect(f"all_gather_into_tensor {dtype} x{count}", _bytes(out), _bytes(want))
            if dtype == torch.float32:
                g = torch.zeros(n * count)
                dist.all_gather_into_tensor(g, mine, group=c.gloo)
                c.expect(f"all_gather_into_tensor {dtype} x{count} vs gloo", out, g)


def _bytes(t):
    return t.contiguous().view(-1).view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8)


def _reduce_scatter(c: Checker):
    rank, n = c.rank, c.n
    for dtype in DTYPES:
        for op in OPS:
            if not defined(op, dtype) or (dtype in COMPLEX and op == "PRODUCT"):
                continue
            count = 6
            inp = make_input(rank, dtype, count * n, op, salt=5)
            out = torch.zeros(count).to(dtype)
            dist.reduce_scatter_tensor(out, inp, op=reduce_op(op))
            want = reference(op, [make_input(r, dtype, count * n, op, salt=5) for r in range(n)], dtype)
            c.expect(f"reduce_scatter_tensor {op} {dtype}", out, want[rank * count:(rank + 1) * count], exact(op, dtype))
            if op == "SUM" and dtype in (torch.float32, torch.int64):
                g = torch.zeros(count).to(dtype)
                try:
                    dist.reduce_scatter_tensor(g, inp, group=c.gloo)
                except (RuntimeError, ValueError):
                    continue  # gloo has no native reduce_scatter_tensor here
                c.expect(f"reduce_scatter_tensor {op} {dtype} vs gloo", out, g)


def _p2p(c: Checker):
    rank, n = c.rank, c.n
    if n == 1:
        return
    right, left = (rank + 1) % n, (rank - 1) % n

    def ring(x, y):
        """Send x to the right and receive y from the left, even ranks first."""
        if rank % 2 == 0:
            dist.send(x, right)
            dist.recv(y, left)
        else:
            dist.recv(y, left)
            dist.send(x, right)

    for dtype in DTYPES:
        x = make_input(rank, torch.float32, 11).to(dtype)
        y = torch.zeros(11).to(dtype)
        ring(x, y)
        c.expect(f"send/recv ring {dtype}", _bytes(y), _bytes(make_input(left, torch.float32, 11).to(dtype)))
    # large messages: over shared memory, single copy from 64 KiB, the copy
    # shared by sender and receiver from 512 KiB (two ranks on two cores)
    for count in ((64 << 10) // 4, (512 << 10) // 4 + 3, (3 << 20) // 4 + 1001, (24 << 20) // 4 + 7):
        x = make_input(rank, torch.float32, count)
        y = torch.zeros(count)
        ring(x, y)
        c.expect(f"send/recv ring x{count}", y, make_input(left, torch.float32, count))
        # the same message arriving before its receive is posted
        y.zero_()
        if rank == 0:
            dist.send(x, 1)
        elif rank == 1:
            time.sleep(0.05)
            dist.recv(y, 0)
            c.expect(f"send/recv x{count}, received late", y, make_input(0, torch.float32, count))
    # isend/irecv all at once, several messages with tags
    sends = [dist.isend(torch.full((3,), float(rank * 10 + k)), right, tag=k) for k in range(3)]
    ys = [torch.zeros(3) for _ in range(3)]
    recvs = [dist.irecv(ys[k], left, tag=k) for k in range(3)]
    for w in sends + recvs:
        w.wait()
    for k in range(3):
        c.expect(f"isend/irecv tag {k}", ys[k], torch.full((3,), float(left * 10 + k)))


@pytest.mark.parametrize("world_size,transport", [(1, "auto"), (2, "auto"), (3, "auto"), (4, "auto"), (2, "tcp"), (3, "tcp")])
def test_collectives_match_gloo_and_reference(world_size, transport):
    results = run_world(collectives_worker, world_size, timeout=420, env={"GODIST_TRANSPORT": transport})
    # ranks on one host share memory unless TCP is forced
    assert all(r["shm"] == (world_size > 1 and transport == "auto") for r in results), results[0]["shm"]
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:50])
    assert all(r["checks"] > 300 for r in results)
    assert all(r["gloo"] > 40 for r in results), [r["gloo"] for r in results]
