"""A matrix of faults in real processes: a rank killed (SIGKILL) or stopped
(SIGSTOP), a connection reset under a message, the store's server killed,
/dev/shm full or read-only, strangers at a rank's port.

Every rank that lives on must raise within its timeout plus a small bound
(or, where the fault must not matter, get the right values), never a
wrong value silently; after destroy_process_group it must hold no more
goroutines, handles, file descriptors, shared-memory files or mappings
than before the group (threads: a small slack), and a new group in the
same processes must work.

The ranks are forked from a server that imported torch once
(workers/fault_matrix_worker.py). Every choice comes from a seed, printed in every
assertion message; ``GODIST_FAULT_SEED=<seed>`` replays one (the SIGKILL
runs take it as the seed to run, the others as their base seed).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)

TIMEOUT_S = 5.0  # the groups' timeout
BOUND_S = 3.0  # what a failing op may take beyond it (progress query, farewells, a loaded machine)
THREAD_SLACK = 6  # Go keeps the threads it started; Python and torch start a few of their own
REPLAY = os.environ.get("GODIST_FAULT_SEED")
BASE_SEED = int(REPLAY) if REPLAY else 0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux (/proc, signals, ss)")


class Server:
    """The fork server: starts ranks, reports their ends."""

    def __init__(self, wrap=()):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([HERE, PYDIR] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.setdefault("OMP_NUM_THREADS", "1")
        argv = list(wrap) + [sys.executable, os.path.join(HERE, "workers", "fault_matrix_worker.py"), "serve"]
        self.err = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     text=True, env=env, start_new_session=True)
        self.cv = threading.Condition()
        self.replies, self.exits = {}, {}
        self.next_id = 0
        self.ready = None
        threading.Thread(target=self._read, daemon=True).start()
        with self.cv:
            started = self.cv.wait_for(lambda: self.ready is not None, timeout=120)
        if not started or self.ready is False:
            self.close()
            self.err.seek(0)
            raise RuntimeError(f"the fork server did not start: {self.err.read()}")

    def _read(self):
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self.cv:
                if "ready" in msg:
                    self.ready = msg["ready"]
                elif "exited" in msg:
                    self.exits[msg["exited"]] = msg["status"]
                else:
                    self.replies[msg.get("spawned", msg.get("sh"))] = msg
                self.cv.notify_all()
        with self.cv:
            if self.ready is None:
                self.ready = False
            self.cv.notify_all()

    def _ask(self, msg, key):
        with self.cv:
            i = self.next_id
            self.next_id += 1
        msg[key] = i
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        with self.cv:
            if not self.cv.wait_for(lambda: i in self.replies, timeout=60):
                raise RuntimeError("the fork server does not answer")
            return self.replies.pop(i)

    def spawn(self, cfg) -> int:
        return self._ask({"cfg": cfg}, "spawn")["pid"]

    def sh(self, argv):
        r = self._ask({"argv": argv}, "sh")
        return r["rc"], r["out"]

    def exit_status(self, pid):
        with self.cv:
            return self.exits.get(pid)

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        self.err.close()


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.close()


class Job:
    """The ranks of one test case, their events and results."""

    def __init__(self, server, tmp_path, scenario, n, seed, **cfg):
        self.server, self.dir, self.n, self.seed = server, str(tmp_path), n, seed
        self.cfg = dict(cfg, scenario=scenario, n=n, seed=seed, dir=self.dir, timeout=cfg.get("timeout", TIMEOUT_S))
        self.pids = {}
        self.started = time.monotonic()

    def start(self, rank, **extra):
        cfg = dict(self.cfg, rank=rank, events=self.path(f"ev{rank}"), result=self.path(f"result{rank}.json"),
                   log=self.path(f"log{rank}"))
        cfg.update(extra)
        self.pids[rank] = self.server.spawn(cfg)
        return self.pids[rank]

    def start_all(self, ranks=None, **extra):
        for r in (range(self.n) if ranks is None else ranks):
            self.start(r, **extra)

    def path(self, name):
        return os.path.join(self.dir, name)

    def events(self, rank):
        try:
            with open(self.path(f"ev{rank}")) as f:
                return [json.loads(line) for line in f if line.endswith("\n")]
        except FileNotFoundError:
            return []

    def wait_event(self, rank, ev, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events(rank):
                if e["ev"] == ev:
                    return e
            if rank in self.pids and self.server.exit_status(self.pids[rank]) is not None:
                break
            time.sleep(0.002)
        pytest.fail(f"seed {self.seed}: rank {rank} never reported {ev!r} (exit status "
                    f"{self.server.exit_status(self.pids.get(rank))})\n{self.logs()}")

    def log(self, rank):
        try:
            with open(self.path(f"log{rank}"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def logs(self):
        return "\n".join(f"--- rank {r} log ---\n{self.log(r)[-4000:]}" for r in sorted(self.pids, key=str))

    def results(self, ranks, timeout):
        """The results of ranks; a rank that does not finish in timeout
        fails the test (after every rank was killed)."""
        deadline = time.monotonic() + timeout
        out = {}
        while True:
            for r in ranks:
                if r not in out and os.path.exists(self.path(f"result{r}.json")):
                    with open(self.path(f"result{r}.json")) as f:
                        out[r] = json.load(f)
            if len(out) == len(ranks):
                break
            dead = [r for r in ranks if r not in out and self.server.exit_status(self.pids[r]) is not None]
            if dead and not any(os.path.exists(self.path(f"result{r}.json")) for r in dead):
                self.kill()
                pytest.fail(f"seed {self.seed}: rank(s) {dead} ended without a result "
                            f"(exit {[self.server.exit_status(self.pids[r]) for r in dead]})\n{self.logs()}")
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"seed {self.seed}: rank(s) {sorted(set(ranks) - set(out))} hang: no result in "
                            f"{timeout}s\n{self.logs()}")
            time.sleep(0.01)
        for r, res in out.items():
            assert "crash" not in res, f"seed {self.seed}: rank {r} crashed:\n{res['crash']}\n{self.logs()}"
        return out

    def wait_exit(self, rank, timeout=10):
        deadline = time.monotonic() + timeout
        while self.server.exit_status(self.pids[rank]) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.server.exit_status(self.pids[rank])

    def kill(self):
        for pid in self.pids.values():
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def finish(self):
        self.kill()
        for pid in self.pids.values():
            deadline = time.monotonic() + 10
            while self.server.exit_status(pid) is None and time.monotonic() < deadline:
                time.sleep(0.01)


@pytest.fixture
def job_of(server, tmp_path):
    jobs = []

    def make(scenario, n, seed, srv=None, **cfg):
        d = tmp_path / f"job{len(jobs)}"
        d.mkdir()
        j = Job(srv or server, d, scenario, n, seed, **cfg)
        jobs.append(j)
        return j

    yield make
    for j in jobs:
        j.finish()


def check_leaks(seed, rank, res):
    """The rank's resources after the fault's group was destroyed, against
    those before it was formed."""
    d = res["leaks"]["delta"]
    where = f"seed {seed}: rank {rank} leaks after destroy_process_group: {d}"
    assert d["goroutines"] == 0, where
    assert d["handles"] == 0, where
    assert d["shm"] == [] and d["maps"] == [], where
    assert d["fds"] <= 0, where
    assert d["threads"] <= THREAD_SLACK, where


def check_recovered(seed, rank, res):
    rec = res["recover"]
    assert rec is not None and rec["ok"], f"seed {seed}: rank {rank}: a new group after the fault failed: {rec}"


def leftover_shm(pids):
    """Probe files of the job's processes left in /dev/shm."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return sorted(f for f in names for p in pids if f.startswith(f"godist-probe-{p}-"))


