"""torch.ops.godist.*: the collectives as torch custom ops, checked against
gloo's answers on the same inputs (every dtype and reduce op, world sizes
1-4, a subgroup, a non-contiguous tensor), bitwise equal on every rank, and
inside torch.compile(fullgraph=True) graphs."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from harness import init, run_world

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool]
OPS = ["sum", "product", "min", "max", "band", "bor", "bxor", "avg"]


def _applies(op: str, dtype) -> bool:
    if op in ("band", "bor", "bxor"):
        return not dtype.is_floating_point
    if dtype is torch.bool:
        return op in ("sum", "min", "max")
    if op == "avg":
        return dtype.is_floating_point
    return True


def _input(rank: int, dtype, k: int = 7) -> torch.Tensor:
    base = torch.arange(k) % 3 + rank + 1
    if dtype is torch.bool:
        return (base % 2).to(torch.bool)
    if dtype.is_floating_point:
        return (base.to(torch.float64) / 4).to(dtype)
    return base.to(dtype)


def _ops_worker(rank, n, init_file):
    import godist.ops  # noqa: F401

    gloo = init(rank, n, init_file)
    out = {}
    for dtype in DTYPES:
        for op in OPS:
            if not _applies(op, dtype):
                continue
            t = _input(rank, dtype)
            torch.ops.godist.all_reduce_(t, op, "")
            want = _input(rank, dtype)
            if op == "avg":  # gloo has no AVG: the sum, divided as torch divides
                wide = want.to(torch.float64)
                dist.all_reduce(wide, group=gloo)
                want = (wide / n).to(dtype)
                out[(str(dtype), op)] = (t.tolist(), torch.allclose(t.double(), want.double(), rtol=1e-2))
                continue
            dist.all_reduce(want, op=godist.ops.reduce_op(op), group=gloo)
            out[(str(dtype), op)] = (t.tolist(), torch.equal(t, want))

    m = (torch.arange(6.0).reshape(2, 3) + rank).t()  # not contiguous
    torch.ops.godist.all_reduce_(m, "sum", "")
    want = (torch.arange(6.0).reshape(2, 3) * n + sum(range(n))).t()
    out["noncontiguous"] = (m.tolist(), torch.equal(m, want))

    g = torch.ops.godist.all_gather(torch.tensor([rank, 10 * rank]), "")
    out["all_gather"] = (g.tolist(), g.tolist() == [x for r in range(n) for x in (r, 10 * r)])
    s = torch.ops.godist.reduce_scatter(torch.arange(2.0 * n) + rank, "sum", "")
    want = (torch.arange(2.0 * n) * n + sum(range(n)))[2 * rank:2 * rank + 2]
    out["reduce_scatter"] = (s.tolist(), torch.equal(s, want))

    if n >= 3:
        sub = dist.new_group([0, n - 1])
        if rank in (0, n - 1):
            u = torch.full((3,), rank + 1.0, dtype=torch.bfloat16)
            torch.ops.godist.all_reduce_(u, "sum", sub.group_name)
            out["subgroup"] = (u.tolist(), u.tolist() == [float(n + 1)] * 3)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(x):
        y = x * 2
        torch.ops.godist.all_reduce_(y, "sum", "")
        return y + 1, torch.ops.godist.all_gather(y, "")

    y, z = step(torch.ones(2) * rank)
    total = 2.0 * sum(range(n))
    out["compiled"] = ((y.tolist(), z.tolist()), y.tolist() == [total + 1] * 2 and z.tolist() == [total] * 2 * n)

    errors = []
    for call in (lambda: torch.ops.godist.all_reduce_(torch.ones(1), "median", ""),
                 lambda: torch.ops.godist.all_reduce_(torch.ones(1), "sum", "no-such-group"),
                 lambda: torch.ops.godist.reduce_scatter(torch.ones(2 * n + 1) if n > 1 else torch.tensor(1.0), "sum",
                                                         "")):
        try:
            call()
            errors.append(None)
        except (ValueError, RuntimeError) as e:
            errors.append(type(e).__name__ + ": " + str(e).splitlines()[0])
    out["errors"] = errors
    dist.destroy_process_group()
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_custom_ops_match_gloo(n):
    import godist.ops  # noqa: F401

    res = run_world(_ops_worker, n, timeout=220)
    for key, entry in res[0].items():
        if key == "errors":
            continue
        value = entry[0]
        for r in range(n):
            if key == "subgroup" and r not in (0, n - 1):
                continue
            assert res[r][key][1], (n, r, key, res[r][key][0])
            assert res[r][key][0] == value or key in ("all_gather", "reduce_scatter", "subgroup"), (n, r, key)
    for r in range(n):
        msgs = res[r]["errors"]
        assert msgs[0] and "unknown reduce op 'median'" in msgs[0], msgs
        assert msgs[1] and "no-such-group" in msgs[1], msgs
        assert msgs[2] and "must be a multiple" in msgs[2], msgs
