"""What godist tells people: the ``godist`` logger with Go's messages in it
(one INFO line per group, DEBUG traces per op, warnings once about choices
that cost performance), and the state dump for debugging hangs, on demand
and on a signal while a rank is stuck in a collective."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append((record.levelno, record.getMessage()))


def _capture():
    h = _Records()
    logging.getLogger("godist").addHandler(h)
    return h


def info_worker(rank, n, init_file):
    from godist import _log

    import godist

    h = _capture()
    init(rank, n, init_file, gloo_group=False)
    t = torch.ones(3)
    dist.all_reduce(t)
    sub = dist.new_group(list(range(n)), backend="godist")
    dist.all_reduce(t, group=sub)
    dist.barrier()
    algorithms = godist.topology()["algorithms"]
    _log.flush()
    dist.destroy_process_group()
    return h.records, len(os.sched_getaffinity(0)), algorithms


@pytest.mark.parametrize("n", [2, 3])
def test_info_line_per_group(n):
    """At INFO, each group logs one line when it connects: its ranks, hosts,
    how peers are reached, the algorithms its collectives take (as
    godist.topology() names them) and how long the rendezvous took; every
    message names the rank. DEBUG traces stay off."""
    results = run_world(info_worker, n, env={"GODIST_LOG_LEVEL": "INFO"}, timeout=120)
    one_shot = {2: "64 KiB", 3: "28.4 KiB"}[n]
    for rank, (recs, cpus, algorithms) in enumerate(results):
        assert algorithms.startswith(f"all_reduce: one-shot up to {one_shot}, two-shot above; broadcast: "), algorithms
        # The world's line, and its new_group's (split from it).
        lines = [m for lvl, m in recs if lvl == logging.INFO and "rendezvous" in m]
        assert len(lines) == 2 and "no rendezvous" in lines[1], recs
        for m in lines:
            assert m.startswith(f"[rank {rank}] godist: group "), m
            assert f"rank {rank} of {n}: {n} ranks on 1 host" in m, m
            assert "collectives over shm" in m and f"; {algorithms}; " in m, m
        assert '; split from group "0" in ' in lines[1], lines
        assert not [m for lvl, m in recs if lvl == logging.DEBUG], recs
        oversub = [m for lvl, m in recs if lvl == logging.WARNING and "CPUs" in m]
        assert len(oversub) == (1 if n > cpus else 0), recs


def debug_tcp_worker(rank, n, init_file):
    from godist import _log

    h = _capture()
    init(rank, n, init_file, gloo_group=False)
    t = torch.ones(3)
    for _ in range(2):
        dist.all_reduce(t)
    dist.broadcast(t, 0)
    _log.flush()
    dist.destroy_process_group()
    return h.records


def test_debug_traces_and_tcp_note():
    """At DEBUG every collective logs its start and end with its sequence
    number; forcing TCP between ranks of one host is said once at INFO (not
    warned about: it was asked for), and the INFO line names the
    algorithms."""
    results = run_world(debug_tcp_worker, 2, env={"GODIST_LOG_LEVEL": "DEBUG", "GODIST_TRANSPORT": "tcp"},
                        timeout=120)
    for rank, recs in enumerate(results):
        msgs = [m for _, m in recs]
        for seq, op in ((1, "allreduce"), (2, "allreduce"), (3, "broadcast")):
            assert any(f"{op} seq {seq} started" in m for m in msgs), msgs
            assert any(f"{op} seq {seq} done in" in m for m in msgs), msgs
        # Asked for: said once at INFO, not warned about.
        said = [(lvl, m) for lvl, m in recs if "talk over TCP" in m]
        assert len(said) == 1 and said[0][0] == logging.INFO and "GODIST_TRANSPORT=tcp" in said[0][1], recs
        info = [m for lvl, m in recs if lvl == logging.INFO and "rendezvous" in m]
        assert len(info) == 1 and "peers " in info[0] and "over tcp" in info[0] and "recursive doubling" in info[0], info


def test_levels_from_environment():
    from godist import _log

    cases = [
        ({"GODIST_LOG_LEVEL": "debug"}, logging.DEBUG),
        ({"GODIST_LOG_LEVEL": "OFF", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, 100),
        ({"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, logging.DEBUG),
        ({"TORCH_DISTRIBUTED_DEBUG": "INFO"}, logging.INFO),
        ({"TORCH_DISTRIBUTED_DEBUG": "OFF", "TORCH_CPP_LOG_LEVEL": "ERROR"}, logging.ERROR),
        ({}, logging.WARNING),
    ]
    for env, want in cases:
        assert _log.level_from_env(env)[0] == want, env
    with pytest.raises(ValueError, match="GODIST_LOG_LEVEL='loud'"):
        _log.level_from_env({"GODIST_LOG_LEVEL": "loud"})


def test_default_prints_to_stderr_at_its_level(tmp_path):
    """With logging unconfigured, godist prints its records to stderr
    itself, at its level: nothing at INFO by default; GODIST_LOG_LEVEL=INFO
    adds each rank's group line and its TCP note. (Warnings reach stderr the
    same way: test_unusable_shm_falls_back_to_tcp_and_says_why.)"""
    script = textwrap.dedent("""
        import os, sys, tempfile, torch, torch.distributed as dist, torch.multiprocessing as mp
        import godist

        def run(rank, path):
            dist.init_process_group("godist", init_method="file://" + path, rank=rank, world_size=2)
            t = torch.ones(2)
            dist.all_reduce(t)
            assert t.tolist() == [2.0, 2.0]
            dist.destroy_process_group()

        if __name__ == "__main__":
            mp.spawn(run, args=(tempfile.mktemp(),), nprocs=2)
    """)
    path = tmp_path / "warn.py"
    path.write_text(script)
    env = dict(os.environ, GODIST_TRANSPORT="tcp", PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("GODIST_LOG_LEVEL", None)
    out = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "godist" not in out.stderr, out.stderr
    env["GODIST_LOG_LEVEL"] = "INFO"
    out = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("rendezvous") == 2, out.stderr
    assert out.stderr.count("godist INFO [rank ") == 4 and out.stderr.count("talk over TCP") == 2, out.stderr


def dump_worker(rank, n, init_file):
    import datetime
    import threading

    import godist
    from godist import _log

    h = _capture()
    init(rank, n, init_file, gloo_group=False)
    t = torch.ones(3)
    dist.all_reduce(t)
    states = godist.dump_state()
    assert len(states) == 1 and states[0]["last_completed"]["op"] == "allreduce", states
    assert states[0]["last_completed"]["seq"] == 1 and states[0]["running"] is None, states
    store = dist.FileStore(init_file + ".dump", n)
    if rank == 1:
        store.set("pid", str(os.getpid()))
        found = threading.Event()

        class _Watch(logging.Handler):
            def emit(self, record):
                if "running: allreduce seq 2" in record.getMessage():
                    found.set()
                    store.set("dumped", "1")

        logging.getLogger("godist").addHandler(_Watch())
        # Stuck in a synchronous all_reduce until rank 0 has seen the dump
        # this rank logs on SIGUSR1.
        dist.all_reduce(t)
        assert found.is_set()
    else:
        store.wait(["pid"], datetime.timedelta(seconds=60))
        # Signal until rank 1's dump shows it inside the all_reduce (the
        # first signals may come before it gets there).
        import time
        deadline = time.monotonic() + 60
        while not store.check(["dumped"]):
            assert time.monotonic() < deadline, "rank 1 never dumped its state from inside the all_reduce"
            os.kill(int(store.get("pid")), signal.SIGUSR1)
            time.sleep(0.2)
        dist.all_reduce(t)
    _log.flush()
    dist.destroy_process_group()
    return [m for lvl, m in h.records if lvl == logging.WARNING]


def test_dump_state_on_demand_and_on_signal():
    results = run_world(dump_worker, 2, env={"GODIST_DUMP_ON_SIGNAL": "1"}, timeout=120)
    stuck = [m for m in results[1] if "running: allreduce seq 2 for" in m]
    assert stuck and "last completed: allreduce seq 1" in stuck[0] and "rank 1 of 2" in stuck[0], results[1]
    assert any("last completed: allreduce seq 1; running: none" in m for m in results[0]), results[0]


_RANK_SCRIPT = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    import godist

    rank, path = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("godist", init_method="file://" + path, rank=rank, world_size=2)
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [2.0, 2.0]
    assert not dist.group.WORLD._get_backend(torch.device("cpu")).shared_memory
    dist.destroy_process_group()
""")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare for a mount namespace")
def test_unusable_shm_falls_back_to_tcp_and_says_why(tmp_path):
    """With /dev/shm read-only (a container without shared memory), the
    group runs over TCP and each rank warns why, once."""
    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("GODIST_LOG_LEVEL", None)
    env.pop("GODIST_TRANSPORT", None)
    inner = (f"mount -t tmpfs -o ro,size=1m tmpfs /dev/shm && "
             f"{{ {sys.executable} {script} 0 {tmp_path}/store & a=$!; {sys.executable} {script} 1 {tmp_path}/store; "
             f"b=$?; wait $a && [ $b -eq 0 ]; }}")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --mount not permitted here: {probe.stderr.decode().strip()}")
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", inner], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("godist WARNING [rank ") == 4, out.stderr
    assert out.stderr.count("shared memory is not usable (") == 2, out.stderr
    assert out.stderr.count("talk over TCP (shared memory is not usable here") == 2, out.stderr


def test_invalid_level_raises_once_and_leaves_logging_working():
    """An invalid GODIST_LOG_LEVEL makes the library's first load raise a
    clear ValueError; logging is still set up (at WARNING) and Go's records
    still drained, so nothing is left half done."""
    script = textwrap.dedent("""
        import logging
        import godist
        from godist import _lib, _log
        try:
            _lib.load()
            print("no error")
        except ValueError as e:
            print("raised:", e)
        lib = _lib.load()
        print("level", logging.getLogger("godist").getEffectiveLevel(), "draining", _log._thread.is_alive())
    """)
    env = dict(os.environ, GODIST_LOG_LEVEL="loud", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "raised: godist: GODIST_LOG_LEVEL='loud': use DEBUG, INFO, WARNING, ERROR or OFF" in out.stdout, out.stdout
    assert f"level {logging.WARNING} draining True" in out.stdout, out.stdout
