"""torchft training through a kill and a pause, on godist and on torchft's
gloo group in the same run.

Four replica groups (one process each, workers/torchft_worker.py) train with
torchft's Manager and a Lighthouse. At step 10 replica 3 is SIGKILLed and
restarted; once it trains with the others again, replica 2 is SIGSTOPped
for longer than the group's timeout and then resumed. The survivors keep
committing steps through both faults, the lost replicas heal, and at the end
every replica holds the same parameters. The recovery times are printed
(docs/RELIABILITY.md has a run's numbers).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

lighthouse_mod = pytest.importorskip("torchft._torchft", reason="torchft (torchft-nightly) is not installed")
import godist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "torchft_worker.py")
HEARTBEAT_MS = 500
PG_TIMEOUT_S = 2.0
STEPS = 400
REPLICAS = 4


def _rows(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _step(path) -> int:
    return max([r["step"] for r in _rows(path) if "step" in r] or [0])


def _first_commit_after(paths, t, participants=None) -> float | None:
    """Seconds from t to the first step committed after t on every one of
    paths (with that many participants, if given)."""
    worst = 0.0
    for p in paths:
        times = [r["t"] for r in _rows(p) if "t" in r and r["t"] > t and r["committed"]
                 and (participants is None or r["participants"] == participants)]
        if not times:
            return None
        worst = max(worst, times[0] - t)
    return worst


def _wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def _scenario(backend: str, tmp) -> dict:
    lh = lighthouse_mod.LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=100, quorum_tick_ms=20,
                                         heartbeat_timeout_ms=HEARTBEAT_MS)
    addr = lh.address()
    logs = [os.path.join(tmp, f"{backend}_{i}.jsonl") for i in range(REPLICAS)]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               RUST_LOG="error", OMP_NUM_THREADS="1")

    def start(i):
        return subprocess.Popen([sys.executable, WORKER, addr, str(i), backend, str(STEPS), logs[i], str(PG_TIMEOUT_S)],
                                env=env, stdout=subprocess.DEVNULL, stderr=open(logs[i] + ".err", "a"))

    procs = [start(i) for i in range(REPLICAS)]
    out = {}
    try:
        _wait(lambda: min(_step(p) for p in logs) >= 10, 120, "every replica at step 10")
        # A replica killed: the others go on after the lighthouse's heartbeat
        # timeout; the replica restarts and heals.
        t_kill = time.time()
        procs[3].send_signal(signal.SIGKILL)
        procs[3].wait()
        procs[3] = start(3)
        t_restart = time.time()
        rest = REPLICAS - 1
        _wait(lambda: _first_commit_after(logs[:3], t_kill, rest) is not None, 60, "a step after the kill")
        out["kill"] = _first_commit_after(logs[:3], t_kill, rest)
        _wait(lambda: _first_commit_after(logs, t_restart, REPLICAS) is not None, 120, "the restarted replica")
        out["rejoin"] = _first_commit_after(logs, t_restart, REPLICAS)
        # A replica paused past the group's timeout: the others go on after
        # the timeout; resumed, its pending step fails and it heals.
        t_stop = time.time()
        procs[2].send_signal(signal.SIGSTOP)
        others = [logs[0], logs[1], logs[3]]
        _wait(lambda: _first_commit_after(others, t_stop, rest) is not None, 60, "a step after the pause")
        out["stop"] = _first_commit_after(others, t_stop, rest)
        time.sleep(0.5)
        t_cont = time.time()
        procs[2].send_signal(signal.SIGCONT)
        _wait(lambda: _first_commit_after(logs, t_cont, REPLICAS) is not None, 120, "the resumed replica")
        out["resume"] = _first_commit_after(logs, t_cont, REPLICAS)
        for p in procs:
            p.wait(timeout=180)
        finals = [next((r for r in _rows(p) if "final" in r), None) for p in logs]
        out["finals"] = finals
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
        lh.shutdown()
    return out


@pytest.mark.timeout(600)
@pytest.mark.skipif(not godist._HAS_BACKEND, reason="torchft's reconfigurable groups need torch 2.14+")
def test_torchft_trains_through_a_kill_and_a_pause(tmp_path):
    res = {b: _scenario(b, str(tmp_path)) for b in ("godist", "gloo")}
    print(json.dumps({b: {k: v for k, v in r.items() if k != "finals"} for b, r in res.items()}))
    for backend, out in res.items():
        finals = out["finals"]
        assert all(f is not None for f in finals), (backend, finals)
        assert all(f["final"] == STEPS for f in finals), (backend, [f["final"] for f in finals])
        assert all(f["params"] == finals[0]["params"] for f in finals), backend
    g = res["godist"]
    assert g["kill"] < HEARTBEAT_MS / 1000 + 0.3 + 0.7, g  # the target plus a loaded 2-core machine's slack
    assert g["stop"] < PG_TIMEOUT_S + 0.3 + 0.7, g
