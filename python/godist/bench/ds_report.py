"""The results of ``--vs deepspeed``: the live table on stdout, and
results.csv, results.md and results.png (``ds.py`` says what is measured).

One row per cell (world size, dtype, size), one column per timed thing
(``config.DS_COLUMNS``), time per op in µs, then two speed ratios (above 1
godist is faster), kept in every row of the CSV:

* godist/DeepSpeed (``ds_speedup``): t_deepspeed / t_godist, DeepSpeed's
  ``inference_all_reduce`` against godist through ``dist.all_reduce``;
* direct op/bare op (``op_speedup``): t_deepspeed-op / t_godist-op,
  ``torch.ops.deepspeed.inference_all_reduce_`` against
  ``torch.ops.godist.all_reduce_``.

The CSV's ``godist_speedup`` stays what it is in every mode, t_gloo /
t_godist. A DeepSpeed cell timed on DeepSpeed's fallback (its kernel does
not take the dtype on this CPU) is marked †, and so are its ratio; a column
that was not called says why.
"""

from __future__ import annotations

import os

from .config import DS_COLUMNS, human_bytes
from .ds_worker import DS_FALLBACK, kernel_text
from .results import CSV_COLUMNS, CSV_NAME, fmt, fmt_bw, fmt_ratio, read_csv, write_files

DS_CSV_COLUMNS = CSV_COLUMNS + ["ds_speedup", "op_speedup"]
RATIOS = (("ds_speedup", "godist/DeepSpeed"), ("op_speedup", "direct op/bare op"))
# The markdown's column heads: what each column calls.
HEADS = {
    "godist": "godist `dist.all_reduce`",
    "godist-op": "godist direct op `torch.ops.godist.all_reduce_`",
    "deepspeed": "DeepSpeed `deepspeed.comm.inference_all_reduce`",
    "deepspeed-op": "DeepSpeed bare op `torch.ops.deepspeed.inference_all_reduce_`",
    "gloo": "gloo `dist.all_reduce`",
}
# The live table's two header lines per column.
LIVE_HEADS = {"godist": ("godist", "all_reduce"), "godist-op": ("godist-op", "ops.godist"),
              "deepspeed": ("deepspeed", "inference"), "deepspeed-op": ("deepspeed-op", "ops.deepspeed"),
              "gloo": ("gloo", "all_reduce")}
W, WR = 13, 11  # widths of a time column and a ratio column
LEGEND = ("# time per op (us), median over repeats of the mean over ranks; godist/ds = t_deepspeed / t_godist, op/op = "
          "t_deepspeed-op / t_godist-op (above 1 godist is faster); †: DeepSpeed's fallback (torch all_reduce on the "
          "gloo default group: its kernel does not take this dtype on this CPU); unsupported: not called (see the "
          "report)")


def _num(x) -> bool:
    return x is not None and x != "" and x == x


def _by_column(rows) -> dict:
    return {r["backend"]: r for r in rows}


def fallback(r) -> bool:
    return r is not None and r.get("variant") == DS_FALLBACK


def cell_text(r, short: bool = False) -> str:
    """One column of a cell: its time, † for DeepSpeed's fallback, WRONG
    with the count; or its status (with why, unless ``short``)."""
    if r is None:
        return "-"
    if r["status"] != "ok":
        return r["status"] if short or not r.get("error") else r["error"]
    text = fmt(r.get("time_us"), 2 if short else 1) + ("†" if fallback(r) else "")
    if r.get("wrong"):
        text += f" WRONG({r['wrong']})" if short else f" (**WRONG: {r['wrong']}**)"
    return text


def ratio_text(rows, key: str) -> str:
    r0 = rows[0]
    v = r0.get(key)
    if not _num(v):
        return "-"
    by = _by_column(rows)
    pair = ("godist", "deepspeed") if key == "ds_speedup" else ("godist-op", "deepspeed-op")
    mark = "†" if key == "ds_speedup" and fallback(by.get("deepspeed")) else ""
    if any((by.get(c) or {}).get("wrong") for c in pair):
        mark += " (WRONG)"
    return fmt_ratio(v) + mark


