"""One spawned world of the benchmark's parent (``cli.py``, ``cuda.py``):
:func:`run_world` starts P ranks (start method "spawn", a FileStore in a
temporary directory) and hands what they send to :class:`Live`, which prints
each cell's row as it comes and keeps the progress display."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time

from .config import Config, cell_list, scenario_list
from .progress import SCENARIO_LABELS, Progress, cell_label
from .table import Table


class Live:
    """What the parent does with the ranks' messages as they come: the
    table on stdout, the progress and messages on stderr."""

    def __init__(self, cfg: Config, rows: list, progress: Progress, out=None, table=None):
        self.cfg, self.rows, self.progress = cfg, rows, progress
        self.table = table if table is not None else Table(cfg.backends)
        self.out = out if out is not None else sys.stdout

    @staticmethod
    def items(cfg: Config, P: int) -> list[str]:
        """What world size P runs, in order, as the status line names it."""
        return [cell_label(*c) for c in cell_list(cfg)] + [SCENARIO_LABELS[s] for s in scenario_list(cfg, P)]

    def cell(self, P: int, rows: list):
        self.rows.extend(rows)
        self.progress.print_to(self.out, "\n".join(self.table.lines(P, rows)))
        self.progress.item_done(rows)


def run_world(P: int, cfg: Config, live: Live, errors: list, setup: dict):
    """Spawn P ranks, pass their cells and messages to ``live``; True when
    every rank finished."""
    if cfg.device == "cuda":
        from .cuda_worker import rank_main
    elif cfg.vs == "deepspeed":
        from .ds_worker import rank_main
    else:
        from .worker import rank_main

    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="godist-bench-") as d:
        q = ctx.Queue()
        procs = [ctx.Process(target=rank_main, args=(r, P, cfg, os.path.join(d, "store"), q),
                             name=f"godist-bench-rank{r}") for r in range(P)]
        for p in procs:
            p.start()
        done, failed = set(), {}
        deadline = time.monotonic() + cfg.world_timeout_s
        grace = None  # after a rank fails, the others get a little time to report
        while len(done) + len(failed) < P:
            now = time.monotonic()
            limit = min(deadline, grace) if grace else deadline
            if now >= limit:
                break
            live.progress.tick()
            try:
                kind, rank, payload = q.get(timeout=min(0.5, limit - now))
            except queue.Empty:
                if all(not p.is_alive() for p in procs):
                    try:  # drain what the dead left behind
                        kind, rank, payload = q.get(timeout=2)
                    except queue.Empty:
                        break
                else:
                    continue
            if kind == "cell":
                live.cell(P, payload)
            elif kind == "note":
                live.progress.note(payload)
            elif kind == "log":
                live.progress.message(payload)
            elif kind == "setup":
                setup[P] = payload
                live.progress.ready()
            elif kind == "done":
                done.add(rank)
            elif kind == "error":
                failed[rank] = payload
                grace = grace or time.monotonic() + 20
        missing = sorted(set(range(P)) - done - set(failed))
        for p in procs:
            p.join(timeout=30 if not (missing or failed) else 1)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
        for rank, tb in sorted(failed.items()):
            errors.append(f"P={P} rank {rank} failed:\n{tb.rstrip()}")
        if missing:
            why = "timed out" if time.monotonic() >= deadline else "stopped after another rank failed"
            errors.append(f"P={P} ranks {missing} did not finish ({why}; exit codes "
                          f"{[procs[r].exitcode for r in missing]})")
        return not failed and not missing
