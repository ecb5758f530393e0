"""``godist info``: what godist sees on this host, for bug reports and setup.

:func:`collect` gathers the report as a dict (the ``--json`` output, keys
documented in docs/info.md) and :func:`render` writes it for people. The
native libraries (NCCL, the CUDA runtime, MPI, NVML) are probed each in a
child process (this file run as a script, with ``--native``), so that a
library that crashes or hangs when loaded cannot take the report down, and
so that what the system loader finds is not confused with the copies torch
has already loaded into this process. The GPUs' details (UUIDs, PCI bus ids,
compute capabilities, NVLink, the topology between GPUs) come from the
package's ``bin/godist-gpuinfo`` program: :func:`gpu_info`.
"""

from __future__ import annotations

import ctypes
import difflib
import glob
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time

SCHEMA = 1
NATIVE_TIMEOUT_S = 30
GPUINFO_TIMEOUT_S = 10
MPI_NOTE = ("godist loads this MPI's library (libmpi.so.40, libmpich.so.12 or libmpi.so.12 from the loader's search "
            "path, or GODIST_MPI_LIBRARY), then its shim for this MPI (godist/mpi/), when a process started by mpirun "
            "initialises with init_method=\"mpi://\" or makes a group with GODIST_TRANSPORT=mpi")
USED_FOR_CUDA = ("godist's NCCL path loads {} when a group first gets CUDA tensors (the copy torch has loaded, "
                 "else this one): gpus.nccl_path says what it found")

# The settings godist reads: name -> (default, what it does).
SETTINGS = {
    "GODIST_TRANSPORT": ("auto", "the transports of a group: auto (shared memory when every rank is on this host, "
                                 "TCP otherwise), tcp (TCP only) or mpi (MPI's messages and collectives, under "
                                 "mpirun)"),
    "GODIST_BIND_ADDR": ("", "the one address TCP listens on and publishes to the other ranks (an address of this "
                             "host); overrides GODIST_SOCKET_IFNAME; empty: see GODIST_SOCKET_IFNAME"),
    "GODIST_SOCKET_IFNAME": ("", "the interfaces whose addresses TCP listens on and publishes, as NCCL_SOCKET_IFNAME: "
                                 "eth0,ib (names or prefixes), =eth0 (exact names), ^docker,lo (all but these); "
                                 "empty: the interface of the route to the store's host (MASTER_ADDR), loopback "
                                 "only when that is a loopback address or localhost, all interfaces when there is "
                                 "none"),
    "GODIST_LOG_LEVEL": ("", "the level of the 'godist' logger: DEBUG, INFO, WARNING, ERROR or OFF; empty: from "
                             "TORCH_DISTRIBUTED_DEBUG or TORCH_CPP_LOG_LEVEL, else WARNING"),
    "GODIST_DUMP_ON_SIGNAL": ("", "1 (SIGUSR1) or a signal's name or number: on that signal every rank logs the "
                                  "state of its groups; empty: off"),
    "GODIST_SECRET": ("", "the job's secret: every rank's TCP listener and godist's TCPStore servers and clients "
                          "authenticate each connection with it (HMAC challenge-response; payloads are not "
                          "encrypted); torch's TCPStore cannot; empty: TCP accepts only this job's ranks"),
    "GODIST_STORE_RENDEZVOUS": ("1", "0: the rendezvous runs in Python even when the group's store is a godist store"),
    "GODIST_LIBRARY": ("", "the path of libgodist.so to load; empty: the one inside the package"),
    "GODIST_CUDA": ("auto", "how collectives run on CUDA tensors: auto (NCCL when it loads and sees a GPU, else "
                            "staged), nccl (through NCCL) or staged (copied through pinned host memory over godist's "
                            "CPU transports; no NCCL needed)"),
    "GODIST_CUDA_BLOCKING_WAIT": ("0", "1: a synchronous op on CUDA tensors (and wait() of an asynchronous one) waits "
                                       "on the CPU until the GPU has run it, so that a timeout raises from the op "
                                       "itself; 0: the CPU never waits, as in torch's nccl backend, and a failure "
                                       "found later raises from the group's next op"),
    "GODIST_NCCL_LIBRARY": ("", "the path of libnccl.so.2 to load; empty: the copy torch loaded, else the loader's "
                                "search path"),
    "GODIST_CUDART_LIBRARY": ("", "the path of the CUDA runtime (libcudart.so) to load; empty: the copy torch "
                                  "loaded, else the loader's search path"),
    "GODIST_MPI": ("", "the MPI implementation whose shim godist loads (openmpi or mpich); empty: the launcher's "
                       "(OMPI_COMM_WORLD_* for Open MPI, PMI_* or MPI_LOCALNRANKS for MPICH), else the first shim "
                       "installed"),
    "GODIST_MPI_SHIM": ("", "the path of the MPI shim to load instead of the package's libgodist_mpi_<impl>.so"),
    "GODIST_MPI_LIBRARY": ("", "the path of the MPI library to load before the shim; empty: the implementation's "
                               "soname (libmpi.so.40 for Open MPI; libmpich.so.12, else libmpi.so.12 for MPICH) on "
                               "the loader's search path"),
    "GODIST_MPI_STORE_ADDR": ("", "init_method=\"mpi://\": the address the other ranks reach rank 0's store at; "
                                  "empty: MASTER_ADDR, else 127.0.0.1 when every rank is on this host, else this "
                                  "host's name resolved"),
}
# Read only by godist's own tests and benchmarks: recognized, never warned about.
TEST_SETTINGS = {
    "GODIST_TEST_VENV": "go test ./backends/nccl/: the virtual environment whose nvidia wheels the tests load",
    "GODIST_FAULT_SEED": "python/tests/test_fault_matrix.py: replay the SIGKILL case of this seed only",
    "GODIST_BENCH_GLOO_NO_RS": "python -m godist.bench: behave as if gloo lacked reduce_scatter_tensor",
    "GODIST_BENCH_MPI_FILESTORE": "python -m godist.bench --mpi: where init_method mpi:// is not registered, make "
                                  "the default group from the launcher's rank variables with a FileStore at this path",
    "GODIST_TEST_PYTHON": "Go tests: the Python that runs torch's stores against godist's",
    "GODIST_STORE_LOAD": "store load test (python/tests/test_store_interop.py): clients x ops",
    "GODIST_STORE_LOAD_ROUNDS": "store load test: rounds",
    "GODIST_STORE_LOAD_REPORT": "store load test: where to write its report",
    "GODIST_MPI_TEST_DIR": "go test ./backends/mpi/: the directory of the MPI shims",
    "GODIST_MPI_TEST_IMPL": "go test ./backends/mpi/: the implementation the shim choice must pick",
    **{f"GODIST_SHM_{k}": "Go tests and benchmarks of the shared-memory backend" for k in (
        "BENCH", "BENCH_SIZES", "BENCH_RANKS", "CHILD", "NAME", "RANK", "SIZE", "OUT", "CRASH_RANK", "CHUNK",
        "ONESHOT", "DIRECT", "CPUPROFILE")},
}

