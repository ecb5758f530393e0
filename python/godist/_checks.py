"""Input checks: every bad argument becomes a clear Python exception here,
before anything reaches Go."""

from __future__ import annotations

import torch

from ._types import DTYPE_CODES

_STRIDED = torch.strided


def _plain(t) -> bool:
    """A dense CPU tensor (the fast check; tensor() explains a failure)."""
    return isinstance(t, torch.Tensor) and t.layout is _STRIDED and t.is_cpu


def tensor(op: str, name: str, t) -> torch.Tensor:
    """Check one tensor argument: a dense CPU tensor."""
    if _plain(t):
        return t
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"godist: {op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise ValueError(f"godist: {op}: {name} is a {t.layout} tensor; only dense (strided) tensors are supported")
    if t.device.type != "cpu":
        raise ValueError(f"godist: {op}: {name} is on device {t.device}; godist currently runs collectives on CPU "
                         "tensors only (move it with .cpu() or use the nccl backend for GPU tensors)")
    return t


def tensor_list(op: str, name: str, ts, length: int | None = None) -> list:
    if not isinstance(ts, (list, tuple)):
        raise TypeError(f"godist: {op}: {name} must be a list of tensors, got {type(ts).__name__}")
    if length is not None and len(ts) != length:
        raise ValueError(f"godist: {op}: {name} must have {length} tensor(s), got {len(ts)}")
    for i, t in enumerate(ts):
        if not _plain(t):
            tensor(op, f"{name}[{i}]", t)
    return list(ts)


def single(op: str, name: str, ts) -> torch.Tensor:
    """The one tensor of a one-element list (what c10d passes for one device)."""
    # The common case, checked without building names for messages: every
    # small op pays for this check.
    if type(ts) is list and len(ts) == 1:
        t = ts[0]
        if _plain(t):
            return t
    return tensor_list(op, name, ts, 1)[0]


def dtype_code(op: str, name: str, t: torch.Tensor) -> int:
    code = DTYPE_CODES.get(t.dtype)
    if code is None:
        raise TypeError(f"godist: {op}: {name} has dtype {t.dtype}, which godist cannot reduce "
                        f"(supported: {', '.join(str(d).replace('torch.', '') for d in DTYPE_CODES)})")
    return code


def same_kind(op: str, name: str, ts: list, like: torch.Tensor, numel: int | None = None) -> None:
    """Every tensor of ts has like's dtype and, if given, numel elements."""
    want = like.numel() if numel is None else numel
    for i, t in enumerate(ts):
        if t.dtype != like.dtype:
            raise TypeError(f"godist: {op}: {name}[{i}] has dtype {t.dtype}, expected {like.dtype}")
        if t.numel() != want:
            raise ValueError(f"godist: {op}: {name}[{i}] has {t.numel()} elements, expected {want}")


def rank(op: str, name: str, r, size: int, allow_self_rank: int | None = None) -> int:
    if not isinstance(r, int) or isinstance(r, bool):
        raise TypeError(f"godist: {op}: {name} must be an int, got {type(r).__name__}")
    if r < 0 or r >= size:
        raise ValueError(f"godist: {op}: {name} {r} is out of range for a group of size {size}")
    return r


def tag(op: str, t) -> int:
    """Check a point-to-point tag: an int that fits in 64 bits."""
    if isinstance(t, bool) or not isinstance(t, int):
        try:
            t = int(t)
        except (TypeError, ValueError):
            raise TypeError(f"godist: {op}: tag must be an int, got {type(t).__name__}") from None
    if not -(1 << 63) <= t < (1 << 63):
        raise ValueError(f"godist: {op}: tag {t} does not fit in 64 bits")
    return t


def rows(op: str, name: str, t: torch.Tensor, splits, n: int):
    """(pointer, nbytes) of each of n ranks' rows of contiguous t along dim
    0: splits[r] rows for rank r, or equal parts if splits is empty."""
    nrows = t.shape[0] if t.dim() > 0 else t.numel()
    row_bytes = (t.nbytes // nrows) if nrows else 0
    if not splits:
        if nrows % n:
            raise ValueError(f"godist: {op}: {name} has {nrows} rows along dim 0, not divisible by the group size {n}; "
                             "pass split sizes")
        splits = [nrows // n] * n
    splits = list(splits)
    if len(splits) != n:
        raise ValueError(f"godist: {op}: {name}_split_sizes has {len(splits)} entries, expected {n}")
    if any((not isinstance(s, int)) or s < 0 for s in splits):
        raise ValueError(f"godist: {op}: {name}_split_sizes must be non-negative ints, got {splits}")
    if sum(splits) != nrows:
        raise ValueError(f"godist: {op}: {name}_split_sizes sum to {sum(splits)} but {name} has {nrows} rows")
    base = t.data_ptr() if t.numel() else None
    pairs, off = [], 0
    for s in splits:
        nb = s * row_bytes
        pairs.append(((base + off) if base is not None and nb else None, nb))
        off += nb
    return pairs


def single_any(op: str, name: str, ts):
    """The one element of a one-element list, of any device (the device
    paths check it)."""
    if not isinstance(ts, (list, tuple)) or len(ts) != 1:
        raise ValueError(f"godist: {op}: {name} must be a list holding one tensor")
    return ts[0]


def list_any(op: str, name: str, ts, length: int | None = None) -> list:
    """A list of length elements (if given), of any device."""
    if not isinstance(ts, (list, tuple)):
        raise TypeError(f"godist: {op}: {name} must be a list of tensors, got {type(ts).__name__}")
    if length is not None and len(ts) != length:
        raise ValueError(f"godist: {op}: {name} must have {length} tensor(s), got {len(ts)}")
    return list(ts)
