"""Which interface a rank listens on and publishes, across hosts.

Two network namespaces stand for two hosts (gdhostA, gdhostB: each rank
also gets its own UTS namespace and host name), joined by a veth pair
``gdv0`` on 198.18.7.0/24. Each also has an interface ``gdd0`` with an
address the other cannot reach (198.19.7.1 on A, 198.19.8.1 on B; no route
between them). Rank 0 runs on A, rank 1 on B. Needs root and ``ip netns``;
skipped otherwise. The namespaces are this module's own (named after the
test process) and deleted afterwards.

The last tests need no namespace: a job whose store is on loopback listens
on loopback only, and unusable settings fail at init.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from harness import run_world

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "netif_worker.py")
A_VETH, B_VETH, A_OTHER = "198.18.7.1", "198.18.7.2", "198.19.7.1"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Hosts:
    """Two namespaces as above; run() starts a command in each."""

    def __init__(self):
        tag = f"gdif{os.getpid()}"
        self.ns = (tag + "a", tag + "b")

    def up(self) -> None:
        a, b = self.ns
        for ns in self.ns:
            _ip("netns", "add", ns)
        _ip("link", "add", "gdv0", "netns", a, "type", "veth", "peer", "name", "gdv0", "netns", b)
        for ns, veth, other in ((a, A_VETH, A_OTHER), (b, B_VETH, "198.19.8.1")):
            # A veth pair inside the namespace stands for a second network
            # (the dummy driver may be missing); gdz0 is its unused far end.
            _ip("-n", ns, "link", "add", "gdd0", "type", "veth", "peer", "name", "gdz0")
            _ip("-n", ns, "addr", "add", veth + "/24", "dev", "gdv0")
            _ip("-n", ns, "addr", "add", other + "/24", "dev", "gdd0")
            for dev in ("lo", "gdv0", "gdd0", "gdz0"):
                _ip("-n", ns, "link", "set", dev, "up")

    def down(self) -> None:
        for ns in self.ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)

    def run(self, argvs: list[list[str]], envs: list[dict], timeout: float) -> list[dict]:
        """Run argvs[i] with envs[i] on host i; return each one's JSON line
        (with its stderr). On timeout kill both and fail."""
        procs = []
        for i, (argv, env) in enumerate(zip(argvs, envs)):
            host = "gdhost" + "AB"[i]
            cmd = ["ip", "netns", "exec", self.ns[i], "unshare", "--uts", "sh", "-c",
                   f'hostname {host} && exec "$0" "$@"', *argv]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        outs = []
        try:
            for p in procs:
                try:
                    outs.append(p.communicate(timeout=timeout))
                except subprocess.TimeoutExpired:
                    for q in procs:
                        os.killpg(q.pid, signal.SIGKILL)
                    pytest.fail(f"ranks did not finish in {timeout}s: " +
                                "\n".join(f"{o}\n{e}" for o, e in (q.communicate() for q in procs)))
        finally:
            for p in procs:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        res = []
        for (out, err), p in zip(outs, procs):
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            assert lines, f"rank printed no result (exit {p.returncode}):\n{out}\n{err}"
            r = json.loads(lines[-1])
            r["stderr"] = err
            res.append(r)
        return res


def _netns_ok() -> str | None:
    """Why namespaces cannot be used here, or None."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "needs ip (iproute2) and unshare"
    probe = f"gdif{os.getpid()}p"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as e:
        return f"ip netns add fails: {getattr(e, 'stderr', e)}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


@pytest.fixture(scope="module")
def hosts():
    why = _netns_ok()
    if why:
        pytest.skip(why)
    h = Hosts()
    try:
        h.up()
    except subprocess.CalledProcessError as e:
        h.down()
        pytest.skip(f"cannot build the namespaces: {' '.join(e.cmd)}: {e.stderr}")
    yield h
    h.down()