# Read only when godist is built (setup.py, docs/install.md): recognized,
# never warned about.
BUILD_SETTINGS = {
    "GODIST_WHEEL_GLIBC": "pip wheel . / pip install . / make wheel: the glibc the native files are built for with "
                          "zig cc (2.28: torch's manylinux_2_28), or native for the system's C compiler",
}


# ----- native libraries, probed in a child process -----

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


def _native_specs() -> dict:
    """Where each native library is looked for, in the order a GPU or MPI
    path would: torch's own pip packages, LD_LIBRARY_PATH, the loader."""
    import torch

    ld = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    nv = _nvidia_dirs()
    pip, ldp, loader = "torch's environment (nvidia-{} package)", "LD_LIBRARY_PATH", "system loader"

    def in_dirs(where, dirs, pattern):
        out = []
        for d in dirs:
            found = sorted(glob.glob(os.path.join(d, pattern)))
            out += [{"where": where, "path": p} for p in found] or [{"where": where, "path": os.path.join(d, pattern)}]
        return out

    major = (torch.version.cuda or "").split(".")[0]
    cudart = [f"libcudart.so.{v}" for v in dict.fromkeys([major, "13", "12", "11.0"]) if v] + ["libcudart.so"]
    mpirun = shutil.which("mpirun")
    mpi_dirs = [os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(mpirun))), "lib")] if mpirun else []
    return {
        "nccl": in_dirs(pip.format("nccl"), [os.path.join(d, "nccl", "lib") for d in nv], "libnccl.so.2")
        + in_dirs(ldp, ld, "libnccl.so.2") + [{"where": loader, "path": "libnccl.so.2"}],
        "cudart": in_dirs(pip.format("cuda-runtime"), [os.path.join(d, "*", "lib") for d in nv], "libcudart.so.[0-9]*")
        + in_dirs(ldp, ld, "libcudart.so.[0-9]*") + [{"where": loader, "path": n} for n in cudart],
        "mpi": in_dirs("mpirun's installation", mpi_dirs, "libmpi.so*") + in_dirs(ldp, ld, "libmpi.so*")
        + [{"where": loader, "path": n} for n in ("libmpi.so.40", "libmpi.so.12", "libmpi.so")],
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
    from ._mpi import shim_dir

    shims = sorted(f for f in os.listdir(shim_dir()) if f.endswith(".so")) if os.path.isdir(shim_dir()) else []
    mpi = dict(res["mpi"], mpirun=_mpirun(), used_by_godist=True, note=MPI_NOTE, shims=shims)
    nv = res["nvml"]
    gpus = {"driver": bool(nv.get("initialized")), "nvml_path": nv["path"], "driver_version": nv.get("driver_version"),
            "cuda_driver_version": nv.get("cuda_driver_version"), "devices": nv.get("devices", []),
            "reason": nv["reason"]}
    if not nv["found"]:
        gpus["reason"] = "no NVIDIA driver (libnvidia-ml.so.1 not found)"
    elif not gpus["driver"]:
        gpus["reason"] = f"the NVIDIA driver's {nv['path']} is unusable: {nv['reason']}"
    return {"nccl": nccl, "cuda_runtime": cudart, "mpi": mpi}, gpus


# ----- the GPUs, from godist-gpuinfo -----

def gpuinfo_path() -> str:
    """Where the package's godist-gpuinfo program is (it may be missing)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "godist-gpuinfo")


def gpu_info(timeout: float = GPUINFO_TIMEOUT_S, executable: str | None = None) -> dict:
    """This machine's NVIDIA GPUs as godist-gpuinfo reports them (keys:
    ``gpus.gpuinfo`` in docs/info.md), plus ``executable``, its path. Never
    raises: when the program is missing, fails or hangs, or there is no
    driver, ``available`` is False and ``reason`` says why."""
    exe = executable or gpuinfo_path()
    out = {"available": False, "reason": None, "library": "libnvidia-ml.so.1", "driver_version": None,
           "cuda_driver_version": None, "nvml_version": None, "device_count": None, "devices": [], "topology": [],
           "errors": {}, "executable": exe}
    if not os.path.exists(exe):
        return dict(out, reason=f"godist-gpuinfo is not in the package ({exe}): rebuild it with `make lib` or "
                                "reinstall godist")
    try:
        p = subprocess.run([exe], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return dict(out, reason=f"godist-gpuinfo did not finish within {timeout:g} s")
    except OSError as e:
        return dict(out, reason=f"cannot run godist-gpuinfo: {e}")
    try:
        answer = json.loads(p.stdout) if p.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "available" not in answer:
        how = f"was killed by signal {-p.returncode}" if p.returncode < 0 else f"exited with {p.returncode}"
        if p.returncode == 0:
            how = "printed no JSON report"
        tail = p.stderr.strip().splitlines()[-1:]
        return dict(out, reason=f"godist-gpuinfo {how}" + (f": {tail[0]}" if tail else ""))
    return dict(out, **answer, executable=exe)


# ----- godist's library, transports, settings, CPUs -----

def _json_call(fn, *args) -> dict:
    """The JSON object a function of capi/info.go writes; its empty strings
    become None."""
    from . import _lib

    return {k: None if v == "" else v for k, v in json.loads(_lib.read_bytes(fn, *args)).items()}


def _library() -> tuple[dict, object]:
    from . import _lib

    out = {"path": _lib.library_path(), "loaded": False, "error": None, "abi_version": None,
           "abi_expected": _lib.ABI_VERSION, "build": None}
    try:
        try:
            lib = _lib.load()
        except ValueError:
            # The library loaded and logging is set up at WARNING, but
            # GODIST_LOG_LEVEL is invalid (the settings section reports it).
            lib = _lib.load()
        out["build"] = _json_call(lib.build_info)
    except (ImportError, OSError, AttributeError) as e:
        out["error"] = f"{type(e).__name__}: {e}" if isinstance(e, AttributeError) else str(e)
        if isinstance(e, AttributeError):
            out["error"] += " (the library is older than this package: rebuild it with `make lib`)"
        return out, None
    out.update(loaded=True, abi_version=lib.abi_version())
    return out, lib


def _nccl_path(lib) -> dict:
    """What godist's NCCL path loads here and where CUDA tensors go
    (godist._nccl.nccl_info, plus ``cuda_tensors``)."""
    from ._group import cuda_mode

    if lib is None:
        info = {"available": False, "reason": "the godist library cannot be loaded", "devices": 0}
    else:
        try:
            info = _json_call(lib.nccl_info)
        except Exception as e:  # noqa: BLE001 - reported, never raised
            info = {"available": False, "reason": f"godist_nccl_info failed: {e}", "devices": 0}
    try:
        mode = cuda_mode()
    except ValueError:
        mode = None
    usable = info.get("available") and info.get("devices", 0) > 0
    info["cuda_tensors"] = {"auto": "nccl" if usable else "staged", "nccl": "nccl", "staged": "staged"}.get(mode)
    return info


def _transport_setting() -> str:
    return os.environ.get("GODIST_TRANSPORT", "auto").strip().lower() or "auto"


def _shm_space(d: str) -> dict:
    try:
        st = os.statvfs(d)
        return {"free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}
    except OSError:
        return {"free_bytes": None, "total_bytes": None}


def shm_report(lib, directory: str | None = None) -> dict:
    """Whether a group created here could use shared memory in directory
    (None: the default, /dev/shm), with the shared-memory backend's own
    probe, and the directory's space."""
    p = _json_call(lib.probe_shm, directory.encode() if directory else None)
    tr = _transport_setting()
    p.update(_shm_space(p["dir"]), enabled=tr == "auto")
    p["note"] = (f"GODIST_TRANSPORT={tr}: groups do not use shared memory" if tr in ("tcp", "mpi") else
                 "used when every rank of a group is on this host and sees the same directory")
    return p


