"""Runs a function on N real processes and collects every rank's result.

``run_world(fn, n, *args)`` starts n processes, calls
``fn(rank, n, init_file, *args)`` in each, and returns the list of return
values by rank. The processes are forked from a server that has imported
torch once (start method "forkserver"; godist itself, with its Go runtime,
is imported only after the fork), so a rank starts in milliseconds instead
of the seconds an import of torch takes; each gets the caller's environment
as a spawned process would. A world whose environment differs from the
server's in a variable read when a library loads (torch's ``TORCH_``, Go's
``GODIST_NCCL_LIBRARY``, the MPI launcher's, ...) is spawned. Any exception
on any rank fails the call with every rank's traceback; a rank that does not
finish within ``timeout`` seconds is killed and fails it too, so a hang never
outlives its test.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import tempfile
import time
import traceback

_spawn = mp.get_context("spawn")
_fork = mp.get_context("forkserver")
_fork.set_forkserver_preload(["torch", "torch.distributed"])
_server_env: dict | None = None

# Variables read when a library loads (torch's at import, Go's from the
# environment the process was started with: a forked rank has the server's)
# are the server's in its ranks; those godist's Python reads are not.
_AT_LOAD = ("GODIST_", "TORCH_", "GO", "OMPI_", "PMI", "MPI", "HYDRA_", "NCCL_", "CUDA", "LD_")
_READ_BY_PYTHON = {"GODIST_TRANSPORT", "GODIST_LOG_LEVEL", "GODIST_NATIVE_OPS", "GODIST_SOCKET_IFNAME",
                   "GODIST_BIND_ADDR", "GODIST_SECRET", "GODIST_CUDA", "GODIST_DUMP_ON_SIGNAL"}


def _at_load(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(_AT_LOAD) and k not in _READ_BY_PYTHON}


def _context(env: dict):
    """The forkserver when the variables read at load in env are as they
    were when it started, else spawn."""
    global _server_env
    want = _at_load(env)
    if _server_env is None:
        # The server starts with the environment of this process.
        if want != _at_load(os.environ):
            return _spawn
        _server_env = want
    return _fork if want == _server_env else _spawn


def _child(fn, rank, n, init_file, args, q, env):
    os.environ.clear()
    os.environ.update(env)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch

        torch.set_num_threads(1)
        result = fn(rank, n, init_file, *args)
        q.put((rank, "ok", result))
    except BaseException:  # noqa: BLE001 - report everything to the parent
        q.put((rank, "error", traceback.format_exc()))
    finally:
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass


class WorldError(AssertionError):
    pass


def run_world(fn, n: int, *args, timeout: float = 240, env: dict | None = None, expect_exit: dict | None = None):
    """Run fn on n ranks; return results by rank. ``expect_exit`` maps ranks
    that are expected to die (e.g. SIGKILL) to None so they are not waited for."""
    expect_exit = expect_exit or {}
    with tempfile.TemporaryDirectory() as d:
        init_file = os.path.join(d, "store")
        full = {**os.environ, **(env or {})}
        ctx = _context(full)
        q = ctx.Queue()
        procs = [ctx.Process(target=_child, args=(fn, r, n, init_file, args, q, full), daemon=True) for r in range(n)]
        for p in procs:
            p.start()
        results, errors = {}, {}
        deadline = time.monotonic() + timeout
        want = set(range(n)) - set(expect_exit)
        while want - set(results) - set(errors):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, status, value = q.get(timeout=min(left, 1.0))
            except queue.Empty:
                if all(not p.is_alive() for r, p in enumerate(procs) if r in want - set(results) - set(errors)):
                    # Give the queue a moment to flush, then stop waiting.
                    try:
                        rank, status, value = q.get(timeout=2)
                    except queue.Empty:
                        break
                else:
                    continue
            (results if status == "ok" else errors)[rank] = value
        missing = sorted(want - set(results) - set(errors))
        for p in procs:
            p.join(timeout=10 if not missing else 0.1)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        if errors or missing:
            parts = [f"--- rank {r} ---\n{tb}" for r, tb in sorted(errors.items())]
            if missing:
                codes = {r: procs[r].exitcode for r in missing}
                parts.append(f"ranks {missing} did not report within {timeout}s (exit codes {codes})")
            raise WorldError("\n".join(parts))
        return [results.get(r) for r in range(n)]


def init(rank, n, init_file, backend="godist", timeout_s: float = 60, gloo_group: bool = True):
    """Init the default group on `backend` through a FileStore; also return a
    gloo group over the same ranks (the oracle)."""
    import datetime

    import torch.distributed as dist

    import godist  # noqa: F401

    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return dist.new_group(backend="gloo") if gloo_group else None


def run_session(argv, cwd, env, timeout: float):
    """Run argv in its own session and return the CompletedProcess; on
    timeout kill the whole session (every rank it started) and fail the
    test with what it printed. Ranks a failed run left behind are killed
    too."""
    import signal
    import subprocess

    import pytest

    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(argv)} did not finish in {timeout}s\nstdout:\n{out}\nstderr:\n{err}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
