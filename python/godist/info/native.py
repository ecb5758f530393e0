"""The native libraries godist may load (NCCL, the CUDA runtime, MPI) and
the NVIDIA driver (NVML), each probed in a child process: this file run as a
script, ``python -I -S native.py --native KIND CANDIDATES``, so that a
library that crashes or hangs when loaded cannot take the report down, and
so that what the system loader finds is not confused with the copies torch
has already loaded into this process. It imports nothing but the standard
library at the top for that reason."""

from __future__ import annotations

import ctypes
import glob
import json
import os
import shutil
import subprocess
import sys
import time

NATIVE_TIMEOUT_S = 30
MPI_NOTE = ("godist loads this MPI's library ({} from the loader's search path, or GODIST_MPI_LIBRARY), then its "
            "shim for this MPI (godist/mpi/), when a process started by mpirun initialises with "
            "init_method=\"mpi://\" or makes a group with GODIST_TRANSPORT=mpi")
USED_FOR_CUDA = ("godist's NCCL path loads {} when a group first gets CUDA tensors (the copy torch has loaded, "
                 "else this one): gpus.nccl_path says what it found")


def _mapped(stem: str) -> str | None:
    """The file of a loaded library whose name starts with stem, from this
    process's memory map."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if os.path.basename(path).startswith(stem):
                    return path
    except OSError:
        pass
    return None


def _nccl_version(lib) -> str:
    v = ctypes.c_int()
    rc = lib.ncclGetVersion(ctypes.byref(v))
    if rc != 0:
        raise RuntimeError(f"ncclGetVersion returned {rc}")
    c = v.value  # NCCL_VERSION_CODE: X*10000+Y*100+Z from 2.9, X*1000+Y*100+Z before
    major, rest = (c // 10000, c % 10000) if c >= 10000 else (c // 1000, c % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _cudart_version(lib) -> str:
    v = ctypes.c_int()
    rc = lib.cudaRuntimeGetVersion(ctypes.byref(v))
    if rc != 0:
        raise RuntimeError(f"cudaRuntimeGetVersion returned {rc}")
    return f"{v.value // 1000}.{v.value % 1000 // 10}"


def _mpi_version(lib) -> str:
    buf, n = ctypes.create_string_buffer(8192), ctypes.c_int()  # >= MPI_MAX_LIBRARY_VERSION_STRING
    rc = lib.MPI_Get_library_version(buf, ctypes.byref(n))  # callable before MPI_Init (MPI-3)
    if rc != 0:
        raise RuntimeError(f"MPI_Get_library_version returned {rc}")
    text = buf.value.decode(errors="replace").strip()
    return text.splitlines()[0].strip() if text else "unknown"


def _nvml(lib) -> dict:
    """Driver version and GPUs through NVML, every call's status checked."""
    lib.nvmlErrorString.restype, lib.nvmlErrorString.argtypes = ctypes.c_char_p, [ctypes.c_int]

    def check(rc, call):
        if rc != 0:
            msg = lib.nvmlErrorString(rc)
            raise RuntimeError(f"{call} failed: {msg.decode(errors='replace') if msg else 'error'} ({rc})")

    class Memory(ctypes.Structure):  # nvmlMemory_t
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    check(lib.nvmlInit_v2(), "nvmlInit_v2")
    out = {"initialized": True, "driver_version": None, "cuda_driver_version": None, "devices": []}
    try:
        buf = ctypes.create_string_buffer(96)  # NVML_DEVICE_NAME_V2_BUFFER_SIZE; also fits the driver version
        if lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(len(buf))) == 0:
            out["driver_version"] = buf.value.decode(errors="replace")
        cv = ctypes.c_int()
        if lib.nvmlSystemGetCudaDriverVersion(ctypes.byref(cv)) == 0:
            out["cuda_driver_version"] = f"{cv.value // 1000}.{cv.value % 1000 // 10}"
        count = ctypes.c_uint()
        check(lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
        for i in range(count.value):
            dev = {"index": i, "name": None, "memory_total": None, "memory_free": None, "error": None}
            try:
                h = ctypes.c_void_p()
                check(lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(h)),
                      f"nvmlDeviceGetHandleByIndex_v2({i})")
                check(lib.nvmlDeviceGetName(h, buf, ctypes.c_uint(len(buf))), f"nvmlDeviceGetName({i})")
                dev["name"] = buf.value.decode(errors="replace")
                mem = Memory()
                check(lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)), f"nvmlDeviceGetMemoryInfo({i})")
                dev["memory_total"], dev["memory_free"] = mem.total, mem.free
            except RuntimeError as e:
                dev["error"] = str(e)
            out["devices"].append(dev)
    finally:
        lib.nvmlShutdown()
    return out


