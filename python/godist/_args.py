"""How an op's tensors reach the library: buffer descriptors (pointer,
length) and contiguous stand-ins for non-contiguous outputs."""

from __future__ import annotations

import torch


def _desc(t: torch.Tensor):
    """A contiguous tensor's memory as (pointer, nbytes)."""
    return (t.data_ptr() if t.numel() else None, t.nbytes)


class _Outputs:
    """Contiguous stand-ins for non-contiguous output tensors, copied back
    when the op succeeds."""

    def __init__(self):
        self.copies = []

    def prep(self, t: torch.Tensor) -> torch.Tensor:
        if t.is_contiguous():
            return t
        tmp = t.contiguous()
        self.copies.append((t, tmp))
        return tmp

    def finalize(self):
        for dst, src in self.copies:
            dst.copy_(src)

    def finalizer(self):
        return self.finalize if self.copies else None


def _async(opts) -> bool:
    return bool(getattr(opts, "asyncOp", True)) if opts is not None else True
