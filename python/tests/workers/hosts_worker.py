"""One rank of test_hosts.py, run inside a simulated host (godist.hosts).

    python hosts_worker.py collectives   every collective on godist against gloo and a reference
    python hosts_worker.py cut           large all_reduces until the network fails under it
    python hosts_worker.py ddp           DDP on godist and on gloo (under torchrun); the parameters' digests

RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment
(env:// rendezvous). The result is one line, "RESULT <json>", on stdout.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import godist
from refs import OPS, defined, exact, make_input, reduce_op, reference, same

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16, torch.float16, torch.bool,
          torch.uint8]
BIG = (1 << 20) + 5  # ~1M elements, divisible by none of the world sizes
LITE = os.environ.get("HOSTS_LITE") == "1"  # fewer dtypes where ranks outnumber cores by far


def report(result: dict) -> None:
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8)


def _fill(count, dtype, v=7):
    return torch.full((count,), v).to(dtype)


class Checker:
    def __init__(self, gloo):
        self.rank, self.n, self.gloo = dist.get_rank(), dist.get_world_size(), gloo
        self.failures: list[str] = []
        self.checks = self.vs_gloo = 0
        self.gloo_lacks: set[str] = set()

    def expect(self, what, got, want, is_exact=True):
        self.checks += 1
        if not same(got, want, is_exact):
            self.failures.append(f"rank {self.rank}: {what}: got {got.tolist()[:6]} want {want.tolist()[:6]}")

    def like_gloo(self, what, got, g, is_exact=True):
        self.vs_gloo += 1
        self.expect(what + " vs gloo", got, g, is_exact)

    def identical(self, what, t):
        """Every rank holds the same bytes (compared over gloo)."""
        b = _bytes(t)
        bs = [torch.empty_like(b) for _ in range(self.n)]
        dist.all_gather(bs, b, group=self.gloo)
        if not all(torch.equal(bs[0], x) for x in bs):
            self.failures.append(f"rank {self.rank}: {what}: results differ across ranks")

    def gloo_try(self, what, fn) -> bool:
        """Run a gloo call; False (and noted) where gloo does not support it."""
        try:
            fn()
            return True
        except (RuntimeError, ValueError, TypeError):
            self.gloo_lacks.add(what)
            return False


def all_reduce(c: Checker):
    n = c.n
    dtypes = [torch.float32, torch.int64, torch.bool] if LITE else DTYPES
    cases = [(d, op, k) for d in dtypes for op in OPS for k in (1, 37)]
    cases += [(torch.float32, "SUM", BIG), (torch.bfloat16, "MAX", BIG), (torch.float64, "AVG", 262_147),
              (torch.int64, "SUM", 262_147), (torch.uint8, "BOR", 262_147), (torch.float16, "PREMUL_SUM", 65_539)]
    for dtype, op, count in cases:
        if not defined(op, dtype):
            continue
        what = f"all_reduce {op} {dtype} x{count}"
        x = make_input(c.rank, dtype, count, op)
        got = x.clone()
        dist.all_reduce(got, op=reduce_op(op))
        want = reference(op, [make_input(r, dtype, count, op) for r in range(n)], dtype)
        c.expect(what, got, want, exact(op, dtype))
        c.identical(what, got)
        # gloo on the same input; AVG and PREMUL_SUM as a SUM of the prepared input
        g, gop = x.clone(), reduce_op(op)
        if op == "AVG":
            gop = dist.ReduceOp.SUM
        if op == "PREMUL_SUM":
            g, gop = g * 0.5, dist.ReduceOp.SUM
        if c.gloo_try(f"all_reduce {gop} {dtype}", lambda: dist.all_reduce(g, op=gop, group=c.gloo)):
            if op == "AVG":
                g = (g / n).to(dtype) if dtype.is_floating_point else torch.div(g, n, rounding_mode="trunc")
            c.like_gloo(what, got, g, exact(op, dtype))


def broadcast(c: Checker):
    dtypes = [torch.float32, torch.bool] if LITE else DTYPES
    for root in range(c.n):
        for dtype, count in [(d, k) for d in dtypes for k in (1, 1001)] + [(torch.float32, BIG)]:
            want = make_input(root, dtype, count)
            x = want.clone() if c.rank == root else _fill(count, dtype)
            g = x.clone()
            dist.broadcast(x, src=root)
            dist.broadcast(g, src=root, group=c.gloo)
            c.expect(f"broadcast {dtype} x{count} from {root}", x, want)
            c.like_gloo(f"broadcast {dtype} x{count} from {root}", x, g)


def all_gather(c: Checker):
    n = c.n
    dtypes = [torch.float32, torch.bool] if LITE else DTYPES
    for dtype, count in [(d, k) for d in dtypes for k in (1, 37)] + [(torch.float32, 262_145), (torch.int64, 65_537)]:
        mine = make_input(c.rank, dtype, count)
        want = [make_input(r, dtype, count) for r in range(n)]
        outs = [_fill(count, dtype) for _ in range(n)]
        gouts = [_fill(count, dtype) for _ in range(n)]
        dist.all_gather(outs, mine)
        dist.all_gather(gouts, mine, group=c.gloo)
        for r in range(n):
            c.expect(f"all_gather {dtype} x{count} from {r}", outs[r], want[r])
            c.like_gloo(f"all_gather {dtype} x{count} from {r}", outs[r], gouts[r])
        out, gout = _fill(n * count, dtype), _fill(n * count, dtype)
        dist.all_gather_into_tensor(out, mine)
        c.expect(f"all_gather_into_tensor {dtype} x{count}", out, torch.cat(want))
        if c.gloo_try(f"all_gather_into_tensor {dtype}", lambda: dist.all_gather_into_tensor(gout, mine, group=c.gloo)):
            c.like_gloo(f"all_gather_into_tensor {dtype} x{count}", out, gout)


def reduce_scatter(c: Checker):
    n = c.n
    dtypes = [torch.float32, torch.int64] + ([] if LITE else [torch.bfloat16, torch.bool, torch.uint8])
    cases = [(d, op, k) for d in dtypes for op in OPS for k in (1, 37)]
    cases += [(torch.float32, "SUM", 65_537), (torch.float64, "AVG", 65_537), (torch.int32, "MAX", 65_537)]
    for dtype, op, count in cases:
        if not defined(op, dtype):
            continue
        what = f"reduce_scatter_tensor {op} {dtype} x{count}"
        inp = make_input(c.rank, dtype, count * n, op, salt=5)
        out = _fill(count, dtype)
        dist.reduce_scatter_tensor(out, inp, op=reduce_op(op))
        want = reference(op, [make_input(r, dtype, count * n, op, salt=5) for r in range(n)], dtype)
        c.expect(what, out, want[c.rank * count:(c.rank + 1) * count], exact(op, dtype))
        if op in ("SUM", "MAX", "MIN", "PRODUCT") and dtype != torch.bool:
            g = _fill(count, dtype)
            if c.gloo_try(f"reduce_scatter_tensor {op} {dtype}",
                          lambda: dist.reduce_scatter_tensor(g, inp, op=reduce_op(op), group=c.gloo)):
                c.like_gloo(what, out, g)


def all_to_all(c: Checker):
    n, me = c.n, c.rank
    for scale, dtype in [(0, torch.float32), (1, torch.float32), (1, torch.int64), (4099, torch.float32)]:
        # scale 0: even splits of 3; otherwise rank r sends (r + 2j) % 3 * scale elements to j (some none)
        def split(r, j):
            return 3 if scale == 0 else (r + 2 * j) % 3 * scale

        ins = [make_input(r, dtype, sum(split(r, j) for j in range(n)), salt=9) for r in range(n)]
        send = [split(me, j) for j in range(n)]
        recv = [split(j, me) for j in range(n)]
        want = torch.cat([ins[j][sum(split(j, k) for k in range(me)):][:split(j, me)] for j in range(n)])
        out, g = _fill(sum(recv), dtype), _fill(sum(recv), dtype)
        even = scale == 0
        dist.all_to_all_single(out, ins[me], None if even else recv, None if even else send)
        dist.all_to_all_single(g, ins[me], None if even else recv, None if even else send, group=c.gloo)
        what = f"all_to_all_single {'even' if even else 'uneven'} {dtype} x{scale}"
        c.expect(what, out, want)
        c.like_gloo(what, out, g)


def rooted(c: Checker):
    n, me = c.n, c.rank
    for root in range(n):
        for dtype, op, count in [(torch.float32, "SUM", 37), (torch.int64, "MAX", 1), (torch.float64, "SUM", 262_147),
                                 (torch.uint8, "BXOR", 37), (torch.bfloat16, "MIN", 37)]:
            what = f"reduce {op} {dtype} x{count} to {root}"
            x, g = make_input(me, dtype, count, op), make_input(me, dtype, count, op)
            dist.reduce(x, dst=root, op=reduce_op(op))
            ok = c.gloo_try(f"reduce {op} {dtype}", lambda: dist.reduce(g, dst=root, op=reduce_op(op), group=c.gloo))
            if me == root:
                c.expect(what, x, reference(op, [make_input(r, dtype, count, op) for r in range(n)], dtype))
                if ok:
                    c.like_gloo(what, x, g)
        for dtype, count in [(torch.float32, 1), (torch.int32, 37), (torch.float32, 262_145)]:
            mine = make_input(me, dtype, count, salt=3)
            outs = [_fill(count, dtype) for _ in range(n)] if me == root else None
            gouts = [_fill(count, dtype) for _ in range(n)] if me == root else None
            dist.gather(mine, outs, dst=root)
            dist.gather(mine, gouts, dst=root, group=c.gloo)
            if me == root:
                for r in range(n):
                    want = make_input(r, dtype, count, salt=3)
                    c.expect(f"gather {dtype} x{count} to {root} from {r}", outs[r], want)
                    c.like_gloo(f"gather {dtype} x{count} to {root} from {r}", outs[r], gouts[r])
            parts = [make_input(root * 100 + r, dtype, count, salt=4) for r in range(n)]
            out, g = _fill(count, dtype), _fill(count, dtype)
            dist.scatter(out, parts if me == root else None, src=root)
            dist.scatter(g, parts if me == root else None, src=root, group=c.gloo)
            c.expect(f"scatter {dtype} x{count} from {root}", out, parts[me])
            c.like_gloo(f"scatter {dtype} x{count} from {root}", out, g)


def p2p(c: Checker):
    n, me = c.n, c.rank
    right, left = (me + 1) % n, (me - 1) % n
    for dtype, count in [(torch.float32, 11), (torch.bool, 11), (torch.bfloat16, 1001), (torch.float32, BIG)]:
        x, y = make_input(me, dtype, count, salt=6), _fill(count, dtype)
        if me % 2 == 0:  # even ranks send first: no cycle of blocked sends
            dist.send(x, right)
            dist.recv(y, left)
        else:
            dist.recv(y, left)
            dist.send(x, right)
        c.expect(f"send/recv ring {dtype} x{count} from {left}", y, make_input(left, dtype, count, salt=6))
    # every pair, the lower rank sending, with isend/irecv
    works, got = [], {}
    for peer in range(n):
        if peer > me:
            works.append(dist.isend(make_input(me * 10 + peer, torch.float32, 4097), peer, tag=5))
        elif peer < me:
            got[peer] = torch.zeros(4097)
            works.append(dist.irecv(got[peer], peer, tag=5))
    for w in works:
        w.wait()
    for peer, y in got.items():
        c.expect(f"irecv from {peer}", y, make_input(peer * 10 + me, torch.float32, 4097))


def topology():
    """godist.topology(), or None where this godist does not have it."""
    fn = getattr(godist, "topology", None)
    return None if fn is None else fn()


def collectives():
    dist.init_process_group("godist", timeout=datetime.timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    c = Checker(gloo)
    times = {}
    for fn in (all_reduce, broadcast, all_gather, reduce_scatter, all_to_all, rooted, p2p):
        t = time.monotonic()
        fn(c)
        times[fn.__name__] = round(time.monotonic() - t, 2)
    dist.barrier()
    dist.barrier(async_op=True).wait()
    report({"rank": c.rank, "host": os.uname().nodename, "failures": c.failures, "checks": c.checks,
            "vs_gloo": c.vs_gloo, "gloo_lacks": sorted(c.gloo_lacks), "times": times, "topology": topology(),
            "shared_memory": dist.group.WORLD.shared_memory})
    dist.destroy_process_group()


def cut():
    """Large all_reduces until one fails; "READY" once two went through."""
    dist.init_process_group("godist", timeout=datetime.timedelta(seconds=float(os.environ.get("CUT_TIMEOUT_S", 10))))
    rank = dist.get_rank()
    x = torch.ones(4 << 20)
    done, start = 0, time.monotonic()
    try:
        while time.monotonic() - start < 120:
            dist.all_reduce(x)
            x.fill_(1)
            done += 1
            if done == 2:
                print("READY", flush=True)
        result = {"rank": rank, "error": None, "done": done}
    except Exception as e:  # noqa: BLE001 - report what failed and how
        result = {"rank": rank, "error": str(e), "type": type(e).__name__, "done": done,
                  "is_dist_error": isinstance(e, dist.DistBackendError), "cause": getattr(e, "cause", None),
                  "peer": getattr(e, "peer", None), "missing": getattr(e, "missing_ranks", None),
                  "failed_at": time.time()}
    report(result)
    dist.destroy_process_group()


def ddp():
    """A few DDP steps of a float64 model on the default (godist) group and
    then on a gloo group of the same ranks. The gradients are rounded to
    multiples of 2**-24 before they are summed, so the sums are exact and
    every rank must end with the same parameters on both backends."""
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("godist", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()

    def exact_sum(pg, bucket):
        buf = bucket.buffer()
        buf.mul_(2.0 ** 24).round_().div_(2.0 ** 24)
        return dist.all_reduce(buf, group=pg, async_op=True).get_future().then(lambda f: f.value()[0].div_(n))

    def train(pg):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 3)).double()
        before = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
        net = DDP(model, process_group=pg, bucket_cap_mb=0.001)  # several buckets: several all_reduces a step
        net.register_comm_hook(pg, exact_sum)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        for step in range(20):
            g = torch.Generator().manual_seed(100 * step + rank)
            x = torch.randn(16, 20, generator=g, dtype=torch.float64)
            y = torch.randint(0, 3, (16,), generator=g)
            loss = nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        return hashlib.sha256(flat.numpy().tobytes()).hexdigest(), (flat - before).abs().max().item()

    godist_digest, moved = train(dist.group.WORLD)
    gloo_digest, _ = train(dist.new_group(backend="gloo"))
    report({"rank": rank, "host": os.uname().nodename, "world": n, "local_rank": int(os.environ.get("LOCAL_RANK", -1)),
            "master": os.environ.get("MASTER_ADDR"), "backend": dist.get_backend(),
            "godist": godist_digest, "gloo": gloo_digest, "moved": moved})
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode = sys.argv[1]
    if mode == "collectives":
        collectives()
    elif mode == "cut":
        cut()
    elif mode == "ddp":
        ddp()
    else:
        raise SystemExit(f"hosts_worker: unknown mode {mode!r}")
