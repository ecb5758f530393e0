"""torch's flight recorder and godist groups.

torch records a godist group's collectives in its flight recorder through
pre/post collective hooks on the group, which put each op on torch's route
(process_group.py): godist does so when the environment asks for the
recorder. When a collective fails, godist writes the recorder's trace as
torch's own backends do, for ``torchfrtrace``.
"""

from __future__ import annotations

import logging
import os

import torch
import torch.distributed as dist

from . import _log


def requested() -> bool:
    """Whether the environment asks for torch's flight recorder
    (TORCH_FR_BUFFER_SIZE, else TORCH_NCCL_TRACE_BUFFER_SIZE, above 0)."""
    for var in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        v = os.environ.get(var, "").strip()
        if v:
            try:
                return int(v) > 0
            except ValueError:
                return False
    return False


_fr_dumped = False


def dump() -> None:
    """Write the flight recorder's trace of godist's groups to
    <TORCH_FR_DUMP_TEMP_FILE><global rank>, once per process (what torch's
    own backends do when a collective fails), for torchfrtrace to read."""
    global _fr_dumped
    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace_file", None)
    if _fr_dumped or dump is None or not requested():
        return
    _fr_dumped = True
    try:
        rank = dist.get_rank() if dist.is_initialized() else 0
        dump(rank, backend="godist")
    except Exception as e:  # noqa: BLE001 - a failed dump must not hide the op's error
        _log.log(logging.WARNING, "godist: could not write the flight recorder's trace: %s", e)


