"""godist across simulated hosts (godist.hosts: network namespaces joined by a
bridge, each with its own hostname and /dev/shm): every collective against
gloo on the same hosts, the topology the group reports, a cable pulled
mid-collective, and torchrun's multi-node rendezvous training with DDP.

Ranks are real processes started in the hosts (workers/hosts_worker.py); they meet
through a TCPStore on host 0's address. Needs root; skipped otherwise."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

import godist
from godist import hosts as gdhosts

ok, why = gdhosts.available()
if not ok:
    pytest.skip(why, allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "hosts_worker.py")
PORT = 29500  # every Hosts has its own network: nothing else listens there


def rank_env(h: gdhosts.Hosts, host: int, master: bool = True, **extra) -> dict:
    """The environment of a process on host: godist and the tests importable,
    gloo on the host's interface, and (with master) the store on host 0."""
    env = dict(os.environ)
    paths = [os.path.dirname(os.path.dirname(godist.__file__)), HERE, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=h.ifname(host))
    if master:
        env.update(MASTER_ADDR=h.addr(0), MASTER_PORT=str(PORT))
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Job:
    """Processes started in simulated hosts, their output in files; every
    process left in the hosts is killed when the job ends or times out."""

    def __init__(self, h: gdhosts.Hosts, tmp):
        self.h, self.tmp, self.procs = h, tmp, []

    def start(self, host: int, argv: list[str], env: dict) -> None:
        k = len(self.procs)
        out, err = open(self.tmp / f"{k}.out", "w+"), open(self.tmp / f"{k}.err", "w+")
        p = self.h.popen(host, argv, env=env, stdout=out, stderr=err, text=True, stdin=subprocess.DEVNULL)
        self.procs.append((p, out, err))

    def output(self, k: int) -> tuple[str, str]:
        """What process k has written so far to stdout and stderr."""
        def read(f):
            with open(f.name) as g:
                return g.read()

        return read(self.procs[k][1]), read(self.procs[k][2])

    def transcript(self) -> str:
        return "\n".join(f"--- process {k} (exit {p.returncode}) ---\n{o[-3000:]}\n{e[-5000:]}"
                         for k, (p, _, _) in enumerate(self.procs) for o, e in [self.output(k)])

    def wait(self, timeout: float) -> list[str]:
        """Wait for every process, kill them all at the deadline; return
        stdout by process; fail the test unless all exited 0 in time."""
        deadline = time.monotonic() + timeout
        try:
            for p, _, _ in self.procs:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.h.kill()
            for p, _, _ in self.procs:
                p.wait(10)
            pytest.fail(f"processes did not finish within {timeout}s\n{self.transcript()}")
        finally:
            self.h.kill()
            for _, out, err in self.procs:
                out.close(), err.close()
        if any(p.returncode != 0 for p, _, _ in self.procs):
            pytest.fail(f"a process failed\n{self.transcript()}")
        return [self.output(k)[0] for k in range(len(self.procs))]


def results(outs: list[str]) -> list[dict]:
    """The "RESULT <json>" lines of every process's output."""
    return [json.loads(line[7:]) for o in outs for line in o.splitlines() if line.startswith("RESULT ")]


def host_of(layout: list[int]) -> list[int]:
    """Rank -> host for layout (ranks per host; consecutive ranks share a host)."""
    return [i for i, k in enumerate(layout) for _ in range(k)]


def start_ranks(job: Job, layout: list[int], mode: str, **env) -> None:
    hosts = host_of(layout)
    for rank, host in enumerate(hosts):
        job.start(host, [sys.executable, WORKER, mode],
                  rank_env(job.h, host, RANK=rank, WORLD_SIZE=len(hosts), LOCAL_RANK=rank - hosts.index(host), **env))


PROBE = """
import os, socket, sys
what = sys.argv[1]
if what == "listen":
    s = socket.create_server(("0.0.0.0", 7000))
    print("listening", flush=True)
    while True:
        s.accept()[0].close()
elif what == "shm":
    open("/dev/shm/gdprobe", "w").close()
    print(socket.gethostname(), sorted(os.listdir("/dev/shm")))
elif what == "ls":
    print(sorted(os.listdir("/dev/shm")))
elif what == "connect":
    try:
        socket.create_connection((sys.argv[2], 7000), timeout=float(sys.argv[3])).close()
        print("connected", socket.gethostbyname(sys.argv[2]))
    except OSError as e:
        print("failed", e)
"""


