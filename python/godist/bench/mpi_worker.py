"""What every rank of ``--mpi`` runs (see ``mpi.py``): ``worker.RankBench``'s
calibration and timed blocks over three groups, with the default godist
group as the harness and each godist group's result checked against gloo's
on the same inputs."""

from __future__ import annotations

import datetime
import os
import sys
import time

from . import machine
from .cells import CellData, Variant
from .config import MPI_GROUPS, human_bytes
from .mpi_launch import init_default, mpi_description
from .worker import RankBench, error_text


def mismatches_vs(data: CellData, ref) -> int:
    """Elements of data's outputs that differ from ref (gloo's outputs of the
    same cell, one tensor per piece): exact for data movement, within twice
    the cell's reduction tolerance for floating reductions (both results may
    be off by it)."""
    bad = 0
    for (got, lo, scale, shift), want in zip(data.pieces(), ref):
        n_bad = got.numel() - int((got == want).sum())
        if n_bad and data.rtol:
            mag = data.base(lo, got.numel()).abs().mul_(scale).add_(abs(shift))
            n_bad = int((~((got - want).abs() <= mag.mul_(2 * data.rtol))).sum())
        bad += n_bad
    return bad


class MpiRankBench(RankBench):
    def __init__(self, cfg, impl: str, rank: int, size: int, local: int):  # noqa: D107 - no super().__init__
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.rank, self.P, self.cfg, self.q = rank, size, cfg, None
        self._base_cache = {}
        self.rows = []
        self._table = None
        timeout = datetime.timedelta(seconds=cfg.op_timeout_s)
        t = time.perf_counter()
        how = init_default(timeout)
        setup = {"init_process_group(godist)": time.perf_counter() - t}
        if dist.get_rank() != rank or dist.get_world_size() != size:
            raise RuntimeError(f"the default group has rank {dist.get_rank()} of {dist.get_world_size()}, the "
                               f"launcher says {rank} of {size}")
        self.groups = {"godist": dist.group.WORLD}
        # godist over MPI: GODIST_TRANSPORT=mpi only while this group is made.
        mpi_err = ""
        old = os.environ.get("GODIST_TRANSPORT")
        os.environ["GODIST_TRANSPORT"] = "mpi"
        t = time.perf_counter()
        try:
            self.groups["godist-mpi"] = dist.new_group(backend="godist", timeout=timeout)
            setup["new_group(godist, GODIST_TRANSPORT=mpi)"] = time.perf_counter() - t
        except Exception as e:  # noqa: BLE001 - reported as the column's reason
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            mpi_err = f"GODIST_TRANSPORT=mpi refused: {type(e).__name__}: {first}"[:300]
        finally:
            if old is None:
                os.environ.pop("GODIST_TRANSPORT", None)
            else:
                os.environ["GODIST_TRANSPORT"] = old
        # Every rank must agree, or the MPI group is left out everywhere.
        if min(self.agree([int("godist-mpi" in self.groups)], dist.ReduceOp.MIN)) == 0 and not mpi_err:
            mpi_err = "GODIST_TRANSPORT=mpi refused on another rank"
        if mpi_err:
            self.groups.pop("godist-mpi", None)
        t = time.perf_counter()
        self.groups["gloo"] = dist.new_group(backend="gloo", timeout=timeout)
        setup["new_group(gloo)"] = time.perf_counter() - t
        self.backends = [b for b in MPI_GROUPS if b in self.groups]
        self.mpi_error = mpi_err
        v = self.gather_setup(setup, dist.group.WORLD)
        self.setup_times = {k: float(v[:, i].max()) for i, k in enumerate(setup)}
        self.oversubscribed = False
        self.header, self.mpi_text, self.group_status = [], "", {}
        if rank == 0:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
            self.oversubscribed = bool(cores) and local > cores
            self.mpi_text = mpi_description(impl)
            self.group_status = {
                "godist": f"ok (default group, {how}; transport {self.transport})",
                "godist-mpi": "ok (GODIST_TRANSPORT=mpi)" if not mpi_err else f"unavailable: {mpi_err}",
                "gloo": "ok",
            }
            m = machine.info()
            self.header = machine.header_lines(m) + [
                f"MPI:     {self.mpi_text}",
                f"ranks:   {size} ({local} on this host, {cores} cores available here)" + (
                    "; ranks outnumber cores: MPI's busy polling takes cores the other ranks need, timings of "
                    "the MPI column are pessimistic" if self.oversubscribed else "; ranks do not outnumber cores"),
                *(f"group:   {k}: {s}" for k, s in self.group_status.items()),
                "env:     " + ", ".join(f"{k}={os.environ[k]}" for k in
                                        ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME", "GODIST_TRANSPORT")
                                        if k in os.environ),
                f"run:     mode {cfg.mode}; ops {', '.join(cfg.ops)}; sizes "
                f"{', '.join(human_bytes(s) for s in cfg.sizes)}; repeats {cfg.repeats}; block target "
                f"{cfg.target_s * 1e3:g} ms; interleaved {'-'.join(self._letters())}",
            ]
            print("\n".join(self.header), file=sys.stderr, flush=True)

    def _letters(self):
        a = "ABC"[:len(self.backends)]
        return [a, a[::-1]]

    # ----- rank 0 keeps the rows and prints them as they come ---------------
    def send(self, kind, payload):
        if kind != "cell" or self.rank != 0:
            return
        from .mpi_report import MpiTable, finish_rows

        payload = finish_rows(payload, self.transport)
        self.rows.extend(payload)
        if self._table is None:
            self._table = MpiTable()
        print("\n".join(self._table.lines(payload)), flush=True)

    def note(self, msg: str):
        if self.rank == 0:
            print(msg, file=sys.stderr, flush=True)

    # ----- cells -------------------------------------------------------------
    def check(self, data: CellData, variants):
        """gloo first on fresh inputs (checked against the expectation), then
        each other group on the same fresh inputs, compared with gloo's
        result; a variant that raised on any rank is an error everywhere."""
        live = sorted((v for v in variants if v.status == "ok"), key=lambda v: v.backend != "gloo")
        raised, ref = [], None
        for v in live:
            data.reset()
            t = time.perf_counter()
            try:
                v.fn()
                v.est = time.perf_counter() - t
                if v.backend == "gloo":
                    v.wrong = data.mismatches()
                    ref = [p[0].clone() for p in data.pieces()]
                else:
                    v.wrong = mismatches_vs(data, ref) if ref is not None else data.mismatches()
                raised.append(0)
            except Exception as e:  # noqa: BLE001 - reported in the row
                v.error = error_text(e)
                raised.append(1)
        self.mark_raised(live, raised)

    def run_cell(self, op: str, dtype: str, nominal: int):
        data = CellData(self.torch, op, dtype, nominal, self.rank, self.P, self._base_cache)
        variants = []
        for b in MPI_GROUPS:
            if b in self.groups:
                variants.append(Variant(b, self.groups[b], data.fn(self.dist, self.groups[b])))
            else:
                v = Variant(b, None, None)
                v.status, v.error = "unavailable", self.mpi_error
                variants.append(v)
        self.check(data, variants)
        self.time_cell(variants)
        self.emit(op, dtype, nominal, data.size, data.count, variants)
        del data

    def run(self):
        from .config import cell_list

        cells = cell_list(self.cfg)
        self.note(f"{len(cells)} cells; groups {', '.join(self.backends)}")
        self.warm_start()
        for op, dtype, nominal in cells:
            self.run_cell(op, dtype, nominal)
        return self.rows

    def finish(self, code: int) -> int:
        """Every rank exits with rank 0's status; the groups are destroyed."""
        c = self.torch.tensor([code], dtype=self.torch.int64)
        self.dist.broadcast(c, src=0)
        try:
            self.dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
        return int(c[0])
