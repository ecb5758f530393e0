"""The ``GODIST_*`` settings: the table of every one godist reads, what the
value set here does, and the unknown ones (with the known name they are
close to)."""

from __future__ import annotations

import difflib
import os

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
    "GODIST_NATIVE_OPS": ("1", "0: torch.ops.godist.all_reduce_ stays on its Python kernel; otherwise its native "
                               "kernel (compiled with a C++ compiler on the op's first call, then cached) takes "
                               "contiguous CPU tensors on godist groups"),
    "GODIST_CACHE": ("", "where compiled kernels are cached (in native/ under it); empty: $XDG_CACHE_HOME/godist, "
                         "else ~/.cache/godist"),
}
# Read only by godist's own tests and benchmarks: recognized, never warned about.
TEST_SETTINGS = {
    "GODIST_TEST_VENV": "go test ./backends/nccl/: the virtual environment whose nvidia wheels the tests load",
    "GODIST_FAULT_SEED": "python/tests/test_fault_matrix.py: replay the SIGKILL case of this seed only",
    "GODIST_BENCH_GLOO_NO_RS": "python -m godist.bench: behave as if gloo lacked reduce_scatter_tensor",
    "GODIST_BENCH_NO_DEEPSPEED": "python -m godist.bench --vs deepspeed: behave as if deepspeed were not installed",
    "GODIST_BENCH_DS_WRONG": "python -m godist.bench --vs deepspeed: rank 0 adds 1 to what DeepSpeed's bare op "
                             "returns (the check must count it wrong)",
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


def _transport_names() -> list[str] | None:
    """The names GODIST_TRANSPORT accepts (godist_facts: assemble.TransportNames);
    None when the library does not load."""
    from .. import _lib

    for _ in range(2):  # a ValueError the first time: loaded, but GODIST_LOG_LEVEL is invalid
        try:
            return _lib.facts()["transports"]
        except ValueError:
            continue
        except (ImportError, OSError, AttributeError):
            return None
    return None


def _effect(name: str, v: str) -> tuple[str, str | None]:
    """What value v of setting name does, and a problem with it if any."""
    u = v.strip().upper()
    if name == "GODIST_TRANSPORT":
        names = _transport_names()
        if names is not None and u and u.lower() not in names:
            return "invalid: creating a group raises ValueError", f"use {', '.join(names[:-1])} or {names[-1]}"
        return {"AUTO": ("shared memory between the ranks of a group on this host, TCP otherwise", None),
                "": ("shared memory between the ranks of a group on this host, TCP otherwise", None),
                "TCP": ("TCP only, also between ranks on this host", None),
                "MPI": ("MPI's point-to-point messages and collectives (the process must be started by mpirun)",
                        None)}.get(u, ("unknown: the godist library, which knows the names, does not load", None))
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

        from .. import _log

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
    if name == "GODIST_NATIVE_OPS":
        if u in ("0", "FALSE", "OFF", "NO"):
            return "torch.ops.godist.all_reduce_ runs its Python kernel", None
        return "torch.ops.godist.all_reduce_ compiles and loads its native kernel on its first call", None
    if name == "GODIST_CACHE":
        from .. import _native

        return f"compiled kernels are cached in {_native.cache_root()}", None
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