class DsTable:
    """The live table: a header per world size, then one line per cell as
    soon as it is measured (``spawn.Live``'s ``table``)."""

    def __init__(self):
        self.P = None

    def lines(self, P: int, rows) -> list[str]:
        out = []
        if self.P is None:
            out.append(LEGEND)
        if P != self.P:
            self.P = P
            left = f"#{'size':>9} {'count':>10} {'type':>9}"
            out += ["", f"# all_reduce, P={P}",
                    left + "".join(f" {LIVE_HEADS[c][0]:>{W}}" for c in DS_COLUMNS)
                    + f" {'godist/ds':>{WR}} {'op/op':>{WR}}",
                    f"#{'(B)':>9} {'(elements)':>10} {'':>9}" + "".join(f" {LIVE_HEADS[c][1]:>{W}}"
                                                                          for c in DS_COLUMNS)
                    + f" {'(speed)':>{WR}} {'(speed)':>{WR}}"]
        r0, by = rows[0], _by_column(rows)
        line = f"{int(r0['size_bytes']):>10} {int(r0['count']):>10} {r0['dtype']:>9}"
        line += "".join(f" {cell_text(by.get(c), short=True):>{W}}" for c in DS_COLUMNS)
        line += "".join(f" {ratio_text(rows, k):>{WR}}" for k, _ in RATIOS)
        out.append(line)
        return out


def _cells(rows) -> list[tuple]:
    """(P, dtype, nominal bytes) of every cell, world size first, dtypes in
    the order they ran, then size; and the rows of each."""
    cells, order = {}, []
    for r in rows:
        k = (r["world_size"], r["dtype"], r["nominal_bytes"])
        if k not in cells:
            cells[k] = []
            order.append(k)
        cells[k].append(r)
    dts = list(dict.fromkeys(k[1] for k in order))
    order.sort(key=lambda k: (k[0], dts.index(k[1]), k[2]))
    return [(k, cells[k]) for k in order]


def main_table(rows) -> list[str]:
    """The comparison as a markdown table: time per op (µs) per column and
    the two ratios."""
    head = ["P", "size", "dtype"] + [HEADS[c] + " (µs)" for c in DS_COLUMNS] + [t for _, t in RATIOS]
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(["---:", "---:", "---"] + ["---:"] * (len(head) - 3))
           + " |"]
    for (P, dt, nb), rs in _cells(rows):
        by = _by_column(rs)
        vals = [str(P), human_bytes(nb), dt] + [cell_text(by.get(c)) for c in DS_COLUMNS]
        vals += [ratio_text(rs, k) for k, _ in RATIOS]
        out.append("| " + " | ".join(vals) + " |")
    return out


def detail_table(rows) -> list[str]:
    """Every column of every cell with the nccl-tests numbers, in the order
    of the main table."""
    head = ["P", "size", "count", "dtype", "column", "time (µs)", "algbw (GB/s)", "busbw (GB/s)", "p50 (µs)",
            "p95 (µs)", "CPU/op (µs)", "n", "#wrong", "transport"]
    out = ["| " + " | ".join(head) + " |",
           "| " + " | ".join("---" if h in ("dtype", "column", "transport") else "---:" for h in head) + " |"]
    for (P, dt, nb), rs in _cells(rows):
        by = _by_column(rs)
        for c in DS_COLUMNS:
            r = by.get(c)
            if r is None:
                continue
            name = c + (f" ({r['variant']})" if r.get("variant") not in (None, "", "native") else "")
            if r["status"] != "ok":
                name += f" ({r['status']})"
            vals = [P, human_bytes(int(r["size_bytes"])), r["count"], dt, name, fmt(r.get("time_us")),
                    fmt_bw(r.get("algbw_GBps")), fmt_bw(r.get("busbw_GBps")), fmt(r.get("p50_us")),
                    fmt(r.get("p95_us")), fmt(r.get("cpu_us_per_op"))]
            vals += [r.get("n_iters", ""), r.get("wrong", 0), r.get("transport", "")] if r["status"] == "ok" else \
                ["-", "-" if r["status"] == "unsupported" else r.get("wrong", "-"), "-"]
            out.append("| " + " | ".join(str(v) for v in vals) + " |")
    for (P, dt, nb), rs in _cells(rows):
        for r in rs:
            if r["status"] == "error":
                out.append(f"\n{r['backend']}, P={P}, {dt}, {human_bytes(nb)}: `{r.get('error', '')}`")
    return out