def _transports(lib) -> dict:
    bind = os.environ.get("GODIST_BIND_ADDR", "")
    ifname = os.environ.get("GODIST_SOCKET_IFNAME", "")
    master = os.environ.get("MASTER_ADDR", "")
    if lib is None:
        return {"selected": _transport_setting(), "shm": None, "tcp": None}
    tcp = _json_call(lib.probe_tcp, bind.encode() or None, ifname.encode() or None, master.encode() or None)
    if not tcp["usable"]:
        tcp["note"] = "groups cannot be created until this is fixed"
    elif tcp["listen"] is None:
        tcp["note"] = "ranks on one host connect over loopback; ranks on other hosts dial the addresses above"
    elif tcp["choice"] == "loopback":
        tcp["note"] = ("every rank of a group whose store is on this host's loopback runs here and connects over "
                       "loopback; no other host can reach these ports")
    else:
        tcp["note"] = ("every rank, on this host or another, dials the addresses above" +
                       ("" if master or bind or ifname else
                        "; a group's store on another host (MASTER_ADDR) would choose the interface of the route "
                        "to it"))
    return {"selected": _transport_setting(), "shm": shm_report(lib), "tcp": tcp}


def _effect(name: str, v: str) -> tuple[str, str | None]:
    """What value v of setting name does, and a problem with it if any."""
    u = v.strip().upper()
    if name == "GODIST_TRANSPORT":
        return {"AUTO": ("shared memory between the ranks of a group on this host, TCP otherwise", None),
                "": ("shared memory between the ranks of a group on this host, TCP otherwise", None),
                "TCP": ("TCP only, also between ranks on this host", None),
                "MPI": ("MPI's point-to-point messages and collectives (the process must be started by mpirun)",
                        None)}.get(
            u, ("invalid: creating a group raises ValueError", "use auto, tcp or mpi"))
    if name == "GODIST_BIND_ADDR":
        return (f"TCP listens on {v}" if v else "GODIST_SOCKET_IFNAME or the route to the store's host choose "
                "TCP's addresses"), None
    if name == "GODIST_SOCKET_IFNAME":
        if os.environ.get("GODIST_BIND_ADDR", "").strip():
            return "overridden by GODIST_BIND_ADDR", None
        if not v.strip():
            return ("TCP uses the interface of the route to the store's host (MASTER_ADDR); loopback only when "
                    "that host is a loopback address or localhost (a single-host job); all interfaces when there "
                    "is no store host (a FileStore)"), None
        return _ifname_effect(v), None
    if name == "GODIST_LOG_LEVEL":
        import logging

        from . import _log

        try:
            level, src = _log.level_from_env(os.environ)
        except ValueError:
            return "invalid: godist's first use raises ValueError", "use DEBUG, INFO, WARNING, ERROR or OFF"
        return f"the godist logger logs at {logging.getLevelName(level)}" + (f" (from {src})" if src else ""), None
    if name == "GODIST_DUMP_ON_SIGNAL":
        import signal

        if not u or u in ("0", "FALSE", "NO", "OFF"):
            return "off", None
        s = "SIGUSR1" if u in ("1", "TRUE", "YES", "ON") else u
        try:
            signo = int(s) if s.isdigit() else int(getattr(signal, s if s.startswith("SIG") else "SIG" + s))
        except (AttributeError, ValueError):
            return "invalid: creating a group raises ValueError", "use 1 (SIGUSR1) or a signal's name or number"
        try:
            sig = f"{signo} ({signal.Signals(signo).name})"
        except ValueError:
            sig = str(signo)
        return f"each rank logs the state of its groups on signal {sig}", None
    if name == "GODIST_SECRET":
        return ("TCP connections between ranks and to godist's TCPStore servers must authenticate with it" if v else
                "no secret: TCP accepts only connections presenting this job's session token and a rank of the "
                "group; godist's TCPStore serves anyone (torch's clients included)"), None
    if name == "GODIST_STORE_RENDEZVOUS":
        return ("the rendezvous runs in Python" if v == "0" else
                "the rendezvous runs in Go when the group's store is a godist store"), None
    if name == "GODIST_CUDA":
        return {"AUTO": ("CUDA tensors go through NCCL where it loads and sees a GPU, else staged", None),
                "": ("CUDA tensors go through NCCL where it loads and sees a GPU, else staged", None),
                "NCCL": ("CUDA tensors go through NCCL", None),
                "STAGED": ("CUDA tensors are staged through pinned host memory over the CPU transports", None)}.get(
            u, ("invalid: a collective on CUDA tensors raises ValueError", "use auto, nccl or staged"))
    if name == "GODIST_LIBRARY":
        return (f"loads {v}" if v else "loads the package's libgodist.so"), (
            None if not v or os.path.exists(v) else f"{v} does not exist")
    return "", None


