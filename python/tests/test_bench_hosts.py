"""``python -m godist.bench --hosts H``: its options, the link bound, the
refusal without root, and one smoke run on 2 simulated hosts x 2 ranks with
unshaped links (needs root and network namespaces; skipped otherwise)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys

import pytest

from godist.bench import cli, hosts, hosts_report
from godist.bench.cli import BadOption

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cfg(args):
    return hosts.config_from_args(cli.build_parser().parse_args(["--hosts", "2", *args]))


def _hosts_available():
    try:
        from godist import hosts as simhosts
    except ImportError as e:
        return False, f"godist.hosts cannot be imported: {e}"
    return simhosts.available()


@pytest.mark.timeout(30)
def test_hosts_options():
    cfg = _cfg([])
    assert (cfg.hosts, cfg.ranks_per_host, cfg.rates, cfg.world_sizes) == (2, 2, ["1gbit", "10gbit"], [4])
    assert cfg.ops == list(hosts.HOSTS_OPS) and cfg.sizes[0] == 8 and cfg.sizes[-1] == 64 << 20
    assert cfg.spot_dtypes == [] and cfg.scenarios == ["ddp"] and cfg.repeats == 5
    cfg = _cfg(["--ranks-per-host", "3", "--rates", "none,100mbit", "--sizes", "8,1M", "--ops", "allreduce",
                "--scenarios", "none"])
    assert (cfg.ranks_per_host, cfg.rates, cfg.sizes, cfg.ops, cfg.scenarios) == (
        3, ["none", "100mbit"], [8, 1 << 20], ["all_reduce"], [])
    assert _cfg(["--smoke"]).sizes == [8, 64 << 10]
    for bad in (["--rates", "fast"], ["--rates", ""], ["--ops", "barrier"], ["--world-sizes", "2"],
                ["--backends", "gloo"], ["--spot-dtypes", "int64"], ["--scenarios", "infer"], ["--device", "cuda"],
                ["--mpi"], ["--ranks-per-host", "0"]):
        with pytest.raises(BadOption):
            _cfg(bad)
    with pytest.raises(BadOption):
        hosts.config_from_args(cli.build_parser().parse_args(["--hosts", "1"]))
    assert hosts.parse_rate("1gbit") == 1e9 and hosts.parse_rate("100mbit") == 1e8 and hosts.parse_rate("none") is None
    with pytest.raises(SystemExit):  # --rates without --hosts
        cli.main(["--rates", "1gbit"])


@pytest.mark.timeout(30)
def test_link_bound():
    meta = {"hosts": 2, "ranks_per_host": 2}
    mib64 = 64 << 20
    rows = [{"rate": "1gbit", "op": "all_reduce", "size_bytes": mib64, "time_us": 590e3, "time_max_us": 600e3},
            {"rate": "10gbit", "op": "all_gather_into_tensor", "size_bytes": mib64, "time_us": None},
            {"rate": "none", "op": "all_reduce", "size_bytes": mib64, "time_us": 100e3, "time_max_us": 100e3},
            {"rate": "1gbit", "op": "ddp_step", "size_bytes": mib64, "time_us": 1e6, "time_max_us": 1e6}]
    hosts_report.add_bounds(rows, meta)
    # 2(H-1)/H * N * 8 / R = 64 MiB * 8 / 1e9 s = 536.9 ms
    assert rows[0]["link_bound_us"] == pytest.approx(mib64 * 8 / 1e9 * 1e6)
    assert rows[0]["bound_pct"] == pytest.approx(100 * 536.870912 / 600)  # against the slowest rank
    assert rows[1]["link_bound_us"] == pytest.approx(mib64 / 2 * 8 / 1e10 * 1e6) and rows[1]["bound_pct"] is None
    assert rows[2]["link_bound_us"] is None and rows[3]["link_bound_us"] is None
    assert hosts_report.link_bytes("all_reduce", 300, 3, 2) == pytest.approx(400)
    assert hosts_report.link_bytes("all_to_all_single", 300, 3, 2) == pytest.approx(400)


@pytest.mark.timeout(30)
def test_hosts_refuses_without_root(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["--hosts", "2", "--smoke"]) == 1
    assert "root" in capsys.readouterr().err


@pytest.mark.timeout(90)
def test_hosts_smoke_run(tmp_path):
    ok, why = _hosts_available()
    if not ok:
        pytest.skip(why)
    out = tmp_path / "out"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(REPO, "python"), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "godist.bench", "--hosts", "2", "--ranks-per-host", "2", "--rates", "none", "--smoke",
           "--sizes", "8,4K", "--timeout", "60", "--out", str(out)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=80)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        pytest.fail(f"the smoke run did not finish in 80 s\nstdout:\n{stdout}\nstderr:\n{stderr}")
    assert p.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}"
    for name in ("results.csv", "results.md", "meta.json", "results.png"):
        assert (out / name).is_file(), name
    meta = json.loads((out / "meta.json").read_text())
    topo = meta["per_rate"]["none"]["topology"]
    assert topo["hosts"] == [[0, 1], [2, 3]] and topo["offload"] == "shm+tcp", topo
    assert meta["per_rate"]["none"]["topology_agrees"] and meta["command"].startswith("python -m godist.bench --hosts")
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    by = {}
    for r in rows:
        assert r["rate"] == "none" and r["world_size"] == "4"
        assert r["status"] == "ok" and float(r["time_us"]) > 0 and r["wrong"] == "0", r
        by.setdefault((r["op"], r["nominal_bytes"]), {})[r["backend"]] = r
    ddp = [k for k in by if k[0] == "ddp_step"]
    assert len(ddp) == 1, sorted(by)
    assert set(by) - set(ddp) == {(op, str(s)) for op in hosts.HOSTS_OPS for s in (8, 4096)}, sorted(by)
    for cell in by.values():
        assert set(cell) == {"godist", "gloo"}
        assert cell["godist"]["transport"] == "shm+tcp" and cell["gloo"]["transport"] == "tcp"
    md = (out / "results.md").read_text()
    assert "shm+tcp" in md and "t_bound = 2(H-1)/H * N * 8 / R" in md and "## Rate none" in md
    assert "all_reduce" in stdout
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    assert f"{hosts.PREFIX}{p.pid}x" not in left, left
