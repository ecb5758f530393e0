"""``python -m godist.bench --hosts H``: godist against gloo on H simulated
hosts (``godist.hosts``: network namespaces joined by a bridge, each host's
link shaped by tbf to a rate in both directions), ``--ranks-per-host L``
ranks on each.

For each rate of ``--rates`` (default 1gbit,10gbit; ``none``: unshaped
links) the parent makes the hosts, starts H*L ranks in them
(``hosts_worker.py``; rank r on host r // L, every rank's store on host 0),
prints each cell's row as rank 0 writes it, and kills every rank when the
rate runs past ``--timeout`` or when one rank fails (the others get a few
seconds to say why). The hosts are torn down before the next rate.

Each rank: the default group on godist (env://), a gloo group over the same
ranks, ``godist.topology()`` (rank 0's goes into the report); the float32
cells of the five collectives, godist checked against gloo's result on the
same inputs, timed interleaved A-B-B-A; then the DDP step scenario.

Results (``hosts_report.py``): results.csv, results.md, meta.json and
results.png in ``--out`` (default docs/perf-hosts). Exit status: 0 when every
rate ran every cell and none had a wrong element; 1 otherwise, or where
simulated hosts cannot be made (not root, no namespaces); 2 for bad options.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from . import machine, results
from .config import HOSTS_OPS, MALLOC_ENV, Config, human_bytes, parse_rate
from .options import BadOption, check_timing, csv_list, parse_ops, set_process_options, set_sizes
from .table import Table

DEFAULT_RATES = ("1gbit", "10gbit")
PORT = 29500  # every set of hosts has a network of its own
PREFIX = "gdbench"
GRACE_S = 20  # after a rank fails, how long the others get to report


def config_from_args(a) -> Config:
    """The hosts mode's Config, with ``hosts``, ``ranks_per_host`` and
    ``rates`` on it; raises options.BadOption."""
    if a.device != "cpu" or a.mpi:
        raise BadOption("--hosts times CPU tensors in ranks it starts itself: leave out --device and --mpi")
    if a.hosts < 2:
        raise BadOption("--hosts: at least 2 hosts")
    if a.ranks_per_host is not None and a.ranks_per_host < 1:
        raise BadOption("--ranks-per-host: at least 1")
    for name, why in (("world_sizes", "--world-sizes: with --hosts the ranks are --hosts x --ranks-per-host"),
                      ("backends", "--backends: --hosts always times godist and gloo"),
                      ("spot_dtypes", "--spot-dtypes: --hosts times float32 only"),
                      ("scenario_world_sizes", "--scenario-world-sizes: --hosts has one world size")):
        if getattr(a, name):
            raise BadOption(why)
    # Five blocks per cell: on a shaped link a large cell's block is one op.
    cfg = Config(mode="hosts", world_sizes=[], ops=list(HOSTS_OPS), spot_dtypes=[], scenarios=["ddp"], repeats=5)
    lo, hi, step = 8, 64 << 20, 4
    if a.quick:
        cfg.mode, cfg.target_s, cfg.repeats, cfg.warmup_max = "hosts quick", 0.05, 3, 3
        cfg.sizes = [8, 512, 32 << 10, 2 << 20, 64 << 20]
        cfg.ddp_steps, cfg.ddp_repeats = 2, 3
        cfg.world_timeout_s = 900
    elif a.smoke:
        cfg.mode, cfg.target_s, cfg.repeats, cfg.warmup_max = "hosts smoke", 0.004, 2, 1
        cfg.sizes = [8, 64 << 10]
        cfg.ddp_dim, cfg.ddp_layers, cfg.ddp_batch, cfg.ddp_bucket_mb, cfg.ddp_steps = 256, 4, 4, 0.25, 1
        cfg.ddp_repeats = 2
        cfg.world_timeout_s = 240
        cfg.op_timeout_s = 60
    if a.ops is not None:
        cfg.ops = parse_ops(a.ops, HOSTS_OPS, "--ops: {op} is not timed with --hosts; choose from {choices}")
    set_sizes(a, cfg, lo, hi, step)
    for name in ("repeats", "max_iters", "ddp_steps", "ddp_repeats"):
        if getattr(a, name) is not None:
            setattr(cfg, name, getattr(a, name))
    if a.target_ms is not None:
        cfg.target_s = a.target_ms / 1e3
    if a.scenarios is not None:
        sc = [x for x in csv_list(a.scenarios) if x != "none"]
        if any(x != "ddp" for x in sc):
            raise BadOption("--scenarios: --hosts runs ddp or none")
        cfg.scenarios = sc
    set_process_options(a, cfg)
    check_timing(cfg)
    if cfg.max_iters < 1:
        raise BadOption("--max-iters must be at least 1")
    rates = list(dict.fromkeys(x.lower() for x in csv_list(",".join(DEFAULT_RATES) if a.rates is None else a.rates)))
    if not rates:
        raise BadOption("--rates: no rate given")
    for r in rates:
        try:
            parse_rate(r)
        except ValueError as e:
            raise BadOption(f"--rates: {e}") from None
    cfg.hosts, cfg.ranks_per_host, cfg.rates = a.hosts, a.ranks_per_host or 2, rates
    cfg.world_sizes = [cfg.hosts * cfg.ranks_per_host]
    return cfg


def rank_env(cfg: Config, h, host: int, rank: int, local: int, pythonpath: str) -> dict:
    """The environment of rank ``rank`` on ``host``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH", "")) if p)
    env.update(RANK=str(rank), WORLD_SIZE=str(cfg.hosts * cfg.ranks_per_host), LOCAL_RANK=str(local),
               LOCAL_WORLD_SIZE=str(cfg.ranks_per_host), MASTER_ADDR=h.addr(0), MASTER_PORT=str(PORT),
               GLOO_SOCKET_IFNAME=h.ifname(host), OMP_NUM_THREADS="1")
    if cfg.tcp_only:
        env["GODIST_TRANSPORT"] = "tcp"
    if cfg.pin_malloc:
        for k, v in MALLOC_ENV.items():
            env.setdefault(k, v)
    return env