# ---------------------------------------------------------------- 1. SIGKILL

KILL_SEEDS = [BASE_SEED] if REPLAY else list(range(20))
KILL_OPS = 1000


def kill_case(seed):
    rng = random.Random(seed)
    n = 2 + seed % 3
    return {"n": n, "transport": "auto" if seed % 2 == 0 else "tcp", "victim": rng.randrange(n),
            "mode": rng.choice(["self_before", "self_thread", "parent"]), "kill_at": rng.randrange(KILL_OPS),
            "delay": rng.uniform(0, 0.004)}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("seed", KILL_SEEDS)
def test_sigkill_during_mixed_collectives(job_of, seed):
    c = kill_case(seed)
    n, v = c["n"], c["victim"]
    members = [r for r in range(n) if r != v]
    job = job_of("kill", n, seed, env={"GODIST_TRANSPORT": c["transport"]}, victim=v, mode=c["mode"],
                 kill_at=c["kill_at"], delay=c["delay"], ops=KILL_OPS, members=members)
    what = f"seed {seed} ({c})"
    job.start_all()
    if c["mode"] == "parent":
        job.wait_event(v, "reached", timeout=60)
        os.kill(job.pids[v], signal.SIGKILL)
    res = job.results(members, timeout=60)
    assert job.wait_exit(v) == -signal.SIGKILL, f"{what}: the victim was not killed\n{job.logs()}"
    for r, out in res.items():
        e = out["error"]
        assert e is not None, f"{what}: rank {r} saw no error with rank {v} killed"
        assert out["wrong"] == [], f"{what}: rank {r} got wrong values: {out['wrong']}"
        assert e["is_godist_error"] and e["is_dist_error"], f"{what}: rank {r}: {e}"
        assert e["cause"] in ("conn_lost", "peer_left", "timeout"), f"{what}: rank {r}: {e}"
        # The killed rank, directly or as the reason a survivor left first.
        assert f"rank {v}" in e["msg"], f"{what}: rank {r}: the error does not name rank {v}: {e['msg']}"
        assert e["elapsed"] < TIMEOUT_S + BOUND_S, f"{what}: rank {r} took {e['elapsed']:.1f}s to fail"
        check_leaks(seed, r, out)
        check_recovered(seed, r, out)
    assert leftover_shm(job.pids.values()) == [], what


