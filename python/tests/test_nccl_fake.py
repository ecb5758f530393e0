"""The NCCL path's Python side over the fake NCCL (backends/nccl/fakenccl),
without a GPU: the fake stands in for libnccl and the CUDA runtime, and its
"device memory" is host memory, so CPU tensors stand in for CUDA ones and
the current stream is the fake's default stream."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time
from types import SimpleNamespace

import pytest
import torch

from harness import init, run_world

FAKE = os.path.join(os.path.dirname(__file__), "..", "..", "backends", "nccl", "fakenccl")


@pytest.fixture(scope="module")
def fake_so(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the fake NCCL library cannot be built")
    so = str(tmp_path_factory.mktemp("fakenccl") / "libfakenccl.so")
    srcs = [os.path.join(FAKE, f) for f in ("fake_nccl.c", "fake_cuda.c", "fake_run.c")]
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", so, *srcs, "-lpthread"], check=True, timeout=120)
    return so


def _env(monkeypatch, so):
    """The fake for NCCL and the CUDA runtime, in the environment the rank
    processes start with (Go reads its environment when the library loads)."""
    for k, v in {"GODIST_CUDA": "nccl", "GODIST_NCCL_LIBRARY": so, "GODIST_CUDART_LIBRARY": so}.items():
        monkeypatch.setenv(k, v)


def sync_timeout_worker(rank, n, init_file, so, blocking):
    import torch.distributed as dist

    from godist import _nccl

    init(rank, n, init_file, gloo_group=False)
    _nccl._BLOCKING_WAIT = blocking
    fake = ctypes.CDLL(so)  # the copy Go loaded (same path): the same state
    torch.cuda.current_stream = lambda device=None: SimpleNamespace(cuda_stream=0)
    pg = dist.group.WORLD._get_backend(torch.device("cpu"))
    path = pg._device_path()
    dev = torch.device("cuda", 0)
    out = {"path": type(path).__name__}

    def run(t, timeout_ms):
        red = path._reduction("allreduce", "tensor", t, None)
        return path._submit("allreduce", pg._raw_allreduce, dev, [t], t, False, buf=_nccl._desc(t), root=0,
                            timeout_ms=timeout_ms, **red)

    t = torch.arange(4, dtype=torch.float32)
    w = run(t, 5000)
    out["work"] = type(w).__name__
    out["first"] = w.wait()
    fake.fake_set_hang(1)
    try:
        t0 = time.monotonic()
        w = run(t, 300)
        out["returned_after"] = time.monotonic() - t0
        try:
            if not blocking:
                while not w.is_completed() and time.monotonic() - t0 < 5:
                    time.sleep(0.01)
            w.wait()
            out["raised"] = None
        except Exception as e:  # noqa: BLE001 - the test checks what it is
            out["raised"] = (type(e).__name__, str(e), isinstance(e, dist.DistBackendError),
                             isinstance(e, TimeoutError))
        out["failed_after"] = time.monotonic() - t0
        try:
            run(t, 300)
            out["next"] = None
        except Exception as e:  # noqa: BLE001
            out["next"] = str(e)
    finally:
        fake.fake_set_hang(0)
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("blocking", [False, True])
def test_sync_op_timeout_raises_naming_the_op(fake_so, blocking, monkeypatch):
    """A synchronous op whose device work never finishes (a rank that never
    joins) has a Work of its own: its wait() (which torch's frontend calls
    for every synchronous op) raises a timeout naming the op, at once with
    GODIST_CUDA_BLOCKING_WAIT=1 and once the watchdog has found it without
    (the call itself never waited then); the group's next op is refused."""
    _env(monkeypatch, fake_so)
    (r,) = run_world(sync_timeout_worker, 1, fake_so, blocking, timeout=90)
    assert r["path"] == "NcclPath" and r["work"] == "SyncCudaWork" and r["first"], r
    assert r["raised"] is not None, r
    name, msg, is_backend, is_timeout = r["raised"]
    assert is_backend and is_timeout and "allreduce (seq 2)" in msg and "timed out" in msg, r
    assert 0.3 <= r["failed_after"] < 2.5, r
    if not blocking:
        assert r["returned_after"] < 0.3, r
    assert r["next"] is not None and "allreduce (seq 2)" in r["next"], r
