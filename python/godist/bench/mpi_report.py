"""The results of ``--mpi``: the live table, the CSV, the markdown and the
PNG, in the CPU mode's layout with three groups side by side.

Columns per cell (operation, float32 size): time per op of godist on its own
transports (the default group: shared memory on one host, TCP otherwise),
of godist over MPI (GODIST_TRANSPORT=mpi) and of gloo; #wrong (gloo against
the expectation, the godist groups against gloo's result on the same
inputs); the ratios t_gloo / t_godist (CSV ``godist_speedup``) and
t_gloo / t_godist-mpi (CSV ``mpi_speedup``): above 1 the godist group is
faster than gloo.
"""

from __future__ import annotations

import math

from .config import MPI_GROUPS, MPI_OPS, human_bytes
from .results import CSV_COLUMNS, fmt, fmt_bw, fmt_ratio, write_files

MPI_CSV_COLUMNS = CSV_COLUMNS + ["mpi_speedup"]
LABELS = {"godist": "godist", "godist-mpi": "godist over MPI", "gloo": "gloo"}


def _num(x):
    return x is not None and x != "" and not (isinstance(x, float) and math.isnan(x))


def finish_rows(rows, transport: str):
    """One cell's rows from ``RankBench.emit``: each row's transport, and the
    ratio t_gloo / t_godist-mpi on every row."""
    tr = {"godist": transport, "godist-mpi": "mpi", "gloo": "tcp"}
    for r in rows:
        r["transport"] = tr.get(r["backend"], r.get("transport", ""))
    ref = next((r for r in rows if r["backend"] == "gloo" and r["status"] == "ok"), None)
    mpi = next((r for r in rows if r["backend"] == "godist-mpi" and r["status"] == "ok"), None)
    ratio = ref["time_us"] / mpi["time_us"] if ref and mpi and mpi.get("time_us") and ref.get("time_us") else None
    for r in rows:
        r["mpi_speedup"] = ratio
    return rows


def _by_backend(rows):
    return {r["backend"]: r for r in rows}


def _time_text(r, width):
    if r is None:
        return f"{'-':>{width}}"
    if r["status"] == "ok":
        return f"{r['time_us']:{width}.2f}"
    return f"{r['status'][:width]:>{width}}"


class MpiTable:
    """The table rank 0 prints while the run goes: a header per operation,
    a row per size."""

    def __init__(self):
        self.op = None

    def lines(self, rows) -> list[str]:
        b = _by_backend(rows)
        r0 = rows[0]
        out = []
        if r0["op"] != self.op:
            self.op = r0["op"]
            out += [f"# {self.op}, P={r0['world_size']} (time per op in us; #wrong: gloo vs the expectation, "
                    "godist groups vs gloo; ratios t_gloo/t_x, above 1 x is faster)",
                    f"# {'size (B)':>10} {'count':>10} {'godist':>11} {'godist-mpi':>11} {'gloo':>11} {'#wrong':>7}"
                    f" {'godist/gloo':>11} {'mpi/gloo':>9}"]
        wrong = sum(max(0, int(r.get("wrong") or 0)) for r in rows)
        god, mpi = r0.get("godist_speedup"), r0.get("mpi_speedup")
        out.append(f"  {r0['size_bytes']:>10} {r0['count']:>10} {_time_text(b.get('godist'), 11)} "
                   f"{_time_text(b.get('godist-mpi'), 11)} {_time_text(b.get('gloo'), 11)} {wrong:>7} "
                   f"{fmt_ratio(god) if _num(god) else '-':>11} {fmt_ratio(mpi) if _num(mpi) else '-':>9}")
        return out


