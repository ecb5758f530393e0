"""The results of ``--device cuda``: the live table (``table.Table`` with
nccl as the reference and a CPU-time ratio column), the CSV, the markdown
and the PNG (``plot.py``), in the CPU mode's layout.

Two ratios per cell, both godist against nccl:

* speed: t_nccl / t_godist (the CSV's ``godist_speedup``; above 1 godist is
  faster), as the CPU mode's godist/gloo;
* CPU time per op: issue_godist / issue_nccl (the CSV's ``issue_ratio``;
  the target is at most 1.5), for sizes up to ``issue_max_bytes``.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict

from .config import CUDA_BACKENDS, CUDA_OPS, human_bytes
from .results import CSV_COLUMNS, CSV_NAME, fmt, fmt_bw, fmt_ratio, read_csv, write_files
from .table import Table

CUDA_CSV_COLUMNS = CSV_COLUMNS + ["issue_us_per_op", "issue_ratio", "ref_backend"]
ISSUE_TARGET = 1.5
MD_COLUMNS = ["P", "size", "count", "backend", "time (µs)", "algbw (GB/s)", "busbw (GB/s)", "CPU/op (µs)",
              "CPU rusage/op (µs)", "n", "#wrong", "speed godist/nccl", "CPU godist/nccl"]


def _num(x):
    return x is not None and x != "" and not (isinstance(x, float) and math.isnan(x))


def has_ratio(meta: dict) -> bool:
    return len(meta.get("backends") or []) == len(CUDA_BACKENDS)


class CudaTable(Table):
    """The live table of the CUDA mode: the CPU mode's columns with nccl in
    gloo's place, and the CPU-time ratio godist/nccl after the speed."""

    def __init__(self, backends):
        super().__init__(backends, ref="nccl")

    def header(self, P, op, note=""):
        lines = super().header(P, op, note)
        if self.ratio:
            lines[-2] += f" {'cpu/op':>11}"
            lines[-1] += f" {'(g/n)':>11}"
        return lines

    def row(self, rows):
        line = super().row(rows)
        if self.ratio:
            x = next((r.get("issue_ratio") for r in rows if _num(r.get("issue_ratio"))), None)
            text = f"{x:11.2f}" if x is not None else f"{'-':>11}"
            head, sep, notes = line.partition("   # ")
            line = head + " " + text + (sep + notes if sep else "")
        return line


def ratio_table(rows, key="godist_speedup") -> list[str]:
    """Rows (op, size) x columns P: the speed t_nccl / t_godist (key
    godist_speedup) or the CPU time per op godist / nccl (key issue_ratio,
    bold above the target)."""
    Ps = sorted({r["world_size"] for r in rows})
    cells, order = defaultdict(dict), []
    for r in rows:
        if r["op"] == "ddp_step" or r["backend"] != "godist":
            continue
        k = (r["op"], r["nominal_bytes"])
        if k not in cells:
            order.append(k)
        v = r.get(key)
        txt = fmt_ratio(v) if _num(v) else ("-" if r["status"] == "ok" else r["status"])
        if key == "issue_ratio" and _num(v) and v > ISSUE_TARGET:
            txt = f"**{txt}**"
        if r.get("wrong"):
            txt += " (WRONG)"
        cells[k][r["world_size"]] = txt
    rank = {op: i for i, op in enumerate(CUDA_OPS)}
    order.sort(key=lambda k: (rank.get(k[0], 99), k[1]))
    if key == "issue_ratio":
        order = [k for k in order if any(t != "-" for t in cells[k].values())]
    out = ["| op | size | " + " | ".join(f"P={p}" for p in Ps) + " |",
           "| --- | ---: | " + " | ".join("---:" for _ in Ps) + " |"]
    for op, nb in order:
        out.append(f"| {op} | {human_bytes(nb)} | " + " | ".join(cells[(op, nb)].get(p, "") for p in Ps) + " |")
    return out


def _label(r):
    return r["backend"] + ("" if r["status"] == "ok" else f" ({r['status']})")


def op_tables(rows, ops, ratio=True) -> list[str]:
    cols = MD_COLUMNS if ratio else MD_COLUMNS[:-2]
    out = []
    for op in ops:
        rs = sorted((r for r in rows if r["op"] == op),
                    key=lambda r: (r["world_size"], r["nominal_bytes"], r["backend"] != "godist"))
        if not rs:
            continue
        align = ["---" if c == "backend" else "---:" for c in cols]
        out += ["", f"### {op}", "", "| " + " | ".join(cols) + " |", "| " + " | ".join(align) + " |"]
        for r in rs:
            vals = [r["world_size"], human_bytes(int(r["size_bytes"])), r["count"], _label(r), fmt(r.get("time_us")),
                    fmt_bw(r.get("algbw_GBps")), fmt_bw(r.get("busbw_GBps")), fmt(r.get("issue_us_per_op")),
                    fmt(r.get("cpu_us_per_op")), r.get("n_iters", ""), r.get("wrong", 0)]
            if ratio:
                vals += [fmt_ratio(r.get("godist_speedup")), fmt_ratio(r.get("issue_ratio"))]
            out.append("| " + " | ".join(str(v) for v in vals) + " |")
        for r in rs:
            if r.get("error"):
                out.append(f"\n{_label(r)}, P={r['world_size']}, {human_bytes(int(r['size_bytes']))}: `{r['error']}`")
    return out


