"""Simulated hosts on one Linux machine, for multi-host tests and benchmarks.

``Hosts(n)`` makes n network namespaces ("hosts") joined by a bridge that
lives in a namespace of its own (the "switch"), so nothing in the root
namespace changes::

    host i: netns <prefix><pid>x<k>h<i>, eth0 = 198.18.0.(i+1)/15, lo up
       |  veth (tbf-shaped to ``rate`` in both directions when given)
    switch: netns <prefix><pid>x<k>sw, bridge br0 with ports h0 .. h(n-1)

A process started with :meth:`Hosts.popen` runs in host i's network
namespace and in its own UTS and mount namespaces: its hostname is
``name(i)``, /dev/shm is host i's own tmpfs (shared by every process of
host i, as on a machine; ranks on different hosts share no memory) and
/etc/hosts lists every host's name and address (hostnames
resolve as on a cluster). 198.18.0.0/15 is reserved for benchmarking (RFC
2544) and only used inside these namespaces.

:meth:`Hosts.cut` takes the switch's port of host i down, as when a cable
is pulled: host i's eth0 shows NO-CARRIER, and packets in either direction
are dropped with no reset and no ICMP, so sockets on both sides see only
silence (their reads wait, their connects time out). :meth:`Hosts.restore`
brings the port back up.

:meth:`Hosts.close` (also on leaving the ``with`` block, at exit, and
idempotent) kills every process left in the hosts and deletes the
namespaces, which removes their veths and the bridge. Namespaces of this
prefix left by a process that no longer exists are deleted at start.

Needs root, ``ip`` (iproute2), ``tc``, ``unshare`` and ``mount``
(util-linux). ``python -m godist.hosts`` says whether they work here.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

__all__ = ["available", "Hosts"]

_TOOLS = ("ip", "tc", "unshare", "mount")
_counter = itertools.count()
_live: set = set()  # open Hosts, closed at exit

# Runs argv ($@) in a fresh UTS and mount namespace: $1 hostname, $2 the
# /etc/hosts to bind, $3 the host's tmpfs to bind on /dev/shm.
_ENTER = ('hostname "$1" && mount --bind "$3" /dev/shm && mount --bind "$2" /etc/hosts '
          '&& shift 3 && exec "$@"')


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip() or p.returncode}")
    return p


def available() -> tuple[bool, str]:
    """(True, "") where simulated hosts can be made here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "simulated hosts need root (network namespaces)"
    missing = [t for t in _TOOLS if shutil.which(t) is None]
    if missing:
        return False, f"simulated hosts need {', '.join(missing)} (iproute2, util-linux)"
    name = f"gd{os.getpid()}x{next(_counter)}probe"
    try:
        p = _ip("netns", "add", name, check=False)
        if p.returncode != 0:
            return False, f"cannot create a network namespace: {p.stderr.strip()}"
        p = subprocess.run(["ip", "netns", "exec", name, "unshare", "--uts", "--mount", "--propagation", "private",
                            "sh", "-c", "hostname probe && mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        if p.returncode != 0:
            return False, f"cannot enter a simulated host: {p.stdout.strip()}"
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"cannot create a network namespace: {e}"
    finally:
        _ip("netns", "del", name, check=False)
    return True, ""


def _kill_netns(ns: str) -> None:
    """SIGKILL every process in netns ns and wait (briefly) until none is left."""
    for _ in range(50):
        pids = [int(x) for x in _ip("netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _clean_stale(prefix: str) -> None:
    """Delete namespaces (and temporary folders) of this prefix whose
    creating process is gone."""
    pat = re.compile(rf"^{re.escape(prefix)}(\d+)x\d+(?:sw|h\d+|probe)$")
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = pat.match(name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _kill_netns(name)
            _ip("netns", "del", name, check=False)
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = re.match(rf"{re.escape(prefix)}(\d+)x\d+hosts", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _remove_dir(os.path.join(tmp, name))


def _remove_dir(d: str) -> None:
    """Unmount the hosts' tmpfs under d, then delete d."""
    for name in os.listdir(d) if os.path.isdir(d) else []:
        if name.startswith("shm"):
            subprocess.run(["umount", "-l", os.path.join(d, name)], capture_output=True, timeout=30)
    shutil.rmtree(d, ignore_errors=True)


def _burst(rate: str) -> str:
    """A tbf bucket for rate: 4 ms worth of bytes, at least 256 KiB (veth
    hands tbf GSO packets of up to 64 KiB)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)?", rate.strip().lower())
    if not m:
        raise ValueError(f"Hosts: rate {rate!r}: use e.g. '1gbit', '100mbit', '10gbit'")
    bps = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    if m.group(3) == "bps":
        bps *= 8
    return str(max(256 << 10, int(bps / 8 * 0.004)))


class Hosts:
    """n simulated hosts; a context manager (see the module's doc)."""

    def __init__(self, n: int, rate: str | None = None, prefix: str = "gd", shm_size: str = "1g"):
        if not 1 <= n <= 254:
            raise ValueError(f"Hosts: n={n}: from 1 to 254 hosts")
        ok, why = available()
        if not ok:
            raise RuntimeError(why)
        self.n, self.rate, self.prefix, self.shm_size = n, rate, prefix, shm_size
        self._base = f"{prefix}{os.getpid()}x{next(_counter)}"
        self._made: list[str] = []
        self._closed = False
        self._dir = tempfile.mkdtemp(prefix=self._base + "hosts")
        _live.add(self)
        _clean_stale(prefix)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        sw = self._switch = self._base + "sw"
        self._add_ns(sw)
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "up")
        with open(self.hosts_file, "w") as f:
            f.write("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n")
            f.writelines(f"{self.addr(i)} {self.name(i)}\n" for i in range(self.n))
        burst = _burst(self.rate) if self.rate else ""
        for i in range(self.n):
            ns, port = self.netns(i), f"h{i}"
            os.mkdir(self.shm_dir(i))
            p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.shm_size}", "tmpfs", self.shm_dir(i)],
                               capture_output=True, text=True, timeout=30)
            if p.returncode != 0:
                raise RuntimeError(f"mount tmpfs for host {i}'s /dev/shm: {p.stderr.strip()}")
            self._add_ns(ns)
            _ip("-n", sw, "link", "add", port, "type", "veth", "peer", "name", self.ifname(i), "netns", ns)
            _ip("-n", sw, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addr(i)}/15", "dev", self.ifname(i))
            _ip("-n", ns, "link", "set", self.ifname(i), "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if self.rate:
                for where, dev in ((ns, self.ifname(i)), (sw, port)):
                    p = subprocess.run(["tc", "-n", where, "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
                                        "burst", burst, "latency", "50ms"], capture_output=True, text=True, timeout=30)
                    if p.returncode != 0:
                        raise RuntimeError(f"tc tbf rate {self.rate} on {dev}: {p.stderr.strip()}")

    def _add_ns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._made.append(ns)

    # ----- names --------------------------------------------------------
    def name(self, i: int) -> str:
        """The hostname inside host i."""
        return f"{self.prefix}host{self._index(i)}"

    def addr(self, i: int) -> str:
        """Host i's address on the simulated network."""
        return f"198.18.0.{self._index(i) + 1}"

    def ifname(self, i: int) -> str:
        """Host i's interface (the same name on every host)."""
        self._index(i)
        return "eth0"

    def netns(self, i: int) -> str:
        """The network namespace of host i (for ``ip -n``)."""
        return f"{self._base}h{self._index(i)}"

    @property
    def hosts_file(self) -> str:
        """The /etc/hosts every host sees."""
        return os.path.join(self._dir, "hosts")

    def shm_dir(self, i: int) -> str:
        """Host i's tmpfs, its processes' /dev/shm."""
        return os.path.join(self._dir, f"shm{self._index(i)}")

    def _index(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise IndexError(f"Hosts: host {i} of {self.n}")
        return i

    # ----- running ------------------------------------------------------
    def argv(self, i: int, argv: list[str]) -> list[str]:
        """The command line that runs argv inside host i."""
        if self._closed:
            raise RuntimeError("Hosts: closed")
        return ["ip", "netns", "exec", self.netns(i), "unshare", "--uts", "--mount", "--propagation", "private",
                "sh", "-c", _ENTER, "sh", self.name(i), self.hosts_file, self.shm_dir(i), *map(str, argv)]

    def popen(self, i: int, argv: list[str], env: dict | None = None, **kw) -> subprocess.Popen:
        """Start argv inside host i (the returned process is argv itself)."""
        return subprocess.Popen(self.argv(i, argv), env=env, **kw)

    def run(self, i: int, argv: list[str], timeout: float, env: dict | None = None,
            **kw) -> subprocess.CompletedProcess:
        """Run argv inside host i to completion; on timeout kill it (not what
        it started: see kill) and raise subprocess.TimeoutExpired."""
        return subprocess.run(self.argv(i, argv), env=env, timeout=timeout, **kw)

    def kill(self, i: int | None = None) -> None:
        """SIGKILL every process in host i (every host if None)."""
        for j in range(self.n) if i is None else [i]:
            _kill_netns(self.netns(j))

    # ----- faults -------------------------------------------------------
    def cut(self, i: int) -> None:
        """Pull host i's cable: its port on the switch goes down."""
        _ip("-n", self._switch, "link", "set", f"h{self._index(i)}", "down")

    def restore(self, i: int) -> None:
        """Plug host i's cable back in."""
        _ip("-n", self._switch, "link", "set", f"h{self._index(i)}", "up")

    # ----- teardown -----------------------------------------------------
    def close(self) -> None:
        """Kill what runs in the hosts and delete every namespace. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for ns in reversed(self._made):
            _kill_netns(ns)
            _ip("netns", "del", ns, check=False)
        self._made.clear()
        _remove_dir(self._dir)
        _live.discard(self)

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Hosts(n={self.n}, rate={self.rate!r}, netns={self._base}*)"


@atexit.register
def _close_all() -> None:
    for h in list(_live):
        h.close()


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m godist.hosts",
                                 description="Say whether simulated hosts can be made here; with N, make N hosts and "
                                             "run a command on each (after --; default: hostname), then tear "
                                             "them down.")
    ap.add_argument("n", nargs="?", type=int, default=0, help="how many hosts")
    ap.add_argument("--rate", default=None, help="tbf rate of each host's link, e.g. 1gbit")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1:] or ["hostname"]
    ok, why = available()
    if not ok or args.n < 1:
        print("simulated hosts: " + ("available" if ok else f"not available: {why}"))
        return 0 if ok else 1
    rc = 0
    with Hosts(args.n, rate=args.rate) as h:
        for i in range(h.n):
            print(f"--- host {i}: {h.name(i)} {h.addr(i)} on {h.ifname(i)} (netns {h.netns(i)})", flush=True)
            rc = max(rc, h.run(i, cmd, timeout=600).returncode)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