class RankOutput:
    """Rank 0's results file, read as it grows: the parent prints each
    finished cell's row."""

    def __init__(self, path: str, P: int, out=None):
        self.path, self.P, self.pos = path, P, 0
        self.setup, self.rows, self.done = None, [], False
        self.table = Table(["godist", "gloo"])
        self.out = out if out is not None else sys.stdout

    def poll(self, rate: str):
        try:
            with open(self.path) as f:
                f.seek(self.pos)
                text = f.read()
        except FileNotFoundError:
            return
        end = text.rfind("\n") + 1  # a line still being written waits
        self.pos += len(text[:end].encode())
        for line in text[:end].splitlines():
            msg = json.loads(line)
            if msg["kind"] == "setup":
                self.setup = msg
                t = msg.get("topology") or {}
                print(f"# rate {rate}: topology hosts {t.get('hosts')}, offload {t.get('offload')!r}", file=self.out,
                      flush=True)
            elif msg["kind"] == "cell":
                for r in msg["rows"]:
                    r["rate"] = rate
                self.rows.extend(msg["rows"])
                print("\n".join(self.table.lines(self.P, msg["rows"])), file=self.out, flush=True)
            elif msg["kind"] == "done":
                self.done = True


def _tail(path: str, n: int = 4000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def run_rate(cfg: Config, rate: str, tmp: str, errors: list) -> RankOutput:
    """Make the hosts at ``rate``, run every rank to its end (or kill them
    all), tear the hosts down; rank 0's output."""
    from godist import hosts as simhosts

    import godist

    pythonpath = os.path.dirname(os.path.dirname(os.path.abspath(godist.__file__)))
    d = os.path.join(tmp, rate)
    os.makedirs(d)
    cfg_path, out_path = os.path.join(d, "config.json"), os.path.join(d, "rank0.jsonl")
    from .hosts_worker import config_to_json

    with open(cfg_path, "w") as f:
        f.write(config_to_json(cfg))
    P, L = cfg.hosts * cfg.ranks_per_host, cfg.ranks_per_host
    res = RankOutput(out_path, P)
    procs, logs = [], []
    with simhosts.Hosts(cfg.hosts, rate=None if rate == "none" else rate, prefix=PREFIX) as h:
        try:
            for rank in range(P):
                host, local = divmod(rank, L)
                log = os.path.join(d, f"rank{rank}.log")
                logs.append(log)
                with open(log, "w") as lf:
                    procs.append(h.popen(host, [sys.executable, "-m", "godist.bench.hosts_worker", cfg_path, out_path],
                                         env=rank_env(cfg, h, host, rank, local, pythonpath), stdout=lf,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            deadline = time.monotonic() + cfg.world_timeout_s
            grace = None
            while True:
                res.poll(rate)
                codes = [p.poll() for p in procs]
                if all(c is not None for c in codes):
                    break
                now = time.monotonic()
                if grace is None and any(c not in (None, 0) for c in codes):
                    grace = now + GRACE_S
                if now >= deadline or (grace is not None and now >= grace):
                    why = "timed out" if now >= deadline else "stopped after another rank failed"
                    errors.append(f"rate {rate}: ranks {[r for r, c in enumerate(codes) if c is None]} did not "
                                  f"finish ({why}; limit {cfg.world_timeout_s:g} s); killed")
                    break
                time.sleep(0.25)
        finally:
            h.kill()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
    res.poll(rate)
    for rank, p in enumerate(procs):
        if p.returncode not in (0, None, -9):
            errors.append(f"rate {rate}: rank {rank} exited {p.returncode}:\n{_tail(logs[rank]).rstrip()}")
    if not res.done and not errors:
        errors.append(f"rate {rate}: rank 0 did not finish its report:\n{_tail(logs[0]).rstrip()}")
    return res


def main(a, parser, argv=None) -> int:

    try:
        cfg = config_from_args(a)
    except BadOption as e:
        parser.error(str(e))
    if os.geteuid() != 0:
        print("--hosts: simulated hosts are network namespaces, which need root: run it as root (sudo)",
              file=sys.stderr)
        return 1
    try:
        from godist import hosts as simhosts
    except ImportError as e:
        print(f"--hosts: godist.hosts (the simulated hosts) cannot be imported: {e}", file=sys.stderr)
        return 1
    ok, why = simhosts.available()
    if not ok:
        print(f"--hosts: simulated hosts cannot be made here: {why}", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    H, L = cfg.hosts, cfg.ranks_per_host
    m = machine.info()
    header = machine.header_lines(m) + [
        f"hosts:   {H} simulated hosts x {L} ranks (network namespaces, a veth each to one bridge; tbf at the "
        "rate on both ends of each veth); rank r on host r // L; the store and MASTER_ADDR on host 0",
        "env:     OMP_NUM_THREADS=1, GLOO_SOCKET_IFNAME=eth0" + ("" if not cfg.tcp_only else ", GODIST_TRANSPORT=tcp")
        + "".join(f", {k}={v}" for k, v in MALLOC_ENV.items() if cfg.pin_malloc),
        f"run:     mode {cfg.mode}; rates {', '.join(cfg.rates)}; P {H * L}; ops {', '.join(cfg.ops)}; sizes "
        f"{', '.join(human_bytes(s) for s in cfg.sizes)}; repeats {cfg.repeats}; block target "
        f"{cfg.target_s * 1e3:g} ms; scenarios {', '.join(cfg.scenarios) or 'none'}",
    ]
    results.header_end(header, a.note, m["nproc"])
    print("\n".join(header), file=sys.stderr, flush=True)
    rows, errors, per_rate = [], [], {}
    with tempfile.TemporaryDirectory(prefix="godist-bench-hosts-") as tmp:
        for rate in cfg.rates:
            t = time.monotonic()
            print(f"--- rate {rate}: {H} hosts x {L} ranks", file=sys.stderr, flush=True)
            res = run_rate(cfg, rate, tmp, errors)
            rows.extend(res.rows)
            setup = res.setup or {}
            per_rate[rate] = {"topology": setup.get("topology"), "topology_agrees": setup.get("topology_agrees"),
                              "setup": setup.get("setup"), "wall_s": round(time.monotonic() - t, 1),
                              "bits_per_s": parse_rate(rate), "finished": res.done}
            print(f"--- rate {rate} done in {time.monotonic() - t:.0f} s", file=sys.stderr, flush=True)
    wrong, bad, code = results.outcome(rows, errors)
    meta = results.run_meta(cfg.mode, t0, code, header, argv, hosts=H, ranks_per_host=L, rates=cfg.rates,
                            per_rate=per_rate, errors=errors, backends=["godist", "gloo"])
    from . import hosts_report

    out_dir = a.out or os.path.join("docs", "perf-hosts")
    paths = hosts_report.write_all(rows, meta, out_dir, want_plot=not a.no_plot)
    results.print_outcome(errors, wrong, bad, paths, meta,
                          lambda r: f"{r['rate']} {r['op']} {human_bytes(int(r['size_bytes']))} {r['backend']}")
    return code
