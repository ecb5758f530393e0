"""Desync checks from the Python side: under TORCH_DISTRIBUTED_DEBUG=DETAIL
each collective describes the shapes of the tensors every rank passes
alike; Go hashes the description into the op's fingerprint, which the
ranks compare (a difference raises GodistDesyncError, showing each rank
its own description)."""

from __future__ import annotations

import os

import torch.distributed as dist

from ._types import describe


def detail_mode() -> bool:
    """Whether TORCH_DISTRIBUTED_DEBUG is DETAIL (as torch read it when it
    was imported, or as the environment says now)."""
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").strip().upper() == "DETAIL":
        return True
    try:
        return dist.get_debug_level() == dist.DebugLevel.DETAIL
    except (AttributeError, RuntimeError):
        return False


def details(op: str, **tensors) -> dict:
    """The detail field of an op on these tensors (or lists of them)."""
    parts = []
    for name, t in tensors.items():
        if isinstance(t, (list, tuple)):
            parts.append(f"{name}=[{', '.join(describe(x) for x in t)}]")
        else:
            parts.append(f"{name}={describe(t)}")
    return {"detail": f"{op}({', '.join(parts)})".encode()}


def nothing(op: str, **tensors) -> dict:
    """The detail field of an op without TORCH_DISTRIBUTED_DEBUG=DETAIL."""
    return {}
