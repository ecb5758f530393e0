"""The result table printed to stdout while the run goes, in the layout of
nccl-tests: a header per world size and operation, then one row per cell as
soon as it is measured, with one group of columns (time, algbw, busbw,
#wrong) per benchmarked backend and, when both ran, godist's speed relative
to gloo (t_gloo / t_godist).

::

    # all_reduce, P=2
    #                                                  godist                                      gloo
    #       size        count      type  redop        time    algbw    busbw  #wrong        time    algbw ...
    #        (B)   (elements)                         (us)   (GB/s)   (GB/s)                (us)   (GB/s) ...
               8            2   float32    sum       23.81     0.00     0.00       0     2461.20     0.00 ...
"""

from __future__ import annotations

import math

from .config import BACKENDS

LEFT = (("size", "(B)", 12), ("count", "(elements)", 12), ("type", "", 9), ("redop", "", 6))
GROUP = (("time", "(us)", 11), ("algbw", "(GB/s)", 7), ("busbw", "(GB/s)", 7), ("#wrong", "", 6))
RATIO = ("godist/gloo", "(speed)", 11)  # with another reference backend, its name for gloo's

PREAMBLE = ("# time: per op, median over repeats of the mean over ranks; algbw = size / time and busbw = algbw x "
            "the nccl-tests factor, in GB/s (1e9 B/s)")
RATIO_NOTE = "# godist/gloo: t_gloo / t_godist, above 1 godist is faster"

OP_NOTES = {
    "send_recv": "ping-pong between rank pairs (0,1), (2,3), ...; time is half the round trip",
    "barrier": "no data: size and count 0",
    "all_gather_into_tensor": "size is the total output",
    "reduce_scatter_tensor": "size is the total input",
    "all_to_all_single": "size is the whole input",
}
SCENARIO_UNITS = {"ddp_step": "time per step", "infer_loop": "time per op", "async_loop": "time per op",
                  "recreate": "time per group"}


def _num(x, fmt: str) -> str:
    if x is None or x == "" or (isinstance(x, float) and math.isnan(x)):
        return "N/A"
    return format(x, fmt)


class Table:
    """Formats the rows of each finished cell; ``backends`` are the
    benchmarked ones (the column groups, in this order)."""

    def __init__(self, backends, ref: str = "gloo"):
        self.backends = [b for b in ("godist", ref) if b in backends] if ref != "gloo" else \
            [b for b in BACKENDS if b in backends]
        self.ref = ref
        self.ratio = len(self.backends) == 2
        self.key = None
        self.started = False

    def _line(self, cells) -> str:
        return " ".join(cells).rstrip()

    def header(self, P: int, op: str, note: str = "") -> list[str]:
        title = f"# {op}, P={P}" + (f": {note}" if note else "")
        widths = [w for _, _, w in LEFT] + [w for _, _, w in GROUP] * len(self.backends)
        names = [n for n, _, _ in LEFT] + [n for n, _, _ in GROUP] * len(self.backends)
        units = [u for _, u, _ in LEFT] + [u for _, u, _ in GROUP] * len(self.backends)
        if self.ratio:
            widths.append(RATIO[2])
            names.append(RATIO[0].replace("gloo", self.ref))
            units.append(RATIO[1])
        # Backend names centred over their groups, as nccl-tests does.
        left = sum(w for _, _, w in LEFT) + len(LEFT)
        group_w = sum(w for _, _, w in GROUP) + len(GROUP)
        groups = "".join(f"{b:^{group_w}}" for b in self.backends)
        lines = [title, ("#" + (" " * (left - 1)) + groups).rstrip()]
        for labels in (names, units):
            cells = [f"{t:>{w}}" for t, w in zip(labels, widths)]
            cells[0] = "#" + cells[0][1:]
            lines.append(self._line(cells))
        return lines

    def _group(self, rows, backend):
        """The columns of one backend: its native op, else the fallback that
        was timed in its place (with a note)."""
        mine = [r for r in rows if r["backend"] == backend]
        native = next((r for r in mine if r["variant"] == "native" or r["op"] in SCENARIO_UNITS), None)
        note = ""
        pick = native
        if pick is None or pick["status"] != "ok":
            fb = next((r for r in mine if r is not native and r["status"] == "ok"), None)
            if fb is not None:
                note = f"{backend}: {fb['variant']}" + (f" ({native['status']} natively)" if native else "")
                pick = fb
        if pick is None:
            return ["-"] * len(GROUP), note
        w = [w for _, _, w in GROUP]
        wrong = pick.get("wrong")
        wrong = "N/A" if wrong is None or wrong == "" or int(wrong) < 0 else str(int(wrong))
        if pick["status"] != "ok":
            return [f"{pick['status']:>{w[0]}}", f"{'N/A':>{w[1]}}", f"{'N/A':>{w[2]}}", f"{wrong:>{w[3]}}"], note
        return [f"{_num(pick.get('time_us'), '.2f'):>{w[0]}}", f"{_num(pick.get('algbw_GBps'), '.2f'):>{w[1]}}",
                f"{_num(pick.get('busbw_GBps'), '.2f'):>{w[2]}}", f"{wrong:>{w[3]}}"], note

    def row(self, rows) -> str:
        r0 = rows[0]
        w = [w for _, _, w in LEFT]
        cells = [f"{int(r0['size_bytes']):>{w[0]}}", f"{int(r0['count']):>{w[1]}}", f"{r0['dtype']:>{w[2]}}",
                 f"{r0['redop']:>{w[3]}}"]
        notes = []
        for b in self.backends:
            group, note = self._group(rows, b)
            cells += group
            if note:
                notes.append(note)
        if self.ratio:
            sp = next((r.get("godist_speedup") for r in rows if r.get("godist_speedup")), None)
            cells.append(f"{_num(sp, '.2f'):>{RATIO[2]}}")
        line = self._line(cells)
        if notes:
            line += "   # " + "; ".join(notes)
        return line

    def lines(self, P: int, rows) -> list[str]:
        """The lines to print for one finished cell: a header when the world
        size or the operation changed, then its row."""
        out = []
        if not self.started:
            out += [PREAMBLE] + ([RATIO_NOTE.replace("gloo", self.ref)] if self.ratio else [])
            self.started = True
        op = rows[0]["op"]
        if self.key != (P, op):
            self.key = (P, op)
            if op in SCENARIO_UNITS:
                what = rows[0]["variant"].split(";")[0]
                note = f"{what} ({SCENARIO_UNITS[op]})"
            else:
                note = OP_NOTES.get(op, "")
            out += [""] + self.header(P, op, note)
        out.append(self.row(rows))
        return out