def summary_table(rows) -> list[str]:
    """(op, size) x time per op of each group and both ratios."""
    cells = {}
    for r in rows:
        cells.setdefault((r["op"], int(r["nominal_bytes"])), []).append(r)
    rank = {op: i for i, op in enumerate(MPI_OPS)}
    out = ["| op | size | godist (µs) | godist over MPI (µs) | gloo (µs) | godist/gloo | godist-MPI/gloo | #wrong |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (op, nb) in sorted(cells, key=lambda k: (rank.get(k[0], 99), k[1])):
        rs = cells[(op, nb)]
        b = _by_backend(rs)

        def t(name):
            r = b.get(name)
            if r is None:
                return "-"
            return fmt(r.get("time_us"), 2) if r["status"] == "ok" else r["status"]
        wrong = sum(max(0, int(r.get("wrong") or 0)) for r in rs)
        out.append(f"| {op} | {human_bytes(nb)} | {t('godist')} | {t('godist-mpi')} | {t('gloo')} | "
                   f"{fmt_ratio(rs[0].get('godist_speedup'))} | {fmt_ratio(rs[0].get('mpi_speedup'))} | "
                   f"{wrong if wrong else 0}{' WRONG' if wrong else ''} |")
    return out


def op_tables(rows) -> list[str]:
    cols = ["size", "count", "group", "transport", "time (µs)", "algbw (GB/s)", "busbw (GB/s)", "p50 (µs)",
            "p95 (µs)", "CPU/op (µs)", "n", "#wrong"]
    order = {b: i for i, b in enumerate(MPI_GROUPS)}
    out = []
    for op in MPI_OPS:
        rs = sorted((r for r in rows if r["op"] == op), key=lambda r: (int(r["nominal_bytes"]), order[r["backend"]]))
        if not rs:
            continue
        out += ["", f"### {op}", "", "| " + " | ".join(cols) + " |",
                "| " + " | ".join("---" if c in ("group", "transport") else "---:" for c in cols) + " |"]
        for r in rs:
            vals = [human_bytes(int(r["size_bytes"])), r["count"], LABELS[r["backend"]] + (
                "" if r["status"] == "ok" else f" ({r['status']})"), r.get("transport", ""), fmt(r.get("time_us")),
                fmt_bw(r.get("algbw_GBps")), fmt_bw(r.get("busbw_GBps")), fmt(r.get("p50_us")), fmt(r.get("p95_us")),
                fmt(r.get("cpu_us_per_op")), r.get("n_iters", ""), r.get("wrong", 0)]
            out.append("| " + " | ".join(str(v) for v in vals) + " |")
        errs = {(r["backend"], r["error"]) for r in rs if r.get("error")}
        for b, e in sorted(errs):
            out.append(f"\n{LABELS[b]}: `{e}`")
    return out


def write_markdown(rows, meta, path, png_name):
    lines = [f"# godist, godist over MPI and gloo in the same MPI ranks ({meta['ranks']} ranks)", "",
             f"Command: `{meta['command']}`  ",
             f"Mode: {meta['mode']}; {meta['when']}; wall time {meta['wall_s']:.0f} s; exit status {meta['exit']}.",
             "", "```", *meta["header"], "```", ""]
    if meta.get("setup"):
        lines += ["Process-group setup (max over ranks, s): " + ", ".join(
            f"{k} {v:.3f}" for k, v in meta["setup"].items()), ""]
    if meta.get("oversubscribed"):
        lines += ["**Ranks outnumber cores**: MPI polls while it waits, so its ranks take cores the others need; "
                  "the godist-over-MPI column is pessimistic here.", ""]
    unavailable = (meta.get("groups") or {}).get("godist-mpi", "")
    if unavailable.startswith("unavailable"):
        lines += [f"**godist over MPI {unavailable}**", ""]
    if meta.get("errors"):
        lines += ["**Errors:**", "", "```", *meta["errors"], "```", ""]
    lines += ["## Time per op", "",
              "Median over repeats of the mean over ranks, float32. godist: the default group (init_method mpi://, "
              "godist's own transports); godist over MPI: a group made with GODIST_TRANSPORT=mpi (MPI "
              "collectives); gloo: a gloo group over the same ranks. The ratios are t_gloo / t_x: above 1 x is "
              "faster than gloo. #wrong: gloo against the expectation, each godist group against gloo's result "
              "on the same inputs, summed over groups and ranks.", "", *summary_table(rows), ""]
    if png_name:
        lines += [f"![godist, godist over MPI, gloo]({png_name})", ""]
    lines += ["## Per operation (nccl-tests columns)", "",
              "size = S of nccl-tests (all_gather: total output; reduce_scatter: total input; all_to_all: the "
              "whole input); algbw = S / time (decimal GB/s); busbw = algbw x 2(P-1)/P (all_reduce), x (P-1)/P "
              "(all_gather, reduce_scatter, all_to_all), x 1 (broadcast); CPU/op = getrusage user+system time of "
              "the whole process per op; n = ops per timed block.", *op_tables(rows), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def plot(rows, path) -> bool:
    """Time per op against size, one panel per operation, one line per group."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - no matplotlib: no PNG
        return False
    ops = [op for op in MPI_OPS if any(r["op"] == op for r in rows)]
    if not ops:
        return False
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops), 3.6), squeeze=False)
    styles = {"godist": ("C0", "o"), "godist-mpi": ("C2", "s"), "gloo": ("C1", "^")}
    for ax, op in zip(axes[0], ops):
        for b in MPI_GROUPS:
            pts = sorted((int(r["size_bytes"]), r["time_us"]) for r in rows
                         if r["op"] == op and r["backend"] == b and r["status"] == "ok" and _num(r.get("time_us")))
            if pts:
                c, m = styles[b]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=m, color=c, label=LABELS[b])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(op, fontsize=10)
        ax.set_xlabel("size (B)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("time per op (µs)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write_all(rows, meta, out_dir, want_plot=True):
    paths, png = write_files(rows, meta, out_dir, MPI_CSV_COLUMNS, lambda path: plot(rows, path), want_plot)
    write_markdown(rows, meta, paths["md"], png)
    return paths