# ---------------------------------------------------------------- 2. SIGSTOP


@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_sigstop_others_time_out_naming_it(job_of, transport):
    seed = BASE_SEED + 100 + (transport == "tcp")
    rng = random.Random(seed)
    n = 3
    v = rng.randrange(n)
    others = [r for r in range(n) if r != v]
    job = job_of("stop", n, seed, env={"GODIST_TRANSPORT": transport}, run_s=40, members=list(range(n)))
    what = f"seed {seed} ({transport}, {n} ranks, rank {v} stopped)"
    job.start_all()
    for r in range(n):
        job.wait_event(r, "running")
    time.sleep(rng.uniform(0.1, 0.6))
    os.kill(job.pids[v], signal.SIGSTOP)
    for r in others:
        job.wait_event(r, "failed", timeout=TIMEOUT_S + 30)
    time.sleep(0.5)
    os.kill(job.pids[v], signal.SIGCONT)
    cont = time.time()
    res = job.results(list(range(n)), timeout=60)
    for r, out in res.items():
        assert out["wrong"] == [], f"{what}: rank {r} got wrong values: {out['wrong']}"
        assert out["errors"], f"{what}: rank {r}: no op failed"
        e = out["errors"][0]
        assert e["is_godist_error"], f"{what}: rank {r}: {e}"
        if r != v:
            assert e["is_timeout"] and e["cause"] == "timeout", f"{what}: rank {r}: {e}"
            # A survivor still waiting for it in the op before is missing
            # too, but only the stopped rank does not answer.
            assert v in e["missing_ranks"], f"{what}: rank {r}: {e}"
            assert f"rank(s) [{v}] did not answer" in e["msg"], f"{what}: rank {r}: {e['msg']}"
            assert e["elapsed"] < TIMEOUT_S + BOUND_S, f"{what}: rank {r} took {e['elapsed']:.1f}s to fail"
            # At the deadline: the query of the stopped rank ran inside the
            # timeout, not a second after it.
            assert e["elapsed"] < TIMEOUT_S + 0.5, f"{what}: rank {r} raised {e['elapsed']:.2f}s into a {TIMEOUT_S}s timeout"
        else:
            # Resumed, it fails at once: its peers broke the group.
            assert e["at"] - cont < BOUND_S, f"{what}: rank {v} failed {e['at'] - cont:.1f}s after SIGCONT: {e}"
        # The next op is refused by the broken group.
        if len(out["errors"]) > 1:
            assert "broken" in out["errors"][1]["msg"] or out["errors"][1]["cause"] in ("broken", "closed"), \
                f"{what}: rank {r}: {out['errors'][1]}"
        check_leaks(seed, r, out)
        check_recovered(seed, r, out)
    assert leftover_shm(job.pids.values()) == [], what


