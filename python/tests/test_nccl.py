"""The NCCL path (godist._nccl, backends/nccl) where there is no GPU: the
nvidia-nccl wheel's libnccl.so.2 loads, its version and unique ids are
right, and CUDA work on a host without a driver fails with a clear error
(not a crash, not a hang). That libgodist.so links no GPU library is
test_gpuinfo.py's test_library_needs_no_gpu_library."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import time

import pytest
import torch
import torch.distributed as dist

from godist import _errors, _lib
from godist._nccl import CudaRules, NcclPath, nccl_info
from harness import init, run_world

C = torch._C._distributed_c10d

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answers of a host without a CUDA device")

FLOAT32 = 2  # godist's dtype codes (libgodist/reduce/dtype.go)


def _wheel_header() -> str | None:
    spec = importlib.util.find_spec("nvidia.nccl")
    for d in (spec.submodule_search_locations or []) if spec else []:
        p = os.path.join(d, "include", "nccl.h")
        if os.path.exists(p):
            return p
    return None


def _torch_nccl_version() -> str:
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else f"{v // 10000}.{v // 100 % 100}.{v % 100}"


# ----- what loads ------------------------------------------------------

@pytest.mark.timeout(60)
def test_nccl_info_reports_the_wheel():
    info = nccl_info()
    assert info["available"], info
    assert info["version"] == _torch_nccl_version(), info
    header = _wheel_header()
    if header is None:
        pytest.skip("no nvidia-nccl wheel header (nvidia/nccl/include/nccl.h)")
    with open(header) as f:
        code = int(re.search(r"#define\s+NCCL_VERSION_CODE\s+(\d+)", f.read()).group(1))
    assert info["version_code"] == code, info
    # torch has loaded NCCL already: godist uses that copy, never a second.
    assert "already loaded" in info["nccl_from"], info
    assert info["unique_id"] is True and "unique_id_error" not in info, info
    if not torch.cuda.is_available():
        assert info["devices"] == 0, info
        assert "cudaGetDeviceCount" in info["devices_error"], info
        assert "driver" in info["devices_error"].lower(), info


# ----- a group on a host without a driver --------------------------------

def _group():
    return dist.group.WORLD._get_backend(torch.device("cpu"))


def ensure_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    pg = _group()
    start = time.monotonic()
    try:
        NcclPath(pg)._ensure(torch.device("cuda", 0))
    except Exception as e:  # noqa: BLE001 - the test checks what it is
        return {"godist": isinstance(e, _errors.GodistError), "backend": isinstance(e, dist.DistBackendError),
                "type": type(e).__name__, "msg": str(e), "s": time.monotonic() - start,
                "path": type(pg._device_path()).__name__}
    return {"ok": True}


@no_gpu
@pytest.mark.timeout(120)
def test_nccl_communicator_without_a_driver_fails_clearly():
    (r,) = run_world(ensure_worker, 1, env={"GODIST_CUDA": "nccl"}, timeout=90)
    assert "ok" not in r, "a communicator was made on a host without a GPU"
    assert r["godist"] and r["backend"], r
    assert re.search(r"ncclCommInitRankConfig|cudaSetDevice", r["msg"]), r
    assert re.search(r"CUDA (driver|error)|driver version is insufficient", r["msg"]), r
    assert r["s"] < 30, r
    assert r["path"] == "NcclPath", r


def auto_path_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    return type(_group()._device_path()).__name__


@no_gpu
@pytest.mark.timeout(120)
def test_auto_takes_the_staged_path_without_a_device():
    env = {k: "" for k in ("GODIST_CUDA",) if k in os.environ}
    assert run_world(auto_path_worker, 1, env=env, timeout=90) == ["StagedPath"]


def _block(pg, op="allreduce", dtype=FLOAT32):
    return _lib.GodistOp(pg=pg._h, buf=_lib.GodistBuf(data=0x10000, nbytes=64), flags=_lib.CUDA, dtype=dtype,
                         device=0, op_code=_lib.OP_CODES.get(op, op if isinstance(op, int) else -1),
                         timeout_ms=5000)


def op_entry_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    pg, lib = _group(), _lib.load()
    out = {}

    def call(key, fn):
        try:
            fn()
            out[key] = ("ok", "")
        except Exception as e:  # noqa: BLE001 - the test checks what it is
            out[key] = (type(e).__name__, str(e), isinstance(e, _errors.GodistInvalidError))

    call("no_comm", lambda: _lib.run(lib.raw.allreduce, _block(pg)))
    call("bad_dtype", lambda: _lib.run(lib.raw.allreduce, _block(pg, dtype=99)))

    def batch(op_code):
        arr = (_lib.GodistOp * 1)(_block(pg, op=op_code))
        eb = _lib.ErrorBuf()
        arr[0].errbuf, arr[0].errlen = ctypes.addressof(eb), _lib.ERRLEN
        rc = lib.raw.device_batch(ctypes.addressof(arr), 1)
        if rc != _errors.OK:
            raise _errors.from_buffer(rc, eb)

    call("batch_unknown_op", lambda: batch(99))
    call("batch_negative_op", lambda: batch(-1))
    call("batch_no_comm", lambda: batch(_lib.OP_CODES["allreduce"]))
    out["alive"] = True
    return out


@pytest.mark.timeout(120)
def test_cuda_op_blocks_without_a_communicator_are_invalid():
    (r,) = run_world(op_entry_worker, 1, timeout=90)
    assert r["alive"]
    for key in ("no_comm", "bad_dtype", "batch_unknown_op", "batch_negative_op", "batch_no_comm"):
        assert r[key][0] == "GodistInvalidError" and r[key][2], (key, r[key])
    assert "no communicator" in r["no_comm"][1], r
    assert "no communicator" in r["batch_no_comm"][1], r
    assert "dtype" in r["bad_dtype"][1], r
    assert "unknown op" in r["batch_unknown_op"][1], r


# ----- reduce ops NCCL refuses ------------------------------------------

def _reduction(dtype, op):
    opts = C.AllreduceOptions()
    opts.reduceOp = op
    return CudaRules().reduction("allreduce", "tensor", torch.zeros(2, dtype=dtype), opts)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("op", [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR])
def test_reduction_refuses_bitwise_ops(op):
    with pytest.raises(ValueError, match="NCCL"):
        _reduction(torch.int32, op)


@pytest.mark.timeout(60)
def test_reduction_refuses_int16():
    with pytest.raises(TypeError, match="int16"):
        _reduction(torch.int16, dist.ReduceOp.SUM)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("op", [dist.ReduceOp.MIN, dist.ReduceOp.MAX])
def test_reduction_refuses_order_on_complex(op):
    with pytest.raises(ValueError, match="complex"):
        _reduction(torch.complex64, op)


@pytest.mark.timeout(60)
def test_reduction_accepts_what_nccl_has():
    assert _reduction(torch.float32, dist.ReduceOp.SUM)["dtype"] == FLOAT32
    assert _reduction(torch.complex64, dist.ReduceOp.SUM)["dtype"] == FLOAT32  # as its real view
    assert _reduction(torch.bool, dist.ReduceOp.MAX)["reduce_op"] == 4
    with pytest.raises(ValueError, match="bool"):
        _reduction(torch.bool, dist.ReduceOp.AVG)


# ----- which communicator an op makes ------------------------------------

class _Store:
    def __init__(self, kv):
        self.kv, self.written = dict(kv), []

    def set(self, k, v):
        self.kv[k] = v
        self.written.append(k)

    def get(self, k):
        return self.kv[k]


class _OpenLib:
    def __init__(self):
        self.opened = []

    def device_id(self, h):  # stands in for the entry point read_bytes calls
        raise AssertionError("not called: read_bytes is replaced")

    def device_open(self, h, device, peer, uid, n):
        self.opened.append(peer)


@pytest.mark.timeout(60)
def test_point_to_point_gets_its_pair_communicator(monkeypatch):
    """Once the group has a communicator, a send or recv still makes (once)
    the communicator of its pair of ranks, as ProcessGroupNCCL does; an op
    to this rank itself takes the group's."""
    import threading
    from types import SimpleNamespace

    from godist import _nccl

    monkeypatch.setattr(_nccl._lib, "read_bytes", lambda fn, h, size: b"u" * size)
    path = NcclPath.__new__(NcclPath)
    path._pg = SimpleNamespace(_rank=1, _size=4, _h=7, _store=_Store({"godist/nccl/group": b"g" * 128, "godist/nccl/p2p/0-1": b"p" * 128}))
    path._lib, path._lock, path._ready = _OpenLib(), threading.Lock(), set()
    dev = torch.device("cuda", 0)
    path._ensure(dev)  # a collective: the group's
    path._ensure(dev, 3)  # a send to 3 after it: the pair's
    path._ensure(dev, 3)
    path._ensure(dev, 0)
    path._ensure(dev, 1)  # to itself: the group's
    assert path._lib.opened == [-1, 3, 0]
    assert path._pg._store.written == ["godist/nccl/p2p/1-3"]  # rank 1 leads the pair 1-3 only
