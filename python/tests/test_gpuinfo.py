"""``godist-gpuinfo``, the program that reports the machine's NVIDIA GPUs
(cmd/godist-gpuinfo), as the package ships it and ``godist info`` shows it;
and that the Go library itself links no GPU library: the NVML bindings live
only in that program."""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

from godist import _lib, info

NO_DRIVER = "no NVIDIA driver: libnvidia-ml.so.1 not found"
GPU_LIBRARY = re.compile(r"cuda|cudart|nccl|nvidia-ml|nvml", re.I)


def _has_nvidia_driver() -> bool:
    return os.path.exists("/proc/driver/nvidia") or ctypes.util.find_library("nvidia-ml") is not None


def _run_info(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GODIST_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run([sys.executable, "-m", "godist", "info", *args], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def gpuinfo() -> str:
    path = info.gpuinfo_path()
    assert os.path.isfile(path) and os.access(path, os.X_OK), f"{path} is missing: build it with `make lib`"
    return path


# The two tests marked gpu also run in `pytest -m gpu` (tools/gpu-check.sh),
# first: on a GPU host they check the inventory against a real driver.
@pytest.mark.gpu
@pytest.mark.timeout(15)
def test_program_answers_json(gpuinfo):
    p = subprocess.run([gpuinfo], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert set(r) == {"available", "reason", "library", "driver_version", "cuda_driver_version", "nvml_version",
                      "device_count", "devices", "topology", "errors"}
    assert r["library"] == "libnvidia-ml.so.1"
    if not _has_nvidia_driver():
        assert r == {"available": False, "reason": NO_DRIVER, "library": "libnvidia-ml.so.1", "driver_version": None,
                     "cuda_driver_version": None, "nvml_version": None, "device_count": None, "devices": [],
                     "topology": [], "errors": {}}
        return
    assert r["available"], r
    assert len(r["devices"]) == r["device_count"]
    assert len(r["topology"]) == r["device_count"] * (r["device_count"] - 1) // 2
    for d in r["devices"]:
        assert d["name"] and d["uuid"].startswith(("GPU-", "MIG-")) and d["memory_total"] > 0, d


@pytest.mark.timeout(60)
def test_program_usage(gpuinfo):
    p = subprocess.run([gpuinfo, "--pretty"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout.startswith("{\n  \"available\": "), p
    p = subprocess.run([gpuinfo, "--bogus"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "usage: godist-gpuinfo" in p.stderr and p.stdout == ""


@pytest.mark.gpu
@pytest.mark.timeout(15)
def test_gpu_info_helper(gpuinfo):
    r = info.gpu_info()
    p = subprocess.run([gpuinfo], capture_output=True, text=True, timeout=10)
    want = json.loads(p.stdout)
    if want["available"]:  # free memory moves between the two runs
        for d in want["devices"] + r["devices"]:
            d["memory_free"] = d["memory_used"] = None
    assert r == dict(want, executable=gpuinfo)
    if not _has_nvidia_driver():
        assert not r["available"] and r["reason"] == NO_DRIVER


@pytest.mark.timeout(60)
def test_gpu_info_when_the_program_cannot_answer(tmp_path):
    missing = str(tmp_path / "godist-gpuinfo")
    r = info.gpu_info(executable=missing)
    assert not r["available"] and r["devices"] == [] and r["executable"] == missing
    assert r["reason"] == (f"godist-gpuinfo is not in the package ({missing}): rebuild it with `make lib` or "
                           "reinstall godist")

    def script(name, body):
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)
        return str(path)

    r = info.gpu_info(executable=script("fails", "echo 'symbol lookup error: nvmlFoo' >&2; exit 127"))
    assert not r["available"] and r["reason"] == "godist-gpuinfo exited with 127: symbol lookup error: nvmlFoo"
    r = info.gpu_info(executable=script("garbage", "echo not json"))
    assert not r["available"] and r["reason"] == "godist-gpuinfo printed no JSON report"
    r = info.gpu_info(executable=script("hangs", "exec sleep 30"), timeout=0.5)
    assert not r["available"] and r["reason"] == "godist-gpuinfo did not finish within 0.5 s"
    plain = tmp_path / "not-executable"
    plain.write_text("")
    r = info.gpu_info(executable=str(plain))
    assert not r["available"] and r["reason"].startswith("cannot run godist-gpuinfo: ")


@pytest.mark.timeout(180)
def test_godist_info_shows_it(gpuinfo):
    r = _run_info("--json")
    assert r.returncode == 0, r.stderr
    gi = json.loads(r.stdout)["gpus"]["gpuinfo"]
    assert gi["executable"] == gpuinfo and isinstance(gi["available"], bool)
    out = _run_info()
    assert out.returncode == 0, out.stderr
    section = out.stdout[out.stdout.index("\nGPUs\n"):out.stdout.index("\nSettings\n")]
    if not _has_nvidia_driver():
        assert gi["reason"] == NO_DRIVER
        assert f"\n  godist-gpuinfo: {NO_DRIVER}\n" in section
    else:
        assert gi["available"], gi
        assert re.search(r"\n  godist-gpuinfo: NVML \S+, driver \S+, CUDA \d+\.\d+, \d+ GPUs?\n", section), section


@pytest.mark.timeout(60)
def test_gpuinfo_lines():
    """The text of a two-GPU report (as cmd/godist-gpuinfo's tests fake it)."""
    dev = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "pci_bus_id": "00000000:18:00.0",
           "memory_total": 80 << 30, "memory_free": 79 << 30, "memory_used": 1 << 30, "compute_capability": "9.0",
           "nvlink": {"supported": True, "count": 18, "active": 18, "links": []}, "errors": {}}
    lost = {**{k: None for k in dev}, "index": 1, "nvlink": {"supported": False, "count": 0, "active": 0, "links": []},
            "errors": {"handle": "nvmlDeviceGetHandleByIndex(1): GPU is lost (15)"}}
    gi = {"available": True, "reason": None, "driver_version": "580.65.06", "cuda_driver_version": "13.0",
          "nvml_version": "13.580.65.06", "device_count": 2, "devices": [dev, lost], "errors": {},
          "topology": [{"gpus": [0, 1], "level": "node", "smi": "NODE", "p2p": {"read": "ok", "nvlink": "ok"},
                        "errors": {"p2p_atomics": "nvmlDeviceGetP2PStatus(atomics): Not Supported (3)"}}]}
    assert info._gpuinfo_lines(gi) == [
        "  godist-gpuinfo: NVML 13.580.65.06, driver 580.65.06, CUDA 13.0, 2 GPUs",
        "    GPU 0: NVIDIA H100 80GB HBM3, GPU-0, PCI 00000000:18:00.0, compute capability 9.0, "
        "80.0 GiB (1.0 GiB used), NVLink: 18 of 18 links active",
        "    GPU 1: name unknown, no NVLink",
        "      error: nvmlDeviceGetHandleByIndex(1): GPU is lost (15)",
        "    GPU 0 - GPU 1: NODE (through the host bridges of one NUMA node), P2P read ok, nvlink ok",
        "      error: nvmlDeviceGetP2PStatus(atomics): Not Supported (3)",
    ]
    assert info._gpuinfo_lines({"available": False, "reason": NO_DRIVER}) == [f"  godist-gpuinfo: {NO_DRIVER}"]


# ----- libgodist.so links no GPU library -----

def _needed(path: str) -> list[str]:
    """The DT_NEEDED entries of an ELF file: readelf's, or read here."""
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, timeout=60, check=True).stdout
        return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF file"
    end = "<" if data[5] == 1 else ">"
    shoff, shentsize, shnum = struct.unpack_from(end + "Q10xHH", data, 0x28)
    sections = [struct.unpack_from(end + "IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    needed = []
    for _, kind, _, _, off, size, link, _, _, entsize in sections:
        if kind == 6:  # SHT_DYNAMIC; its strings are in section link
            strtab = sections[link][4]
            for i in range(size // entsize):
                tag, val = struct.unpack_from(end + "qQ", data, off + i * entsize)
                if tag == 1:  # DT_NEEDED
                    needed.append(data[strtab + val:data.index(b"\0", strtab + val)].decode())
    return needed


@pytest.mark.timeout(60)
def test_library_needs_no_gpu_library():
    lib = _lib.library_path()
    needed = _needed(lib)
    assert needed, f"{lib}: no NEEDED entries read"
    assert not [n for n in needed if GPU_LIBRARY.search(n)], needed


@pytest.mark.timeout(60)
def test_library_has_no_undefined_nvml_symbols():
    if not shutil.which("nm"):
        pytest.skip("no nm (binutils) to list the library's undefined symbols")
    lib = _lib.library_path()
    out = subprocess.run(["nm", "-D", "--undefined-only", lib], capture_output=True, text=True, timeout=60, check=True)
    undefined = out.stdout.split()
    assert undefined, f"nm listed no undefined symbols of {lib}"
    assert not [s for s in undefined if s.lower().startswith("nvml")], "libgodist.so must not bind NVML"