def write_markdown(rows, meta, path, png_name):
    lines = ["# godist beside DeepSpeed's CPU all-reduce kernel (and gloo)", "",
             f"Command: `{meta['command']}`  ",
             f"Mode: {meta['mode']}; {meta['when']}; wall time {meta['wall_s']:.0f} s; exit status {meta['exit']}.",
             "", "```", *meta["header"], f"loadavg: {meta['loadavg_end']} (at end)", "```", ""]
    setup = meta.get("setup") or {}
    if setup:
        lines += ["; ".join(f"P={p}: {kernel_text(s['deepspeed'])}" for p, s in sorted(setup.items())
                            if s.get("deepspeed")) + ".", "",
                  "godist transport (as reported by the godist group): " + ", ".join(
                      f"P={p}: {s.get('godist_transport', '?')}" for p, s in sorted(setup.items())) + ".", "",
                  "Process-group setup (max over ranks, s): " + "; ".join(
                      f"P={p}: " + ", ".join(f"{k} {v:.3f}" for k, v in s.get("times", {}).items())
                      for p, s in sorted(setup.items())), ""]
    if meta.get("errors"):
        lines += ["**Errors:**", "", "```", *meta["errors"], "```", ""]
    lines += ["## all_reduce, time per op (µs)", "",
              "Median over repeats of the mean over ranks; every column was checked on every rank against the "
              "expected sum before it was timed (a mismatch shows as WRONG with the count of wrong elements). "
              "godist/DeepSpeed = t_DeepSpeed inference_all_reduce / t_godist dist.all_reduce; direct op/bare op = "
              "t_torch.ops.deepspeed / t_torch.ops.godist: above 1 godist is faster. † = DeepSpeed's "
              "inference_all_reduce timed on its fallback, torch.distributed.all_reduce on the default (gloo) "
              "group: its kernel does not take this dtype on this CPU (bfloat16 and float16 need avx512bw).", "",
              *main_table(rows), ""]
    if png_name:
        lines += [f"![godist beside DeepSpeed]({png_name})", ""]
    lines += ["## Per column (nccl-tests columns)", "",
              "algbw = size / time (decimal GB/s), busbw = algbw x 2(P-1)/P; p50/p95: per-op latencies inside the "
              "timed blocks, mean over ranks; CPU/op = getrusage user+system time of the whole process per op; n = "
              "ops per timed block; #wrong: elements that differed from the expected sum, over all ranks.", "",
              *detail_table(rows), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def plot(rows, path) -> bool:
    """One panel per world size (rows) and dtype (columns): time per op
    against size, one line per column."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plot import _size_ticks, _time_axis

    Ps = list(dict.fromkeys(r["world_size"] for r in rows))
    dts = list(dict.fromkeys(r["dtype"] for r in rows))
    if not rows:
        return False
    fig, axes = plt.subplots(len(Ps), len(dts), figsize=(5.2 * len(dts), 4.0 * len(Ps)), squeeze=False)
    styles = {"godist": ("tab:blue", "-", "o"), "godist-op": ("tab:cyan", "-", "D"),
              "deepspeed": ("tab:red", "--", "s"), "deepspeed-op": ("tab:orange", "--", "^"),
              "gloo": ("tab:gray", ":", "v")}
    for ax, (P, dt) in ((axes[i][j], (P, dt)) for i, P in enumerate(Ps) for j, dt in enumerate(dts)):
        times = []
        for c in DS_COLUMNS:
            line = sorted((r for r in rows if r["world_size"] == P and r["dtype"] == dt and r["backend"] == c
                           and r["status"] == "ok" and r.get("time_us")), key=lambda r: r["size_bytes"])
            if not line:
                continue
            color, ls, marker = styles[c]
            label = c + (" (fallback)" if any(fallback(r) for r in line) else "")
            ax.plot([r["size_bytes"] for r in line], [r["time_us"] for r in line], ls=ls, marker=marker, ms=4.5,
                    lw=1.6, color=color, label=label)
            times += [r["time_us"] for r in line]
        ax.set(xscale="log", yscale="log")
        ax.set_title(f"all_reduce {dt}, P={P}", fontsize=11, fontweight="bold", loc="left")
        ax.set_ylabel("time per op", fontsize=9)
        ax.set_xlabel("size", fontsize=9)
        ax.grid(True, which="major", alpha=0.35)
        _time_axis(ax, times)
        _size_ticks(ax, [r["size_bytes"] for r in rows if r["size_bytes"]] or [1])
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_all(rows, meta, out_dir, want_plot=True, write_data=True):
    paths, png = write_files(rows, meta, out_dir, DS_CSV_COLUMNS, lambda p: plot(rows, p), want_plot, write_data)
    write_markdown(rows, meta, paths["md"], png)
    return paths


def render(out_dir, meta, want_plot=True):
    """Rewrite results.md (and the PNG) of a ``--vs deepspeed`` run from its
    CSV and meta."""
    rows = read_csv(os.path.join(out_dir, CSV_NAME))
    for r in rows:
        for k, _ in RATIOS:
            r[k] = float(r[k]) if r.get(k) not in (None, "") else None
    return write_all(rows, meta, out_dir, want_plot, write_data=False)
