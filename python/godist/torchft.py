"""godist for torchft: ``ProcessGroupGodist``, a reconfigurable process group
for torchft's Manager, on godist.

    from godist.torchft import ProcessGroupGodist
    manager = torchft.Manager(pg=ProcessGroupGodist(timeout=timedelta(seconds=10)), ...)

torchft rebuilds its process group on every membership change: each
rebuild here is a godist group (the fast path, shared memory between the
replicas on one host), made in milliseconds; an abort fails every pending
op at once; ``errored()`` reports the group's error state. Needs the
``torchft`` package (``torchft-nightly`` on PyPI), which this module
imports.
"""

from __future__ import annotations

from datetime import timedelta

from torchft.process_group import ProcessGroupWrapper

from .process_group import GodistProcessGroup

__all__ = ["ProcessGroupGodist"]


class ProcessGroupGodist(ProcessGroupWrapper):
    """A reconfigurable godist group for torchft (CPU tensors; CUDA tensors
    take godist's NCCL or staged path)."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60), pg=None) -> None:
        super().__init__(timeout=timeout, pg=pg)

    def _create_pg(self, store, rank: int, world_size: int) -> GodistProcessGroup:
        # the same on every member (the Go rendezvous checks it), as torchft
        # names its gloo groups
        name = f"torchft_{self._uuid}"
        if self._group_rank is not None and self._group_world_size:
            name = f"torchft_{self._uuid}_rank_{self._group_rank % self._group_world_size}"
        return GodistProcessGroup(store, rank, world_size, self._timeout, group_name=name)

    def getBackendName(self) -> str:
        return "torchft-godist"

    def errored(self) -> Exception | None:
        """The error that broke the current group, if any."""
        pg = self._pg
        if pg is None or not isinstance(pg, GodistProcessGroup):
            return None
        g = pg._g
        if g._closed:
            return None
        from . import _errors, _lib

        code = g.error()
        if code == _errors.OK:
            return None
        import json

        state = json.loads(_lib.read_bytes(_lib.load().pg_state, g._h, size=1 << 14))
        cause = state.get("broken") or "an op failed"
        return _errors.make_error(code, f"godist: group {g._name!r} aborted its work: {cause}")