def _ifname_effect(v: str) -> str:
    """What GODIST_SOCKET_IFNAME=v selects, in words (the Go side,
    backends/tcp/ifsel.go, decides and reports errors)."""
    rest = v.strip()
    exclude = rest.startswith("^")
    rest = rest[1:] if exclude else rest
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    names = " or ".join(n.strip() for n in rest.split(",") if n.strip())
    which = f"named {names}" if exact else f"whose names start with {names}"
    if exclude:
        return f"TCP listens on and publishes the addresses of every interface but loopback and those {which}"
    return f"TCP listens on and publishes the addresses of the interfaces {which}"


def _settings() -> dict:
    env = {k: v for k, v in os.environ.items() if k.startswith("GODIST_")}
    known = []
    for name, (default, doc) in SETTINGS.items():
        value = env.get(name)
        effect, problem = _effect(name, value if value is not None else default)
        if name == "GODIST_SECRET" and value:
            value = "(set, not shown)"
        known.append({"name": name, "set": value is not None, "value": value, "default": default, "doc": doc,
                      "effect": effect, "problem": problem})
    gmp = os.environ.get("GOMAXPROCS")
    unknown = []
    for name in sorted(env):
        if name in SETTINGS:
            continue
        if name in TEST_SETTINGS:
            known.append({"name": name, "set": True, "value": env[name], "default": None, "doc": TEST_SETTINGS[name],
                          "effect": "read only by godist's tests and benchmarks", "problem": None})
            continue
        if name in BUILD_SETTINGS:
            known.append({"name": name, "set": True, "value": env[name], "default": None, "doc": BUILD_SETTINGS[name],
                          "effect": "read only when godist is built", "problem": None})
            continue
        close = difflib.get_close_matches(name[7:], [k[7:] for k in SETTINGS], n=1, cutoff=0.75)
        unknown.append({"name": name, "value": env[name], "did_you_mean": "GODIST_" + close[0] if close else None})
    return {"settings": known, "unknown": unknown, "gomaxprocs": gmp}


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _cgroup_cpus(proc: str = "/proc/self/cgroup", fs: str = "/sys/fs/cgroup") -> tuple[float | None, str | None]:
    """The CPU limit of this process's cgroup (v2 cpu.max or v1 CFS quota),
    the tightest along its path, and the file that set it."""
    best = (None, None)
    for line in (_read(proc) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or (parts[1] and "cpu" not in parts[1].split(",")):
            continue
        v2 = parts[1] == ""
        mounts = [fs, os.path.join(fs, "unified")] if v2 else [os.path.join(fs, parts[1]), os.path.join(fs, "cpu")]
        names = [p for p in parts[2].split("/") if p]
        for d in (os.path.join(m, *names[:i]) for m in mounts for i in range(len(names), -1, -1)):
            if v2:
                q, _, p = (_read(os.path.join(d, "cpu.max")) or "").strip().partition(" ")
                src = os.path.join(d, "cpu.max")
            else:
                q, p = ((_read(os.path.join(d, f)) or "").strip() for f in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
                src = os.path.join(d, "cpu.cfs_quota_us")
            if q.isdigit() and p.isdigit() and int(p) > 0 and (best[0] is None or int(q) / int(p) < best[0]):
                best = (int(q) / int(p), src)
    return best


def _cpus(build: dict | None) -> dict:
    count = os.cpu_count()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    limit, source = _cgroup_cpus()
    usable = min((x for x in (count, affinity, math.ceil(limit) if limit else None) if x), default=None)
    out = {"count": count, "affinity": affinity, "cgroup_limit": limit, "cgroup_file": source, "usable": usable,
           "go_num_cpu": build["num_cpu"] if build else None, "notes": []}
    go = out["go_num_cpu"] or affinity or count
    out["notes"].append(f"a group's ranks on this host spin briefly while waiting only while they number at most {go} "
                        f"(the CPUs godist counts); beyond that they share CPUs and yield or sleep instead")
    if limit is not None and limit < go:
        out["notes"].append(f"the cgroup allows {limit:g} CPUs, fewer than the {go} godist counts: its processes "
                            f"together get at most {limit:g} CPUs of time, spinning ranks included")
    return out


def collect() -> dict:
    """The whole report (``godist info --json``)."""
    import torch

    from . import __version__

    library, lib = _library()
    build = library["build"]
    libs, gpus = _libraries()
    gpus["gpuinfo"] = gpu_info()
    gpus["nccl_path"] = _nccl_path(lib)
    settings = _settings()
    report = {
        "schema": SCHEMA,
        "godist": {"version": __version__, "package": os.path.dirname(os.path.abspath(__file__)), "library": library},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "torch": {"version": torch.__version__, "cuda": torch.version.cuda, "path": os.path.dirname(torch.__file__)},
        "platform": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                     "libc": " ".join(platform.libc_ver()).strip() or None, "hostname": platform.node()},
        "cpus": _cpus(build),
        "transports": _transports(lib),
        **libs,
        "gpus": gpus,
        "env": settings,
        "warnings": [],
    }
    w = report["warnings"]
    if not library["loaded"]:
        w.append(f"the godist library cannot be loaded: {library['error']}")
    for s in settings["settings"]:
        if s["problem"]:
            w.append(f"{s['name']}={s['value']!r}: {s['problem']}")
    for u in settings["unknown"]:
        hint = f" (did you mean {u['did_you_mean']}?)" if u["did_you_mean"] else ""
        w.append(f"{u['name']}={u['value']!r}: unknown setting, ignored{hint}")
    t = report["transports"]
    if t["shm"] and t["shm"]["enabled"] and not t["shm"]["usable"]:
        w.append(f"shared memory is unusable, groups on this host will use TCP: {t['shm']['reason']}")
    if t["tcp"] and not t["tcp"]["usable"]:
        w.append(f"TCP cannot listen, no group can be created: {t['tcp']['reason']}")
    return report


# ----- text -----

def _size(n) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


def _lib_lines(name: str, e: dict) -> list[str]:
    if e["found"]:
        head = f"{name:<13}found: {e['path']}" + (f", version {e['version']}" if e.get("version") else "")
        lines = [head, f"{'':13}from {e['where']}"] + ([f"{'':13}{e['reason']}"] if e["reason"] else [])
    else:
        lines = [f"{name:<13}{e['reason']}"] + [f"{'':13}tried {t['path']} ({t['where']})" for t in e["tried"]]
    if e.get("loaded_by_torch"):
        same = e["loaded_by_torch"] == e["path"]
        lines.append(f"{'':13}torch has loaded " + ("this file" if same else e["loaded_by_torch"]))
    if e.get("mpirun"):
        m = e["mpirun"]
        lines.append(f"{'':13}mpirun: {m['path']}: {m['version'] or m['error']}")
    return lines


# nvidia-smi topo -m's names for the topology levels, and what they mean.
_LEVELS = {"X": "the same board", "PIX": "through one PCIe switch", "PXB": "through several PCIe switches",
           "PHB": "through a PCIe host bridge", "NODE": "through the host bridges of one NUMA node",
           "SYS": "across NUMA nodes"}


def _nccl_path_lines(n: dict) -> list[str]:
    """The GPU section's lines about godist's NCCL path."""
    if n["available"]:
        head = (f"  NCCL path: NCCL {n['version']} from {n['nccl_from']}, CUDA runtime {n['cuda_runtime_version']} "
                f"from {n['cudart_from']}, {n['devices']} CUDA device{'' if n['devices'] == 1 else 's'}")
        out = [head] + ([f"    {n['devices_error']}"] if n.get("devices_error") else [])
    else:
        out = [f"  NCCL path: unavailable: {n['reason']}"]
    where = {"nccl": "through NCCL", "staged": "through pinned host memory over godist's CPU transports (staged)"}
    out.append(f"  CUDA tensors go {where[n['cuda_tensors']]}" if n["cuda_tensors"] else
               "  CUDA tensors: GODIST_CUDA is invalid (see Settings)")
    return out


def _gpuinfo_lines(gi: dict) -> list[str]:
    """The GPU section's lines from godist-gpuinfo's report."""
    if not gi["available"]:
        return [f"  godist-gpuinfo: {gi['reason']}"]
    ver = [f"NVML {gi['nvml_version']}"] if gi["nvml_version"] else []
    ver += [f"driver {gi['driver_version']}"] if gi["driver_version"] else []
    ver += [f"CUDA {gi['cuda_driver_version']}"] if gi["cuda_driver_version"] else []
    n = gi["device_count"]
    out = [f"  godist-gpuinfo: " + ", ".join(ver + [f"{n} GPU{'' if n == 1 else 's'}" if n is not None else
                                                    "GPUs unknown"])]
    out += [f"    error: {e}" for e in gi["errors"].values()]
    if gi["reason"]:
        out.append(f"    {gi['reason']}")
    for d in gi["devices"]:
        parts = [d["name"] or "name unknown"] + ([d["uuid"]] if d["uuid"] else [])
        if d["pci_bus_id"]:
            parts.append(f"PCI {d['pci_bus_id']}")
        if d["compute_capability"]:
            parts.append(f"compute capability {d['compute_capability']}")
        if d["memory_total"] is not None:
            parts.append(f"{_size(d['memory_total'])} ({_size(d['memory_used'])} used)")
        nv = d["nvlink"]
        parts.append(f"NVLink: {nv['active']} of {nv['count']} links active" if nv["supported"] else "no NVLink")
        out.append(f"    GPU {d['index']}: " + ", ".join(parts))
        out += [f"      error: {e}" for e in d["errors"].values()]
        out += [f"      NVLink {x['link']}: error: {x['error']}" for x in nv["links"] if x["error"]]
    for t in gi["topology"]:
        a, b = t["gpus"]
        where = f"{t['smi']} ({_LEVELS.get(t['smi'], t['level'])})" if t["smi"] else (t["level"] or "level unknown")
        p2p = ", ".join(f"{k} {v}" for k, v in t["p2p"].items())
        out.append(f"    GPU {a} - GPU {b}: {where}" + (f", P2P {p2p}" if p2p else ""))
        out += [f"      error: {e}" for e in t["errors"].values()]
    return out


def render(r: dict) -> str:
    """The report for people."""
    g, lib = r["godist"], r["godist"]["library"]
    out = [f"godist {g['version']} ({g['package']})"]
    if lib["loaded"]:
        b = lib["build"]
        rev = f", commit {b['vcs_revision'][:12]}{' (modified)' if b['vcs_modified'] else ''}" \
            if b["vcs_revision"] else ""
        out.append(f"  library      {lib['path']} (ABI {lib['abi_version']})")
        out.append(f"  built with   {b['go_version']} {b['goos']}/{b['goarch']}{rev}")
        why = f"GOMAXPROCS={b['gomaxprocs_env']}" if b["gomaxprocs_env"] else \
            f"{b['num_cpu']} CPUs + {b['spare_procs']}"
        out.append(f"  GOMAXPROCS   {b['gomaxprocs']} ({why})")
    else:
        out.append(f"  library      {lib['path']}: cannot load: {lib['error']}")
    p, t = r["platform"], r["torch"]
    out.append(f"Python {r['python']['version']} ({r['python']['implementation']}, {r['python']['executable']})")
    out.append(f"torch {t['version']}" + (f" (built for CUDA {t['cuda']})" if t["cuda"] else " (CPU build)"))
    out.append(f"platform {p['system']} {p['release']} {p['machine']}" + (f", {p['libc']}" if p["libc"] else "")
               + f", host {p['hostname']}")

    c = r["cpus"]
    out += ["", "CPUs", f"  count        {c['count']}", f"  affinity     {c['affinity']} CPUs this process may run on",
            "  cgroup limit " + (f"{c['cgroup_limit']:g} CPUs ({c['cgroup_file']})" if c["cgroup_limit"] else "none")]
    out += [f"  note         {n}" for n in c["notes"]]

    tr = r["transports"]
    out += ["", f"Transports (GODIST_TRANSPORT={tr['selected']})"]
    if tr["shm"] is None:
        out.append("  unknown: the library is not loaded")
    else:
        s, k = tr["shm"], tr["tcp"]
        space = f"{_size(s['free_bytes'])} free of {_size(s['total_bytes'])}"
        out.append(f"  shared mem   {'usable' if s['usable'] else 'unusable'}: {s['dir']}, {space}"
                   + ("" if s["usable"] else f": {s['reason']}"))
        out.append(f"               {s['note']}")
        where = "on " + ", ".join(k["listen"]) if k["listen"] else "on all interfaces"
        addrs = ", ".join(f"{a} ({i})" if i else a for a, i in zip(k["addresses"], k["interfaces"]))
        out.append(f"  TCP          " + (f"usable: listens {where}; addresses {addrs}"
                                         if k["usable"] else f"unusable: {k['reason']}"))
        if k["why"]:
            out.append(f"               chosen as: {k['why']}")
        out.append(f"               {k['note']}")

    out += ["", "Libraries on this host"]
    out += ["  " + x for x in _lib_lines("NCCL", r["nccl"]) + _lib_lines("CUDA runtime", r["cuda_runtime"])
            + _lib_lines("MPI", r["mpi"])]
    m = r["mpi"]
    out.append("  godist's MPI shims: " + (", ".join(m["shims"]) if m["shims"] else
                                          "none built (no mpicc when the library was built)"))
    out.append("  NCCL and the CUDA runtime: used for CUDA tensors (see GPUs); MPI: under mpirun (mpi://, "
               "GODIST_TRANSPORT=mpi)")

    gp = r["gpus"]
    out += ["", "GPUs"]
    if not gp["driver"]:
        out.append(f"  {gp['reason']}")
    else:
        out.append(f"  NVIDIA driver {gp['driver_version'] or 'unknown'}"
                   + (f" (CUDA {gp['cuda_driver_version']})" if gp["cuda_driver_version"] else "")
                   + f", {gp['nvml_path']}")
        if gp["reason"]:
            out.append(f"  {gp['reason']}")
        for d in gp["devices"]:
            out.append(f"  GPU {d['index']}: " + (f"error: {d['error']}" if d["error"] else
                                                  f"{d['name']}, {_size(d['memory_total'])} "
                                                  f"({_size(d['memory_free'])} free)"))
        if not gp["devices"] and not gp["reason"]:
            out.append("  no GPUs")
    out += _gpuinfo_lines(gp["gpuinfo"])
    out += _nccl_path_lines(gp["nccl_path"])

    env = r["env"]
    out += ["", "Settings"]
    for s in env["settings"]:
        default = f", default {s['default']}" if s["default"] else ""
        val = f"={s['value']}" if s["set"] else f" (not set{default})"
        out.append(f"  {s['name']}{val}: {s['effect']}" + (f" [{s['problem']}]" if s["problem"] else ""))
    out.append(f"  GOMAXPROCS" + (f"={env['gomaxprocs']}" if env["gomaxprocs"] else " (not set): NumCPU + 4"))
    if r["warnings"]:
        out += [""] + [f"warning: {w}" for w in r["warnings"]]
    return "\n".join(out) + "\n"


def main(argv: list[str], prog: str = "godist info") -> int:
    """``godist info [--json]``: 0, or 1 when the godist library cannot be loaded."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description="What godist sees on this host: its library, the "
                                 "transports this host can use, NCCL, CUDA, MPI, GPUs, settings and CPUs.")
    ap.add_argument("--json", action="store_true", help="print the report as JSON (keys: see docs/info.md)")
    args = ap.parse_args(argv)
    r = collect()
    sys.stdout.write(json.dumps(r, indent=2) + "\n" if args.json else render(r))
    return 0 if r["godist"]["library"]["loaded"] else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--native"]:
        # The child of _native: python -I -S info.py --native KIND CANDIDATES
        sys.stdout.write(json.dumps(probe_native(sys.argv[2], json.loads(sys.argv[3]))))
        sys.stdout.flush()
    else:
        sys.exit(main(sys.argv[1:], prog="python -m godist.info"))
