"""Mappings between torch types and godist's codes."""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

# dtype codes: libgodist/reduce/dtype.go
DTYPE_CODES = {
    torch.float16: 0,
    torch.bfloat16: 1,
    torch.float32: 2,
    torch.float64: 3,
    torch.complex64: 4,
    torch.complex128: 5,
    torch.int8: 6,
    torch.uint8: 7,
    torch.int16: 8,
    torch.int32: 9,
    torch.int64: 10,
    torch.bool: 11,
}

def dtype_or_bytes(t: torch.Tensor) -> int:
    """The dtype code of t for an op that moves bytes (broadcast, all_gather,
    ...: its fingerprint names the dtype), -1 when godist has no code for it."""
    return DTYPE_CODES.get(t.dtype, -1)


def describe(t: torch.Tensor) -> str:
    """A tensor as a desync description shows it: float32[2, 3]."""
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


# ReduceOp.RedOpType values, which godist's op codes equal.
OP_NAMES = {0: "SUM", 1: "AVG", 2: "PRODUCT", 3: "MIN", 4: "MAX", 5: "BAND", 6: "BOR", 7: "BXOR", 8: "PREMUL_SUM"}
PREMUL_SUM = 8


def reduce_op(op) -> tuple[int, float]:
    """Return (op code, PREMUL_SUM factor) for a ReduceOp or RedOpType."""
    if op is None:
        return 0, 0.0
    factor = 0.0
    kind = getattr(op, "op", op)
    code = int(kind)
    if code == PREMUL_SUM:
        state = op.__getstate__() if hasattr(op, "__getstate__") else None
        f = state[1] if isinstance(state, tuple) and len(state) > 1 else None
        if f is None:
            raise ValueError("godist: PREMUL_SUM needs a factor; create it with "
                             "dist._make_nccl_premul_sum(factor)")
        if isinstance(f, torch.Tensor):
            if f.numel() != 1:
                raise ValueError(f"godist: PREMUL_SUM factor must be a scalar, got a tensor of shape {tuple(f.shape)}")
            f = f.item()
        if isinstance(f, complex):
            if f.imag != 0:
                raise ValueError(f"godist: PREMUL_SUM factor {f} is complex; only real factors are supported")
            f = f.real
        factor = float(f)
    if code not in OP_NAMES:
        raise ValueError(f"godist: unsupported reduce op {op}")
    return code, factor


def timeout_ms(timeout, default_ms: int = 0) -> int:
    """Milliseconds from an options timeout; negative/unset means the default (0)."""
    if timeout is None:
        return default_ms
    if isinstance(timeout, datetime.timedelta):
        ms = int(timeout.total_seconds() * 1000)
    else:
        ms = int(timeout)
    return ms if ms > 0 else default_ms


def opts_timeout(opts) -> int:
    return timeout_ms(getattr(opts, "timeout", None)) if opts is not None else 0


def default_timeout() -> datetime.timedelta:
    return getattr(dist, "default_pg_timeout", datetime.timedelta(minutes=30))