_QUERIES = {"nccl": _nccl_version, "cudart": _cudart_version, "mpi": _mpi_version, "nvml": _nvml}


def probe_native(kind: str, candidates: list[dict]) -> dict:
    """Load the first of candidates ({"where", "path"}; a path without a
    slash goes to the system loader) that loads, and ask it its version
    (NVML: the driver and GPUs). Runs in a child process (see _native)."""
    out = {"found": False, "path": None, "where": None, "version": None, "reason": None, "tried": []}
    for c in candidates:
        t = {"where": c["where"], "path": c["path"], "found": False, "error": None}
        out["tried"].append(t)
        if "/" in c["path"] and not os.path.exists(c["path"]):
            continue
        try:
            lib = ctypes.CDLL(c["path"])
        except OSError as e:
            if "/" in c["path"] or not str(e).startswith(c["path"] + ":"):  # not merely absent
                t["error"] = f"cannot load: {e}"
            continue
        t["found"] = True
        path = c["path"] if "/" in c["path"] else (_mapped(c["path"].split(".so")[0] + ".so") or c["path"])
        out.update(found=True, path=path, where=c["where"])
        try:
            res = _QUERIES[kind](lib)
            out.update(res) if isinstance(res, dict) else out.update(version=res)
        except RuntimeError as e:
            out["reason"] = str(e)
        except Exception as e:  # a missing symbol (AttributeError), an unexpected answer
            out["reason"] = f"{type(e).__name__}: {e}"
        return out
    errors = [f"{t['path']}: {t['error']}" for t in out["tried"] if t["error"]]
    wheres = ", ".join(dict.fromkeys(t["where"] for t in out["tried"]))
    out["reason"] = "; ".join(errors) if errors else f"not found (looked in: {wheres})"
    return out


def _native(specs: dict) -> dict:
    """Run probe_native for each kind of specs, each in its own child
    process, in parallel; a crash or hang is reported as the reason."""
    procs = {kind: subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), "--native", kind,
                                     json.dumps(cands)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for kind, cands in specs.items()}
    out, deadline = {}, time.monotonic() + NATIVE_TIMEOUT_S
    for kind, p in procs.items():
        fail = {"found": False, "path": None, "where": None, "version": None,
                "tried": [dict(c, found=False, error=None) for c in specs[kind]]}
        try:
            so, se = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            out[kind] = dict(fail, reason=f"the probe did not finish within {NATIVE_TIMEOUT_S} s")
            continue
        try:
            out[kind] = json.loads(so)
        except ValueError:
            how = f"was killed by signal {-p.returncode}" if p.returncode < 0 else f"exited with {p.returncode}"
            tail = se.decode(errors="replace").strip().splitlines()[-1:]
            out[kind] = dict(fail, reason=f"the probe {how}" + (f": {tail[0]}" if tail else ""))
    return out


def _nvidia_dirs() -> list[str]:
    """The nvidia/ package directories of torch's environment."""
    import importlib.util

    import torch

    dirs = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__))), "nvidia")]
    try:
        spec = importlib.util.find_spec("nvidia")
        dirs += list(spec.submodule_search_locations or []) if spec else []
    except (ImportError, ValueError):
        pass
    return list(dict.fromkeys(os.path.realpath(d) for d in dirs))


def loader_names() -> dict:
    """The names godist's NCCL and MPI paths give the dynamic loader, in the
    order they try them (godist_facts: backends/nccl/lib.go,
    backends/mpi/lib.go); empty lists when the library cannot be loaded."""
    from .. import _lib

    libs = None
    for _ in range(2):  # a ValueError the first time: loaded, but GODIST_LOG_LEVEL is invalid
        try:
            libs = _lib.facts()["libraries"]
            break
        except ValueError:
            continue
        except (ImportError, OSError, AttributeError):
            break
    if libs is None:
        return {"nccl": [], "cudart": [], "mpi": []}
    mpi = [n for impl in libs["mpi_impls"] for n in libs["mpi"].get(impl, [])]
    return {"nccl": libs["nccl"], "cudart": libs["cudart"], "mpi": list(dict.fromkeys(mpi))}


