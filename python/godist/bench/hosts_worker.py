"""One rank of ``python -m godist.bench --hosts H`` (see ``hosts.py``), run
inside a simulated host as ``python -m godist.bench.hosts_worker CONFIG OUT``.

RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT come from the
environment. The default group is godist (``env://``) and is the harness
too (agreeing iteration counts, gathering numbers; never timed while a
block runs); a gloo group over the same ranks is the reference. Per cell
gloo runs first on fresh inputs and is checked against the expectation,
then godist on the same fresh inputs and is compared with gloo's result
(``mpi_worker.MpiRankBench.check``); the blocks are timed interleaved
A-B-B-A. The DDP step scenario (``scenarios.ddp``) follows the cells.

Rank 0 appends one JSON object per line to OUT: ``setup`` (topology,
process-group setup times), one ``cell`` per finished cell (its rows), then
``done``. The parent reads OUT while the ranks run and after they end.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import sys
import time
import traceback
import zlib

from . import scenarios
from .cells import CellData, Variant
from .config import Config, cell_list, scenario_list
from .mpi_worker import MpiRankBench

HOSTS_BACKENDS = ("godist", "gloo")


def config_to_json(cfg: Config) -> str:
    return json.dumps(dataclasses.asdict(cfg))


def config_from_json(text: str) -> Config:
    return Config(**json.loads(text))


class HostsRankBench(MpiRankBench):
    def __init__(self, cfg: Config, out_path: str):  # noqa: D107 - no super().__init__
        import torch
        import torch.distributed as dist

        import godist

        self.torch, self.dist = torch, dist
        self.cfg, self.q, self.out_path = cfg, None, out_path
        self._base_cache = {}
        self.rows = []
        self._table = None
        timeout = datetime.timedelta(seconds=cfg.op_timeout_s)
        t = time.perf_counter()
        dist.init_process_group("godist", timeout=timeout)
        setup = {"init_process_group(godist, env://)": time.perf_counter() - t}
        self.rank, self.P = dist.get_rank(), dist.get_world_size()
        t = time.perf_counter()
        gloo = dist.new_group(backend="gloo", timeout=timeout)
        setup["new_group(gloo)"] = time.perf_counter() - t
        self.groups = {"godist": dist.group.WORLD, "gloo": gloo}
        self.backends = list(HOSTS_BACKENDS)
        self.mpi_error = ""
        fn = getattr(godist, "topology", None)
        self.topology = fn() if fn is not None else None
        self.offload = (self.topology or {}).get("offload", "")
        v = self.gather_setup(setup, dist.group.WORLD)
        self.setup_times = {k: float(v[:, i].max()) for i, k in enumerate(setup)}
        # Every rank's view of the hosts and of the offload (rank 0 reports
        # its own, and whether the others agree).
        hosts = (self.topology or {}).get("hosts") or []
        digest = float(zlib.crc32(json.dumps(hosts).encode()))
        seen = self.gather([len(hosts), float(self.offload == "shm+tcp"), digest])
        agree = all(bool((seen[:, j] == seen[0, j]).all()) for j in range(seen.shape[1]))
        if self.rank == 0:
            self.write({"kind": "setup", "topology": self.topology, "setup": self.setup_times,
                        "transport": self.transport, "world_size": self.P, "topology_agrees": agree,
                        "hostname": os.uname().nodename})

    # ----- rank 0 writes what the parent reads -------------------------------
    def write(self, obj: dict):
        with open(self.out_path, "a") as f:
            f.write(json.dumps(obj) + "\n")

    def send(self, kind, payload):
        if kind != "cell" or self.rank != 0:
            return
        for r in payload:
            r["transport"] = (self.offload or self.transport) if r["backend"] == "godist" else "tcp"
        self.write({"kind": "cell", "rows": payload})

    def note(self, msg: str):
        if self.rank == 0:
            print(msg, file=sys.stderr, flush=True)

    # ----- cells -------------------------------------------------------------
    def run_cell(self, op: str, dtype: str, nominal: int):
        data = CellData(self.torch, op, dtype, nominal, self.rank, self.P, self._base_cache)
        variants = [Variant(b, self.groups[b], data.fn(self.dist, self.groups[b])) for b in HOSTS_BACKENDS]
        self.check(data, variants)
        self.time_cell(variants)
        self.emit(op, dtype, nominal, data.size, data.count, variants)
        del data

    def run(self):
        cells = cell_list(self.cfg)
        self.note(f"{len(cells)} cells; groups {', '.join(self.backends)}; topology {self.topology}")
        self.warm_start()
        for op, dtype, nominal in cells:
            self.run_cell(op, dtype, nominal)
        if "ddp" in scenario_list(self.cfg, self.P):
            scenarios.ddp(self)
        self.dist.barrier()
        if self.rank == 0:
            self.write({"kind": "done"})


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m godist.bench.hosts_worker CONFIG_JSON OUT_PATH (started by python -m godist.bench "
              "--hosts H)", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        cfg = config_from_json(f.read())
    try:
        import torch

        torch.set_num_threads(1)
        b = HostsRankBench(cfg, argv[1])
        b.run()
    except BaseException:  # noqa: BLE001 - the parent shows this rank's stderr
        print(f"rank {os.environ.get('RANK', '?')} failed:\n{traceback.format_exc()}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)  # peers may be stuck in a collective with us; do not wait for them
    try:
        b.dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