def ddp_table(rows, ratio=True) -> list[str]:
    rs = sorted((r for r in rows if r["op"] == "ddp_step"), key=lambda r: (r["world_size"], r["backend"] != "godist"))
    if not rs:
        return []
    head = ["P", "backend", "model", "time per step (µs)", "CPU per step (µs)", "#wrong"] + (
        ["speed godist/nccl"] if ratio else [])
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" if h in ("backend", "model") else "---:"
                                                          for h in head) + " |"]
    for r in rs:
        vals = [r["world_size"], _label(r), r["variant"], fmt(r.get("time_us")), fmt(r.get("issue_us_per_op")),
                r.get("wrong", 0)] + ([fmt_ratio(r.get("godist_speedup"))] if ratio else [])
        out.append("| " + " | ".join(str(v) for v in vals) + " |")
    for r in rs:
        if r.get("error"):
            out.append(f"\n{_label(r)}, P={r['world_size']}: `{r['error']}`")
    return out


def write_markdown(rows, meta, path, png_name):
    ratio = has_ratio(meta)
    ran = meta.get("backends") or sorted({r["backend"] for r in rows})
    title = "# godist vs nccl on CUDA tensors, side by side" if ratio else f"# {', '.join(ran)} alone on CUDA tensors"
    lines = [title, "", f"Command: `{meta['command']}`  ",
             f"Mode: {meta['mode']}; {meta['when']}; wall time {meta['wall_s']:.0f} s; exit status {meta['exit']}.",
             "", "```", *meta["header"], f"loadavg: {meta['loadavg_end']} (at end)", "```", ""]
    if meta.get("setup"):
        lines += ["Process-group setup, first collective included (max over ranks, s): " + "; ".join(
            f"P={p}: " + ", ".join(f"{k} {v:.3f}" for k, v in s.get("times", {}).items())
            for p, s in sorted(meta["setup"].items())), ""]
    if meta.get("errors"):
        lines += ["**Errors:**", "", "```", *meta["errors"], "```", ""]
    issue_max = human_bytes(int(meta.get("issue_max_bytes", 1 << 20)))
    if ratio:
        lines += ["## godist/nccl speed", "",
                  "t_nccl / t_godist per cell (GPU time per op: synchronize around a block of n ops; median over "
                  "repeats of the mean over ranks): above 1 godist is faster.", "", *ratio_table(rows), "",
                  "## CPU time per op, godist/nccl", "",
                  f"Time from the Python call to its return, over the first {meta.get('issue_ops', 100)} ops of "
                  f"each timed block (no synchronize in between), godist / nccl, sizes up to {issue_max}. The "
                  f"target is at most {ISSUE_TARGET:g}; bold: above it.", "",
                  *ratio_table(rows, "issue_ratio"), ""]
    ddp = ddp_table(rows, ratio)
    if ddp:
        lines += ["## DDP step", "", "forward + backward + SGD step of a CUDA model, one DDP model per backend; "
                  "time per step between synchronizes.", "", *ddp, ""]
    if png_name:
        lines += [f"![godist vs nccl]({png_name})", ""]
    lines += ["## Per operation (nccl-tests columns)", "",
              "size = S of nccl-tests (all_reduce/broadcast: the buffer; all_gather: total output; reduce_scatter: "
              "total input; all_to_all: the whole input); algbw = S / time (decimal GB/s); busbw = algbw x 2(P-1)/P "
              "(all_reduce), x (P-1)/P (all_gather, reduce_scatter, all_to_all), x 1 (broadcast). CPU/op = the "
              "Python call to its return (see above); CPU rusage/op = getrusage user+system time of the whole "
              "process over the same ops (every thread). n = ops per timed block. Where ranks share a GPU "
              "(header: ranks), the numbers measure time-slicing of one GPU between processes, not a GPU link.",
              *op_tables(rows, CUDA_OPS, ratio), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def write_all(rows, meta, out_dir, want_plot=True, write_data=True):
    def draw(path):
        from .plot import plot

        return plot(rows, path, ratio=has_ratio(meta), ref="nccl")

    paths, png = write_files(rows, meta, out_dir, CUDA_CSV_COLUMNS, draw, want_plot, write_data)
    write_markdown(rows, meta, paths["md"], png)
    return paths


def render(out_dir, meta, want_plot=True):
    """Rewrite results.md (and the PNG) of a CUDA run from its CSV and meta."""
    rows = read_csv(os.path.join(out_dir, CSV_NAME))
    for r in rows:
        for k in ("issue_us_per_op", "issue_ratio"):
            r[k] = float(r[k]) if r.get(k) not in (None, "") else None
    return write_all(rows, meta, out_dir, want_plot, write_data=False)
