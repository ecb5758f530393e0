"""One cell's data and timed ops: the input pattern every rank fills, the
expectation it checks against, and the op a backend runs on it."""

from __future__ import annotations

import os

from .config import REDUCING

# Testing aid: pretend gloo has no reduce_scatter_tensor (as on older torch
# versions) to exercise the unsupported + fallback path.
_FAKE_GLOO_NO_RS = os.environ.get("GODIST_BENCH_GLOO_NO_RS") == "1"


class Variant:
    """One timed thing in a cell: a backend's op (or gloo's fallback)."""

    def __init__(self, backend: str, group, fn, label: str = "native"):
        self.backend, self.group, self.fn, self.label = backend, group, fn, label
        self.status = "ok"
        self.error = ""
        self.wrong = 0
        self.est = 0.0
        self.n = 0
        self.times, self.cpus, self.samples = [], [], []


class CellData:
    """Buffers, input pattern and expectation of one cell on one rank.

    Inputs are x_r[i] = base(i) + r * delta with base(i) = ((i % 251) - 125) / 128
    and delta = 1/64 for floating dtypes (exact in bfloat16 too), and
    base(i) = 3 * (i % 1000003), delta = 1000 for integers. base is periodic, so
    one tiled tensor (cached across cells) gives any range of it as a view:
    filling inputs and checking outputs take no large temporaries."""

    PERIOD = {True: 251, False: 1000003}

    def __init__(self, torch, op: str, dtype: str, nominal: int, rank: int, P: int, cache: dict, device=None):
        self.torch, self.op, self.rank, self.P = torch, op, rank, P
        self.device = device  # None: the CPU; the cache must hold tensors of the same device
        self.dt = getattr(torch, dtype)
        self.is_float = self.dt.is_floating_point
        esize = torch.empty(0, dtype=self.dt).element_size()
        chunked = op in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")
        if op == "barrier":
            self.c, self.count = 0, 0
        elif chunked:
            self.c = max(1, nominal // esize // P)
            self.count = self.c * P
        else:
            self.c = self.count = max(1, nominal // esize)
        self.size = self.count * esize  # S of nccl-tests, bytes
        self.delta = 1.0 / 64 if self.is_float else 1000
        self._cache = cache
        self.rtol = 0.0
        if self.is_float and op in REDUCING:
            self.rtol = {torch.float32: 1e-6, torch.float64: 1e-12}.get(self.dt, 2.0 ** -7) * P
        c, r = self.c, rank
        z = lambda n: torch.empty(n, dtype=self.dt, device=device)  # noqa: E731
        self.work = None
        if op in ("all_reduce", "broadcast"):
            self.buf = z(c)
        elif op == "all_gather_into_tensor":
            self.inp, self.out = z(c), z(P * c)
        elif op == "reduce_scatter_tensor":
            self.inp, self.out = z(P * c), z(c)
        elif op == "all_to_all_single":
            self.inp, self.out = z(P * c), z(P * c)
        elif op == "send_recv":
            self.peer = r ^ 1 if (r ^ 1) < P else None
            self.sbuf, self.rbuf = z(c), z(c)
        self.reset()

    # ----- patterns -------------------------------------------------------
    def base(self, lo: int, n: int):
        """A view of base(lo .. lo+n-1), float32 (floating) or int64."""
        torch = self.torch
        p = self.PERIOD[self.is_float]
        off = lo % p
        t = self._cache.get(self.is_float)
        if t is None or t.numel() < off + n:
            i = torch.arange(p, dtype=torch.int64, device=self.device)
            pat = ((i - 125).to(torch.float32) / 128) if self.is_float else i * 3
            t = pat.repeat(-(-(off + n) // p))
            self._cache[self.is_float] = t
        return t[off:off + n]

    def fill(self, dst, lo: int, r: int):
        """dst = x_r[lo : lo+len(dst)] (exact in every dtype used here)."""
        dst.copy_(self.base(lo, dst.numel()))
        if r:
            dst.add_(r * self.delta)

    def reset(self):
        op, r, c = self.op, self.rank, self.c
        if op in ("all_reduce", "broadcast"):
            self.fill(self.buf, 0, r)
        elif op == "all_gather_into_tensor":
            self.fill(self.inp, r * c, r)
            self.out.fill_(-1)
        elif op in ("reduce_scatter_tensor", "all_to_all_single"):
            self.fill(self.inp, 0, r)
            self.out.fill_(-1)
            if self.work is not None:
                self.work.copy_(self.inp)
        elif op == "send_recv":
            self.fill(self.sbuf, 0, r)
            self.rbuf.fill_(-1)

    # ----- the op on a group ----------------------------------------------
    def fn(self, dist, group, fallback: bool = False):
        op, r, c = self.op, self.rank, self.c
        if op == "all_reduce":
            return lambda: dist.all_reduce(self.buf, group=group)
        if op == "broadcast":
            return lambda: dist.broadcast(self.buf, src=0, group=group)
        if op == "all_gather_into_tensor":
            return lambda: dist.all_gather_into_tensor(self.out, self.inp, group=group)
        if op == "reduce_scatter_tensor":
            if not fallback:
                if _FAKE_GLOO_NO_RS and dist.get_backend(group) == "gloo":
                    def unsupported():
                        raise RuntimeError("reduce_scatter_tensor: not supported (GODIST_BENCH_GLOO_NO_RS=1)")
                    return unsupported
                return lambda: dist.reduce_scatter_tensor(self.out, self.inp, group=group)
            # What users do when reduce_scatter_tensor is missing: reduce the
            # whole input, keep their chunk.
            if self.work is None:
                self.work = self.inp.clone()

            def rs_fallback():
                dist.all_reduce(self.work, group=group)
                self.out.copy_(self.work[r * c:(r + 1) * c])
            return rs_fallback
        if op == "all_to_all_single":
            return lambda: dist.all_to_all_single(self.out, self.inp, group=group)
        if op == "barrier":
            return lambda: dist.barrier(group=group)
        if op == "send_recv":
            peer = self.peer
            if peer is None:  # odd world size: the last rank sits out
                return lambda: None
            if r % 2 == 0:
                def ping():
                    dist.send(self.sbuf, peer, group=group)
                    dist.recv(self.rbuf, peer, group=group)
                return ping

            def pong():
                dist.recv(self.rbuf, peer, group=group)
                dist.send(self.sbuf, peer, group=group)
            return pong
        raise ValueError(op)

    # ----- correctness ----------------------------------------------------
    def pieces(self):
        """(output view, lo, scale, shift): the view must equal
        scale * base(lo : lo+len) + shift."""
        op, P, r, c, d = self.op, self.P, self.rank, self.c, self.delta
        total = d * P * (P - 1) / 2 if self.is_float else d * P * (P - 1) // 2
        if op == "all_reduce":
            return [(self.buf, 0, P, total)]
        if op == "reduce_scatter_tensor":
            return [(self.out, r * c, P, total)]
        if op == "broadcast":
            return [(self.buf, 0, 1, 0)]
        if op == "all_gather_into_tensor":  # chunk s is rank s's input
            return [(self.out[s * c:(s + 1) * c], s * c, 1, s * d) for s in range(P)]
        if op == "all_to_all_single":  # chunk s is chunk r of rank s's input
            return [(self.out[s * c:(s + 1) * c], r * c, 1, s * d) for s in range(P)]
        if op == "send_recv" and self.peer is not None:
            return [(self.rbuf, 0, 1, self.peer * d)]
        return []

    def mismatches(self) -> int:
        bad = 0
        for got, lo, scale, shift in self.pieces():
            b = self.base(lo, got.numel())
            want = b * scale if scale != 1 else b.clone()
            if shift:
                want.add_(shift)
            g = got if got.dtype == want.dtype else got.to(want.dtype)
            n_bad = got.numel() - int((g == want).sum())
            if n_bad and self.rtol:
                mag = b.abs().mul_(scale).add_(abs(shift))  # >= sum over ranks of |x_r|
                n_bad = int((~((g - want).abs() <= mag.mul_(self.rtol))).sum())
            bad += n_bad
        return bad