# ---------------------------------------------------------------- 3. reset


def tcp_sockets(pid, state="established"):
    """(local, peer) address pairs of pid's TCP sockets in state (ss)."""
    out = subprocess.run(["ss", "-tnpH", "state", state], capture_output=True, text=True, check=True).stdout
    socks = []
    for line in out.splitlines():
        if f"pid={pid}," not in line:
            continue
        f = line.split()
        # established: Recv-Q Send-Q Local Peer Process; listening likewise.
        socks.append((f[2], f[3]))
    return socks


def ss_kill(pairs):
    """Destroy TCP sockets, given as (local, peer) addresses, all in one go
    (ss -K; the kernel needs CONFIG_INET_DIAG_DESTROY); return how many
    were destroyed."""
    expr = []
    for local, peer in pairs:
        expr += ["or"] * bool(expr) + ["(", "src", local, "and", "dst", peer, ")"]
    r = subprocess.run(["ss", "-K", "-tnH"] + expr, capture_output=True, text=True)
    return len(r.stdout.splitlines()) if r.returncode == 0 else 0


def can_kill_sockets():
    if shutil.which("ss") is None:
        return False
    a = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(a.getsockname())
    s, _ = a.accept()
    try:
        local = "%s:%d" % c.getsockname()
        peer = "%s:%d" % c.getpeername()
        if ss_kill([(local, peer)]) != 1:
            return False
        s.settimeout(2)
        try:
            return s.recv(1) == b"" or True
        except OSError:
            return True
    finally:
        for x in (a, c, s):
            x.close()


@pytest.mark.timeout(90)
def test_connection_reset_mid_message(job_of):
    if not can_kill_sockets():
        pytest.skip("ss -K cannot destroy sockets here (needs CONFIG_INET_DIAG_DESTROY and CAP_NET_ADMIN)")
    seed = BASE_SEED + 200
    rng = random.Random(seed)
    n = 3
    v = rng.randrange(n)
    job = job_of("reset", n, seed, env={"GODIST_TRANSPORT": "tcp"}, nbytes=8 << 20, run_s=30,
                 members=list(range(n)))
    what = f"seed {seed} (tcp, {n} ranks, rank {v}'s connections reset)"
    job.start_all()
    for r in range(n):
        job.wait_event(r, "running")
    time.sleep(rng.uniform(0.2, 0.8))
    socks = tcp_sockets(job.pids[v])
    assert len(socks) == n - 1, f"{what}: rank {v} has {socks} instead of one connection per peer"
    # At once: a rank whose first connection fails leaves the group and
    # closes the others.
    killed = ss_kill(socks)
    reset = time.time()
    assert killed >= 1, f"{what}: ss -K destroyed none of {socks}"
    res = job.results(list(range(n)), timeout=60)
    for r, out in res.items():
        e = out["error"]
        assert out["wrong"] == [], f"{what}: rank {r} got wrong values: {out['wrong']}"
        assert e is not None, f"{what}: rank {r}: no error after the reset ({out['ok_ops']} ops)"
        assert e["is_godist_error"] and e["cause"] in ("conn_lost", "peer_left"), f"{what}: rank {r}: {e}"
        assert e["at"] - reset < TIMEOUT_S + BOUND_S, f"{what}: rank {r} failed {e['at'] - reset:.1f}s after the reset"
        # The peer at fault is named: the reset rank for the others, a peer for it.
        assert e["peer"] is not None and e["peer"] != r, f"{what}: rank {r}: {e}"
        assert f"rank {e['peer']}" in e["msg"], f"{what}: rank {r}: {e['msg']}"
        if r != v:
            assert f"rank {v}" in e["msg"], f"{what}: rank {r}: {e['msg']}"
        check_leaks(seed, r, out)
        check_recovered(seed, r, out)
    assert leftover_shm(job.pids.values()) == [], what