@pytest.mark.timeout(60)
def test_hosts_are_separate_and_cleaned_up():
    """Each host has its own name, /dev/shm (shared by its processes) and
    address; a cut link is
    silent and a restored one works; the rate shapes both directions;
    close removes every namespace and leaves no process behind."""
    py = [sys.executable, "-c", PROBE]

    def run(h, i, *args):
        return h.run(i, [*py, *args], timeout=30, capture_output=True, text=True).stdout.strip()

    stale_pid = next(p for p in range(4_000_000, 5_000_000) if not os.path.exists(f"/proc/{p}"))
    stale = f"gdbed{stale_pid}x0h0"  # as if left by a killed run
    subprocess.run(["ip", "netns", "add", stale], check=True)
    with gdhosts.Hosts(2, rate="1gbit", prefix="gdbed") as h:
        names = [h.netns(i) for i in range(2)]
        assert stale not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert [run(h, i, "shm") for i in range(2)] == ["gdbedhost0 ['gdprobe']", "gdbedhost1 ['gdprobe']"]
        assert run(h, 0, "ls") == "['gdprobe']"  # another process of host 0 sees host 0's file
        shm = h.shm_dir(0)
        server = h.popen(0, [*py, "listen"], stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "listening"
        assert run(h, 1, "connect", h.name(0), "5") == f"connected {h.addr(0)}"  # by name, through /etc/hosts
        h.cut(1)
        assert run(h, 1, "connect", h.addr(0), "1").startswith("failed")
        h.restore(1)
        assert run(h, 1, "connect", h.addr(0), "10") == f"connected {h.addr(0)}"
        for ns, dev in [(h.netns(0), h.ifname(0)), (h._switch, "h0")]:
            qd = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
            assert "tbf" in qd and "rate 1Gbit" in qd, qd
    assert server.wait(10) == -9  # killed by close
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in left for n in names + [h._switch]), left
    assert not os.path.exists(shm)
    with open("/proc/mounts") as f:
        assert shm not in f.read()
    h.close()  # idempotent


# The collectives run once per layout; the topology test reads the same runs.
LAYOUTS = {"2x2": [2, 2], "3x1": [1, 1, 1], "2x3": [3, 3]}
LITE = {"2x3"}  # six ranks on a small machine: fewer dtypes (HOSTS_LITE in workers/hosts_worker.py)
_runs: dict[str, list[dict]] = {}


