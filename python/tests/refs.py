"""Deterministic inputs and hand-computed reference results shared by the
tests. Every rank can build every other rank's input locally, so references
need no communication."""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
          torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]
FLOATS = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
COMPLEX = {torch.complex64, torch.complex128}
INTS = {torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64}

R = dist.ReduceOp
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"]
PREMUL_FACTOR = 0.5


def reduce_op(name: str):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(R, name)


def defined(op: str, dtype) -> bool:
    """Whether godist defines op for dtype (the table in libgodist/reduce)."""
    if dtype == torch.bool:
        return op not in ("AVG", "PREMUL_SUM")
    if dtype in INTS:
        return op != "PREMUL_SUM"
    if dtype in FLOATS:
        return op not in ("BAND", "BOR", "BXOR")
    return op in ("SUM", "AVG", "PREMUL_SUM", "PRODUCT")  # complex


def make_input(rank: int, dtype, count: int, op: str = "SUM", salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + 7919 * rank + 31 * count + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    if op in ("BAND", "BOR", "BXOR"):
        return torch.randint(0, 127, (count,), generator=g).to(dtype)
    lo, hi = (0, 4) if dtype == torch.uint8 else (-3, 4)
    if dtype in COMPLEX:
        re = torch.randint(lo, hi, (count,), generator=g).double()
        im = torch.randint(lo, hi, (count,), generator=g).double()
        return torch.complex(re, im).to(dtype)
    return torch.randint(lo, hi, (count,), generator=g).to(dtype)


def reference(op: str, inputs: list[torch.Tensor], dtype) -> torch.Tensor:
    """The exact reduction of inputs, computed in wide types."""
    n = len(inputs)
    if dtype == torch.bool:
        st = torch.stack(inputs)
        if op in ("SUM", "MAX", "BOR"):
            return st.any(0)
        if op in ("PRODUCT", "MIN", "BAND"):
            return st.all(0)
        if op == "BXOR":
            return (st.long().sum(0) % 2).bool()
        raise ValueError(op)
    wide = torch.complex128 if dtype in COMPLEX else (torch.float64 if dtype in FLOATS else torch.int64)
    st = torch.stack([t.to(wide) for t in inputs])
    if op == "SUM":
        out = st.sum(0)
    elif op == "PRODUCT":
        out = st.prod(0)
    elif op == "MIN":
        out = st.amin(0)
    elif op == "MAX":
        out = st.amax(0)
    elif op == "AVG":
        out = torch.div(st.sum(0), n, rounding_mode="trunc") if dtype in INTS else st.sum(0) / n
    elif op == "PREMUL_SUM":
        out = (st * PREMUL_FACTOR).sum(0)
    else:
        fn = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op]
        out = functools.reduce(fn, list(st))
    return out.to(dtype)


def exact(op: str, dtype) -> bool:
    """Whether godist's result must equal the reference bit for bit."""
    return not (op in ("AVG", "PREMUL_SUM") and (dtype in FLOATS or dtype in COMPLEX))


def same(a: torch.Tensor, b: torch.Tensor, is_exact: bool) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if is_exact:
        return torch.equal(a, b)
    try:
        torch.testing.assert_close(a, b)
        return True
    except AssertionError:
        return False