def _native_specs() -> dict:
    """Where each native library is looked for: torch's own pip packages,
    LD_LIBRARY_PATH, then the names godist's GPU and MPI paths give the
    loader (loader_names)."""
    ld = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    nv = _nvidia_dirs()
    pip, ldp, loader = "torch's environment (nvidia-{} package)", "LD_LIBRARY_PATH", "system loader"

    def in_dirs(where, dirs, pattern):
        out = []
        for d in dirs:
            found = sorted(glob.glob(os.path.join(d, pattern)))
            out += [{"where": where, "path": p} for p in found] or [{"where": where, "path": os.path.join(d, pattern)}]
        return out

    names = loader_names()
    mpirun = shutil.which("mpirun")
    mpi_dirs = [os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(mpirun))), "lib")] if mpirun else []
    return {
        "nccl": in_dirs(pip.format("nccl"), [os.path.join(d, "nccl", "lib") for d in nv], "libnccl.so.2")
        + in_dirs(ldp, ld, "libnccl.so.2") + [{"where": loader, "path": n} for n in names["nccl"]],
        "cudart": in_dirs(pip.format("cuda-runtime"), [os.path.join(d, "*", "lib") for d in nv], "libcudart.so.[0-9]*")
        + in_dirs(ldp, ld, "libcudart.so.[0-9]*") + [{"where": loader, "path": n} for n in names["cudart"]],
        "mpi": in_dirs("mpirun's installation", mpi_dirs, "libmpi.so*") + in_dirs(ldp, ld, "libmpi.so*")
        + [{"where": loader, "path": n} for n in names["mpi"]],
        "nvml": [{"where": loader, "path": "libnvidia-ml.so.1"}],
    }


def _mpirun() -> dict | None:
    path = shutil.which("mpirun")
    if not path:
        return None
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        lines = (r.stdout + r.stderr).strip().splitlines()
        return {"path": path, "version": lines[0].strip() if lines else None,
                "error": None if r.returncode == 0 else f"mpirun --version exited with {r.returncode}"}
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"path": path, "version": None, "error": f"mpirun --version: {e}"}


def _libraries() -> tuple[dict, dict]:
    """The native libraries' entries and the GPUs' entry of the report."""
    res = _native(_native_specs())
    nccl = dict(res["nccl"], loaded_by_torch=_mapped("libnccl.so"), used_by_godist=True,
                note=USED_FOR_CUDA.format("NCCL"))
    cudart = dict(res["cudart"], loaded_by_torch=_mapped("libcudart.so"), used_by_godist=True,
                  note=USED_FOR_CUDA.format("the CUDA runtime"))
    from .._mpi import shim_dir

    shims = sorted(f for f in os.listdir(shim_dir()) if f.endswith(".so")) if os.path.isdir(shim_dir()) else []
    sonames = ", ".join(loader_names()["mpi"]) or "its soname"
    mpi = dict(res["mpi"], mpirun=_mpirun(), used_by_godist=True, note=MPI_NOTE.format(sonames), shims=shims)
    nv = res["nvml"]
    gpus = {"driver": bool(nv.get("initialized")), "nvml_path": nv["path"], "driver_version": nv.get("driver_version"),
            "cuda_driver_version": nv.get("cuda_driver_version"), "devices": nv.get("devices", []),
            "reason": nv["reason"]}
    if not nv["found"]:
        gpus["reason"] = "no NVIDIA driver (libnvidia-ml.so.1 not found)"
    elif not gpus["driver"]:
        gpus["reason"] = f"the NVIDIA driver's {nv['path']} is unusable: {nv['reason']}"
    return {"nccl": nccl, "cuda_runtime": cudart, "mpi": mpi}, gpus


if __name__ == "__main__" and sys.argv[1:2] == ["--native"]:
    # The child of _native: python -I -S native.py --native KIND CANDIDATES
    sys.stdout.write(json.dumps(probe_native(sys.argv[2], json.loads(sys.argv[3]))))
    sys.stdout.flush()