def collectives_run(name: str, tmp_path_factory) -> list[dict]:
    if name not in _runs:
        layout = LAYOUTS[name]
        with gdhosts.Hosts(len(layout)) as h:
            job = Job(h, tmp_path_factory.mktemp(f"hosts{name}"))
            start_ranks(job, layout, "collectives", HOSTS_LITE=int(name in LITE))
            rs = results(job.wait(timeout=200))
        assert len(rs) == sum(layout), rs
        _runs[name] = sorted(rs, key=lambda r: r["rank"])
    return _runs[name]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_collectives_across_hosts_match_gloo(name, tmp_path_factory):
    rs = collectives_run(name, tmp_path_factory)
    layout = LAYOUTS[name]
    assert [r["host"] for r in rs] == [f"gdhost{i}" for i in host_of(layout)]
    failures = [f for r in rs for f in r["failures"]]
    assert not failures, "\n".join(failures[:40])
    least = 200 if name in LITE else 500
    assert all(r["checks"] > least for r in rs), [r["checks"] for r in rs]
    assert all(r["vs_gloo"] > least // 2 for r in rs), [(r["vs_gloo"], r["gloo_lacks"]) for r in rs]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_topology_shares_memory_only_inside_hosts(name, tmp_path_factory):
    if not hasattr(godist, "topology"):
        pytest.skip("godist.topology missing")
    rs = collectives_run(name, tmp_path_factory)
    layout, hosts = LAYOUTS[name], host_of(LAYOUTS[name])
    want_hosts = [[r for r, x in enumerate(hosts) if x == i] for i in range(len(layout))]
    for r in rs:
        t, me = r["topology"], r["rank"]
        assert t["hosts"] == want_hosts, t
        assert t["offload"] == ("shm+tcp" if max(layout) > 1 else ""), t
        want_algos = ("all_reduce and broadcast: through the hosts' lowest ranks" if max(layout) > 1
                      else "all_reduce: recursive doubling up to 64 KiB")
        assert t["algorithms"].startswith(want_algos), t
        want_via = ["self" if j == me else "shm" if hosts[j] == hosts[me] else "tcp" for j in range(len(hosts))]
        assert t["via"] == want_via, (me, t)


CUT_TIMEOUT_S = 8


def ranks_named(msg: str) -> set[int]:
    """The ranks an error message names ("rank 3", "rank(s) [2 3]")."""
    named = {int(x) for x in re.findall(r"\brank (\d+)", msg)}
    for group in re.findall(r"\branks?(?:\(s\))? \[([\d ,]*)\]", msg):
        named |= {int(x) for x in re.findall(r"\d+", group)}
    return named


@pytest.mark.timeout(120)
def test_cut_link_fails_every_rank_naming_the_unreachable(tmp_path):
    """Host 1's cable is pulled during a loop of 16 MiB all_reduces: every
    rank must fail within its timeout plus a bound, name a rank it cannot
    reach, and exit."""
    layout = [2, 2]
    hosts = host_of(layout)
    with gdhosts.Hosts(2) as h:
        job = Job(h, tmp_path)
        start_ranks(job, layout, "cut", CUT_TIMEOUT_S=CUT_TIMEOUT_S)
        deadline = time.monotonic() + 90
        while not all("READY" in job.output(k)[0] for k in range(len(hosts))):
            if time.monotonic() > deadline or any(p.poll() is not None for p, _, _ in job.procs):
                h.kill()
                pytest.fail(f"the ranks did not get going\n{job.transcript()}")
            time.sleep(0.2)
        h.cut(1)
        cut_at = time.time()
        rs = results(job.wait(timeout=CUT_TIMEOUT_S + 20))
    assert len(rs) == len(hosts), rs
    for r in sorted(rs, key=lambda r: r["rank"]):
        me = r["rank"]
        others = [j for j in range(len(hosts)) if hosts[j] != hosts[me]]
        assert r["error"], f"rank {me}: no error after the cut ({r['done']} all_reduces)"
        assert r["is_dist_error"], r
        assert r["failed_at"] - cut_at < CUT_TIMEOUT_S + 20, r
        assert ranks_named(r["error"]) & set(others), f"rank {me}: the error names none of {others}: {r}"


@pytest.mark.timeout(180)
def test_torchrun_multinode_ddp_equal_on_godist_and_gloo(tmp_path):
    """torchrun --nnodes 2 --nproc-per-node 2 with c10d rendezvous on two
    hosts (each finds the other by its hostname) trains the same DDP model
    on godist and then on gloo; exact gradient sums make every rank end
    with the same parameters on both."""
    with gdhosts.Hosts(2) as h:
        job = Job(h, tmp_path)
        for host in range(2):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{h.addr(0)}:{PORT}", "--rdzv-id", "hosts",
                    "--max-restarts", "0", "--monitor-interval", "0.5", WORKER, "ddp"]
            job.start(host, argv, rank_env(h, host, master=False))
        rs = results(job.wait(timeout=150))
        names = [h.name(0), h.name(1)]
    assert sorted(r["rank"] for r in rs) == [0, 1, 2, 3], rs
    hosts = {}
    for r in rs:
        assert r["world"] == 4 and r["backend"] == "godist" and r["moved"] > 1e-3, r
        assert r["master"] in names, r  # the agents' address: the rank 0 node's hostname
        hosts.setdefault(r["host"], set()).add(r["local_rank"])
    assert sorted(hosts) == names and all(v == {0, 1} for v in hosts.values()), rs
    digests = {(r["rank"], b): r[b] for r in rs for b in ("godist", "gloo")}
    assert len(set(digests.values())) == 1, digests