# ---------------------------------------------------------------- 4. the store's server


def start_store_server(job):
    job.start("server", scenario="store_server")
    return job.wait_event("server", "serving", timeout=30)["port"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("client", ["torch", "godist"])
def test_store_server_killed_during_rendezvous(job_of, client):
    seed = BASE_SEED + 300 + (client == "godist")
    n = 3
    joined = list(range(n - 1))  # the last rank never comes
    job = job_of("store", n, seed, client=client, phase="rendezvous", members=joined, warm=joined)
    port = start_store_server(job)
    job.cfg["store_addr"] = ["127.0.0.1", port]
    what = f"seed {seed} ({client} store client, the server killed before rank {n - 1} joined)"
    job.start_all(joined)
    for r in joined:
        job.wait_event(r, "joining")
    time.sleep(random.Random(seed).uniform(0.3, 1.0))
    os.kill(job.pids["server"], signal.SIGKILL)
    killed = time.time()
    res = job.results(joined, timeout=60)
    for r, out in res.items():
        e = out.get("init_error")
        assert e is not None, f"{what}: rank {r} formed a group of {n} without rank {n - 1}"
        assert e["is_dist_error"], f"{what}: rank {r}: {e}"
        assert e["at"] - killed < TIMEOUT_S + BOUND_S, f"{what}: rank {r} failed {e['at'] - killed:.1f}s after the kill"
        assert "store" in e["msg"].lower(), f"{what}: rank {r}: the error does not say the store failed: {e['msg']}"
        check_leaks(seed, r, out)
        check_recovered(seed, r, out)
    assert leftover_shm(job.pids.values()) == [], what


@pytest.mark.timeout(90)
@pytest.mark.parametrize("client", ["torch", "godist"])
def test_store_server_killed_during_training(job_of, client):
    seed = BASE_SEED + 310 + (client == "godist")
    n = 3
    job = job_of("store", n, seed, client=client, phase="training", members=list(range(n)))
    port = start_store_server(job)
    job.cfg["store_addr"] = ["127.0.0.1", port]
    job.cfg["go"] = job.path("go")
    what = f"seed {seed} ({client} store client, the server killed after the group formed)"
    job.start_all()
    for r in range(n):
        job.wait_event(r, "formed")
    os.kill(job.pids["server"], signal.SIGKILL)
    job.wait_exit("server")
    open(job.path("go"), "w").close()
    res = job.results(list(range(n)), timeout=60)
    for r, out in res.items():
        assert "train_error" not in out, f"{what}: rank {r}: training failed without the store: {out['train_error']}"
        assert out["ok_ops"] == 60 and out["wrong"] == [], f"{what}: rank {r}: {out}"
        # new_group splits from the world without the store; a group formed
        # through the store fails within its timeout, saying why.
        assert out.get("new_group") == n, f"{what}: rank {r}: new_group without the store: {out}"
        e = out.get("store_group_error")
        assert e is not None, f"{what}: rank {r}: a group formed through a dead store"
        assert e["elapsed"] < TIMEOUT_S + BOUND_S, f"{what}: rank {r}: the group took {e['elapsed']:.1f}s to fail"
        assert "store" in e["msg"].lower() or "connection" in e["msg"].lower(), \
            f"{what}: rank {r}: the error does not say the store failed: {e['msg']}"
        assert out.get("after_new_group") == n, f"{what}: rank {r}: the group broke: {out}"
        check_leaks(seed, r, out)
        check_recovered(seed, r, out)
    assert leftover_shm(job.pids.values()) == [], what


# ---------------------------------------------------------------- 5. /dev/shm full or read-only


@pytest.fixture(scope="module")
def ns_server():
    """A fork server in a mount namespace of its own, with a /dev/shm of
    256 KiB: room for the ranks' probe files, not for an arena."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    wrap = ["unshare", "-m", "--propagation", "private"] + ([] if os.geteuid() == 0 else ["-r"])
    wrap += ["sh", "-c", 'mount -t tmpfs -o size=256k tmpfs /dev/shm && exec "$@"', "sh"]
    probe = subprocess.run(wrap + ["true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private /dev/shm: {probe.stderr.strip()}")
    s = Server(wrap)
    yield s
    s.close()


SHM_CASES = {
    # /dev/shm has room for the probes but not for the arena: rank 0's
    # fallocate fails with ENOSPC.
    "full": (["mount", "-o", "remount,rw,size=256k", "/dev/shm"],
             "opening its shared-memory arena failed, the group uses TCP"),
    # Nothing can be created in /dev/shm: not even the probes.
    "readonly": (["mount", "-o", "remount,ro", "/dev/shm"], "shared memory is not usable"),
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("case", list(SHM_CASES))
def test_dev_shm_full_or_readonly_falls_back_to_tcp(ns_server, job_of, case):
    seed = BASE_SEED + 400 + list(SHM_CASES).index(case)
    remount, warning = SHM_CASES[case]
    rc, out = ns_server.sh(remount)
    assert rc == 0, f"seed {seed}: {' '.join(remount)}: {out}"
    n = 3
    job = job_of("shm", n, seed, srv=ns_server, members=list(range(n)), warm_transport="tcp")
    what = f"seed {seed} (/dev/shm {case}, {n} ranks)"
    job.start_all()
    res = job.results(list(range(n)), timeout=60)
    for r, out in res.items():
        assert "init_error" not in out, f"{what}: rank {r}: {out['init_error']}"
        assert not out["shared_memory"] and out["topology"]["offload"] == "", f"{what}: rank {r}: {out}"
        assert set(out["topology"]["via"]) == {"self", "tcp"}, f"{what}: rank {r}: {out['topology']}"
        assert out["ok_ops"] == 40 and out["wrong"] == [], f"{what}: rank {r}: {out}"
        # Setup falls back at once, without waiting for an arena that will never be.
        assert out["init_s"] < 3, f"{what}: rank {r}: the group took {out['init_s']:.1f}s to form"
        check_leaks(seed, r, out)
        check_recovered(seed, r, out)
    logs = [job.log(r) for r in range(n)]
    assert any(warning in log for log in logs), f"{what}: no rank warned {warning!r}\n{job.logs()}"
    rc, out = ns_server.sh(["sh", "-c", "ls -a /dev/shm"])
    left = [f for f in out.split() if f.startswith("godist-")]
    assert left == [], f"{what}: left in /dev/shm: {left}"


# ---------------------------------------------------------------- 6. strangers at a rank's port

# A handshake of another job: wire.Handshake{Magic, Version, Session
# 0x5eed5eed5eed5eed, Group "another-job", FromRank 1, ToRank 0, WorldSize
# 2}.Marshal(), as a rank of that job would send it, length first.
OTHER_JOB_HANDSHAKE = bytes.fromhex(
    "20000000474448530000000000001200200014000600180010000c0000000800120000000000010002000000010000001000000054534447"
    "ed5eed5eed5eed5e0b000000616e6f746865722d6a6f620059e5484f")


def listening_ports(pid):
    return sorted({int(local.rsplit(":", 1)[1]) for local, _ in tcp_sockets(pid, "listening")})


class Stranger:
    """A connection from outside the job; notes when the rank closes it."""

    def __init__(self, port, kind, rng):
        self.kind = kind
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if kind == "garbage":
            self.sock.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))))
        elif kind == "handshake":
            self.sock.sendall(len(OTHER_JOB_HANDSHAKE).to_bytes(4, "little") + OTHER_JOB_HANDSHAKE)
        elif kind == "slow":
            self.sock.sendall((100).to_bytes(4, "little") + b"\x20")  # a handshake that never ends
        # "silent" sends nothing.
        self.got, self.closed_at, self.error = b"", None, None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        self.sock.settimeout(60)
        try:
            while True:
                b = self.sock.recv(64)
                if not b:
                    break
                self.got += b
        except OSError as e:
            self.error = type(e).__name__
        self.closed_at = time.time()

    def close(self):
        self.sock.close()


STRANGER_KINDS = ["garbage", "handshake", "silent", "slow"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_strangers_at_a_ranks_port(job_of, transport):
    if shutil.which("ss") is None:
        pytest.skip("needs ss(8) to find the ranks' ports")
    seed = BASE_SEED + 500 + (transport == "tcp")
    rng = random.Random(seed)
    n = 3
    job = job_of("stranger", n, seed, env={"GODIST_TRANSPORT": transport}, ops=80, members=list(range(n)))
    job.cfg["go"], job.cfg["go2"] = job.path("go"), job.path("go2")
    what = f"seed {seed} ({transport}, {n} ranks, strangers at the ports of ranks 0-{n - 2})"
    job.start_all()
    strangers = []
    try:
        # Ranks 0..n-2 listen while they wait for the last rank's address.
        ports = {}
        for r in range(n - 1):
            job.wait_event(r, "joining")
            deadline = time.monotonic() + 10
            while not (p := listening_ports(job.pids[r])) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(p) == 1, f"{what}: rank {r} listens on {p}"
            ports[r] = p[0]
        for r, port in ports.items():
            for kind in rng.sample(STRANGER_KINDS, len(STRANGER_KINDS)):
                strangers.append((r, Stranger(port, kind, rng)))
        time.sleep(0.2)
        open(job.cfg["go"], "w").close()
        formed = max(job.wait_event(r, "formed", timeout=TIMEOUT_S + 10)["t"] for r in range(n))
        # The listeners are closed once the group formed: a stranger now is refused.
        for r in range(n - 1):
            job.wait_event(r, "midway")
        for r, port in ports.items():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                pytest.fail(f"{what}: rank {r} still accepts connections at {port} once its group formed")
            except ConnectionRefusedError:
                pass
        open(job.cfg["go2"], "w").close()
        res = job.results(list(range(n)), timeout=60)
        for r, s in strangers:
            s.thread.join(10)
            assert s.closed_at is not None, f"{what}: rank {r} never closed a {s.kind} stranger"
            assert s.closed_at - formed < 2, f"{what}: rank {r} held a {s.kind} stranger {s.closed_at - formed:.1f}s"
            assert s.got in (b"", b"\x01"), f"{what}: rank {r} sent {s.got!r} to a {s.kind} stranger"
        assert [s.got for _, s in strangers if s.kind == "handshake"] == [b"\x01"] * (n - 1), \
            f"{what}: a wrong handshake is refused with a 1"
    finally:
        for _, s in strangers:
            s.close()
    for r, out in res.items():
        assert "init_error" not in out, f"{what}: rank {r}: strangers broke the group's setup: {out['init_error']}"
        assert out["error"] is None and out["ok_ops"] == 80 and out["wrong"] == [], f"{what}: rank {r}: {out}"
        check_leaks(seed, r, out)
        check_recovered(seed, r, out)
    assert leftover_shm(job.pids.values()) == [], what
    for r in range(n - 1):
        log = job.log(r)
        assert log.count("refused a connection") >= len(STRANGER_KINDS), \
            f"{what}: rank {r} did not log the strangers it refused:\n{log}"