def _env(rank: int, timeout: float, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GODIST_", "MASTER_", "TORCHELASTIC"))}
    env.update(PYTHONPATH=os.pathsep.join(p for p in sys.path if p), RANK=str(rank), WORLD_SIZE="2",
               NETIF_TIMEOUT=str(timeout), GODIST_TRANSPORT="tcp", GODIST_LOG_LEVEL="INFO", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def _env_init(timeout: float, port: int, a: dict | None = None, b: dict | None = None) -> list[dict]:
    master = dict(MASTER_ADDR=A_VETH, MASTER_PORT=str(port))
    return [_env(0, timeout, **master, **(a or {})), _env(1, timeout, **master, **(b or {}))]


@pytest.mark.timeout(180)
def test_default_is_the_interface_towards_the_store(hosts):
    """env:// with MASTER_ADDR on A's veth: each rank listens on its veth
    address only, found by the route to MASTER_ADDR (rank 0: its own)."""
    res = hosts.run([[sys.executable, WORKER, "env"]] * 2, _env_init(60, 29611), timeout=150)
    for r in res:
        assert r["ok"], r
        assert r["sum"] == [3.0] * 4
    assert f"TCP listens on {A_VETH} (gdv0): the route to the store's host {A_VETH} leaves through gdv0" \
        in res[0]["stderr"]
    assert f"TCP listens on {B_VETH} (gdv0): the route to the store's host {A_VETH} leaves through gdv0" \
        in res[1]["stderr"]


@pytest.mark.timeout(180)
def test_socket_ifname_selects_the_interface(hosts, tmp_path):
    """A FileStore gives no host to route to (all interfaces by default);
    GODIST_SOCKET_IFNAME picks the veth: an exact name on A, an exclusion
    on B."""
    store = str(tmp_path / "store")
    envs = [_env(0, 60, GODIST_SOCKET_IFNAME="=gdv0"), _env(1, 60, GODIST_SOCKET_IFNAME="^gdd,gdz")]
    res = hosts.run([[sys.executable, WORKER, "file", store]] * 2, envs, timeout=150)
    for r in res:
        assert r["ok"], r
    assert f"TCP listens on {A_VETH} (gdv0): GODIST_SOCKET_IFNAME==gdv0 selects gdv0" in res[0]["stderr"]
    assert f"TCP listens on {B_VETH} (gdv0): GODIST_SOCKET_IFNAME=^gdd,gdz selects gdv0" in res[1]["stderr"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("setting", [("GODIST_SOCKET_IFNAME", "gdd"), ("GODIST_BIND_ADDR", A_OTHER)])
def test_unreachable_address_fails_both_ranks(hosts, setting):
    """Rank 0 publishes the address of gdd0, which B has no route to: rank 1
    says it could not reach it there, rank 0 that rank 1 never came, both
    within the group's timeout."""
    timeout = 6.0
    name, value = setting
    port = 29612 if name == "GODIST_SOCKET_IFNAME" else 29613
    res = hosts.run([[sys.executable, WORKER, "env"]] * 2, _env_init(timeout, port, a={name: value}), timeout=150)
    r0, r1 = res
    assert not r0["ok"] and not r1["ok"], res
    where = f"{A_OTHER}:"
    assert f"rank 1 could not reach rank 0 at {where}" in r1["error"], r1
    assert "(interface gdd0 on host gdhostA): network is unreachable (tried for" in r1["error"], r1
    assert "rank 0 waited" in r0["error"] and f"for rank(s) [1] to connect to it at {where}" in r0["error"], r0
    assert "(interface gdd0 on host gdhostA)" in r0["error"], r0
    assert r1["peer"] == 0 and r0["missing_ranks"] == [1], res
    for r in res:
        assert r["timeout_error"], r
        # the store's rendezvous, then the connections, each bounded by the timeout
        assert r["elapsed"] < 2 * timeout + 10, r


def _listening(pid: int) -> list[tuple[str, int]]:
    """The (address, port) of every TCP socket process pid listens on, from
    /proc/net/tcp and tcp6 (its network namespace's sockets), kept to the
    inodes of pid's descriptors."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    out = []
    for table in ("tcp", "tcp6"):
        if not os.path.exists(f"/proc/{pid}/net/{table}"):  # tcp6: no IPv6 here
            continue
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in inodes:  # 0A: TCP_LISTEN
                    continue
                addr, port = local.split(":")
                raw = bytes.fromhex(addr)  # 32-bit words in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                out.append((str(ipaddress.ip_address(raw)), int(port, 16)))
    return out


@pytest.mark.timeout(180)
@pytest.mark.skipif(not os.path.exists("/proc/self/net/tcp"), reason="reads /proc/<pid>/net/tcp")
def test_single_host_job_listens_on_loopback_only(tmp_path):
    """A TCPStore at 127.0.0.1, three ranks: while ranks 0 and 1 wait in the
    rendezvous for rank 2 (held back until then), with their TCP listeners
    open, every socket they listen on but the store's is on loopback; the
    INFO line says where and why. (The store's port is torch's TCPStore
    server, not godist's to choose.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    go = tmp_path / "go"
    envs = [_env(r, 60, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="3") for r in range(3)]
    envs[2]["NETIF_GO_FILE"] = str(go)
    procs = [subprocess.Popen([sys.executable, WORKER, "store"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for env in envs]
    seen: dict[int, list] = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(seen) < 2:
            for r, p in enumerate(procs[:2]):
                assert p.poll() is None, f"rank {r} exited early: {p.communicate()}"
                ours = [a for a in _listening(p.pid) if a[1] != port]
                if ours:
                    seen[r] = ours
            time.sleep(0.05)
        assert len(seen) == 2, f"ranks 0 and 1 did not listen within 90s: {seen}"
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, addrs in seen.items():
        assert all(ipaddress.ip_address(a).is_loopback for a, _ in addrs), f"rank {r} listens on {addrs}"
    for r, (out, err) in enumerate(outs):
        res = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
        assert res["ok"] and res["sum"] == [6.0] * 4, (res, err)
        assert ("TCP listens on 127.0.0.1 (lo): the store's host 127.0.0.1 is this host's loopback (127.0.0.1), "
                "so every rank of the group runs here") in err, err


def _init_one(rank, n, init_file):
    import datetime

    import torch.distributed as dist

    import godist  # noqa: F401  (registers the backend where torch does not load entry points)

    try:
        dist.init_process_group("godist", init_method=f"file://{init_file}", rank=rank, world_size=n,
                                timeout=datetime.timedelta(seconds=30))
    except ValueError as e:
        return str(e)
    return None


@pytest.mark.timeout(120)
def test_unusable_settings_fail_at_init():
    msg = run_world(_init_one, 1, env={"GODIST_SOCKET_IFNAME": "gdnosuch0,lo"})[0]
    assert msg is not None and msg.startswith(
        'godist: GODIST_SOCKET_IFNAME="gdnosuch0,lo": no interface name starts with "gdnosuch0"; this host has lo ('), msg
    msg = run_world(_init_one, 1, env={"GODIST_BIND_ADDR": "203.0.113.7"})[0]
    assert msg is not None and msg.startswith(
        'godist: GODIST_BIND_ADDR="203.0.113.7": no interface of this host has this address; this host has lo ('), msg
    assert run_world(_init_one, 1, env={"GODIST_SOCKET_IFNAME": "=lo"})[0] is None


def test_store_host(tmp_path, monkeypatch):
    """The host whose route chooses the interface, for each kind of store."""
    import torch.distributed as dist

    import godist
    from godist import _rendezvous

    monkeypatch.delenv("MASTER_ADDR", raising=False)
    s = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    assert _rendezvous.store_host(dist.PrefixStore("a", dist.PrefixStore("b", s))) == "127.0.0.1"
    g = godist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    try:
        assert _rendezvous.store_host(dist.PrefixStore("q", godist.PrefixStore("p", g))) == "127.0.0.1"
    finally:
        g.close()
    assert _rendezvous.store_host(dist.FileStore(str(tmp_path / "f"), 1)) is None
    assert _rendezvous.store_host(godist.HashStore()) is None

    class Other(dist.Store):
        pass

    assert _rendezvous.store_host(Other()) is None
    monkeypatch.setenv("MASTER_ADDR", "198.18.9.9")
    assert _rendezvous.store_host(dist.PrefixStore("a", Other())) == "198.18.9.9"
    assert _rendezvous.store_host(dist.HashStore()) is None
