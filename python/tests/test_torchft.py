"""torchft on godist: torchft's own process-group tests run against
godist.torchft.ProcessGroupGodist (every collective on 3 ranks, then again
after one rank fails and the others reconfigure without it), its API check
with DDP, and a reconfigure with a missing peer."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import torch

torchft = pytest.importorskip("torchft.process_group", reason="torchft (torchft-nightly) is not installed")
pgt = pytest.importorskip("torchft.process_group_test", reason="torchft's tests need its dev extras (parameterized)")
from parameterized import parameterized  # noqa: E402

import godist  # noqa: E402,F401

pytestmark = [pytest.mark.skipif(not godist._HAS_BACKEND, reason="torchft's reconfigurable groups need torch 2.14+"),
              pytest.mark.timeout(60)]


def _godist_pg(timeout: timedelta):
    from godist.torchft import ProcessGroupGodist

    return ProcessGroupGodist(timeout=timeout)


class TestGodistMultiPg(pgt.MultiPgBaseTest):
    """torchft's multi-rank test (ranks as threads of this process, every
    collective checked by torchft's own functions), on godist."""

    BACKEND = "godist"
    WORLD_SIZE = 3
    COLLECTIVES = list(pgt._ALL_COLLECTIVES)

    @classmethod
    def _create_pg(cls, backend: str):
        return _godist_pg(timedelta(seconds=10))

    def assertRaisesRegex(self, expected, regex, *args, **kwargs):
        # torchft's test lists each backend's wording of a lost peer; godist
        # says the peer shut the group down or left it.
        if isinstance(regex, str) and "Connection closed by peer" in regex:
            regex = regex.rstrip(")") + "|shut the group down|left the group)"
        return super().assertRaisesRegex(expected, regex, *args, **kwargs)

    @parameterized.expand(COLLECTIVES)
    def test_collective(self, collective: str) -> None:
        self._run_parallel(collective, device="cpu")

    @parameterized.expand(COLLECTIVES)
    def test_collective_with_resiliency(self, collective: str) -> None:
        self._run_with_resiliency(collective, device="cpu")


def test_apis_and_ddp():
    """torchft's API check (every op and call form it uses) and a DDP step,
    on a one-rank ProcessGroupGodist, as torchft checks its gloo group."""
    from torch.distributed import TCPStore

    store = TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
    pg = _godist_pg(timedelta(seconds=10))
    torchft.reconfigure_with_store(pg, f"localhost:{store.port}/prefix", 0, 1)
    assert pg.size() == 1 and pg.getBackendName() == "torchft-godist"
    works = pgt._test_pg(pg, torch.tensor([2]))
    assert set(works) == {"allreduce", "allreduce_coalesced", "allgather", "allgather_into_tensor_coalesced",
                          "alltoall_base", "barrier", "broadcast", "broadcast_one", "reduce_scatter",
                          "reduce_scatter_tensor_coalesced"}, works  # none skipped as unsupported
    m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 4), process_group=pg)
    m(torch.rand(2, 3)).sum().backward()
    assert pg.errored() is None


def test_reconfigure_with_a_missing_peer_times_out():
    """A reconfigure whose other member never comes fails within the
    timeout (torchft then retries with the members it has)."""
    from torch.distributed import TCPStore

    store = TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
    pg = _godist_pg(timedelta(seconds=1))
    t0 = time.monotonic()
    with pytest.raises(Exception, match="(?i)timed out|timeout"):
        torchft.reconfigure_with_store(pg, f"localhost:{store.port}/missing", 0, 2, timeout=timedelta(seconds=1))
    assert time.monotonic() - t0 < 10
