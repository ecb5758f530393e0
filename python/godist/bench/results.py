"""What every mode's results have in common (``report.py`` for the CPU mode,
``cuda_report.py``, ``hosts_report.py``, ``mpi_report.py``, ``ds_report.py``):
the files' names, the CSV's columns and how to read it back, the number
formats of the tables, drawing the PNG without losing the numbers, and the
end of a run (its exit code, the metadata every report's header reads, the
problems printed to stderr)."""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
import shlex
import sys
import time

from . import machine
from .config import human_bytes

CSV_COLUMNS = ["world_size", "op", "variant", "backend", "dtype", "redop", "nominal_bytes", "size_bytes", "count",
               "n_iters", "repeats", "time_us", "time_max_us", "algbw_GBps", "busbw_GBps", "p50_us", "p95_us",
               "cpu_us_per_op", "godist_speedup", "speedup_vs", "wrong", "status", "transport", "error"]

CSV_NAME, MD_NAME, PNG_NAME, META_NAME = "results.csv", "results.md", "results.png", "meta.json"


def fmt(x, nd=1):
    """A number for a table: "-" when missing, else with ``nd`` decimals (fewer
    or more digits for very large or small values)."""
    if x is None or x == "" or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        if abs(x) >= 1e5:
            return f"{x:.0f}"
        if abs(x) < 0.01:
            return f"{x:.2g}" if x else "0"
        return f"{x:.{nd}f}"
    return str(x)


def fmt_bw(x):
    """A bandwidth in GB/s for a table ("-" when missing)."""
    if x is None or x == "" or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.2f}"


def fmt_ratio(x):
    """A ratio for a table ("-" when missing)."""
    if x is None or x == "" or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.2f}"


INT_COLUMNS = ("world_size", "nominal_bytes", "size_bytes", "count", "n_iters", "repeats", "wrong")
FLOAT_COLUMNS = ("time_us", "time_max_us", "algbw_GBps", "busbw_GBps", "p50_us", "p95_us", "cpu_us_per_op",
                 "godist_speedup")


def read_csv(path):
    """Rows of a results.csv with numbers back as numbers (None if empty)."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            for k in INT_COLUMNS:
                r[k] = int(r[k]) if r.get(k) not in (None, "") else None
            for k in FLOAT_COLUMNS:
                r[k] = float(r[k]) if r.get(k) not in (None, "") else None
            rows.append(r)
    return rows


def plot_into(paths, out_dir, meta, draw):
    """Draw the PNG with ``draw(path) -> bool`` into out_dir/results.png,
    named in ``paths["png"]``; returns its name for the markdown, or None
    (``paths`` then has no "png"). A failure is recorded in meta["errors"]:
    it must not lose the numbers."""
    paths["png"] = os.path.join(out_dir, PNG_NAME)
    try:
        if draw(paths["png"]):
            return PNG_NAME
    except Exception as e:  # noqa: BLE001 - a plot failure must not lose the numbers
        meta.setdefault("errors", []).append(f"plot failed: {type(e).__name__}: {e}")
    paths.pop("png")
    return None


def write_files(rows, meta, out_dir, columns, draw, want_plot=True, write_data=True):
    """Writes a run's files into out_dir: the CSV (those columns of every
    row), the plot (``draw(path) -> bool``, see plot_into) and meta.json, in
    that order (a failed plot is recorded in meta). write_data=False
    re-renders from existing data: no CSV or meta.json, and without
    want_plot the existing plot is kept. Returns (paths, the plot's name for
    the markdown or None)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"csv": os.path.join(out_dir, CSV_NAME), "md": os.path.join(out_dir, MD_NAME),
             "meta": os.path.join(out_dir, META_NAME)}
    if write_data:
        with open(paths["csv"], "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    png = None
    if want_plot:
        png = plot_into(paths, out_dir, meta, draw)
    elif not write_data and os.path.exists(os.path.join(out_dir, PNG_NAME)):
        png = PNG_NAME  # re-rendering without plotting keeps the existing plot
    if write_data:
        with open(paths["meta"], "w") as f:
            json.dump(meta, f, indent=1)
    return paths, png


def header_end(header: list, note: str | None, nproc) -> list:
    """Adds the run's note and, when the load average exceeds the CPUs, a
    warning that timings are noisy: the last lines of every mode's header."""
    if note:
        header.append(f"note:    {note}")
    load = os.getloadavg()[0]
    if nproc and load > nproc:
        header.append(f"WARNING: loadavg {load:.2f} > nproc {nproc}: the machine is busy, timings are noisy")
    return header


def outcome(rows, errors=()):
    """(rows with wrong results, rows whose op failed, exit code) of a run:
    1 when a rank failed (errors), a result was wrong or an op failed."""
    wrong = [r for r in rows if r.get("wrong")]
    bad = [r for r in rows if r["status"] == "error"]
    return wrong, bad, 1 if (errors or wrong or bad) else 0


def run_meta(mode: str, t_start: float, code: int, header, argv=None, prefix: str = "python -m godist.bench",
             **fields) -> dict:
    """The metadata of a run every report's header reads: the command that
    reproduces it (prefix and the arguments, argv or sys.argv's), when, the
    wall time since t_start (time.monotonic), the exit code, the machine's
    header and its load at the end; fields add the mode's own."""
    args = sys.argv[1:] if argv is None else list(argv)
    return {"command": " ".join([prefix, *(shlex.quote(x) for x in args)]), "mode": mode,
            "when": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "wall_s": time.monotonic() - t_start,
            "exit": code, "header": header, "loadavg_end": "%.2f %.2f %.2f" % machine.loadavg(), **fields}


def print_outcome(errors, wrong, bad, paths: dict, meta: dict, where) -> None:
    """To stderr: the ranks' errors, a line per wrong or failed cell (where(row)
    names the cell), and the files written."""
    for e in errors:
        print(e, file=sys.stderr)
    for r in wrong:
        print(f"WRONG: {where(r)}: {r['wrong']} wrong elements", file=sys.stderr)
    for r in bad:
        print(f"ERROR: {where(r)}: {r['error']}", file=sys.stderr)
    print(f"wrote {', '.join(paths.values())} in {meta['wall_s']:.0f} s; exit {meta['exit']}", file=sys.stderr)


def cell_name(r) -> str:
    """How a problem line names a CPU or --vs cell's row."""
    return (f"P={r['world_size']} {r['op']} {r['dtype']} {human_bytes(int(r['size_bytes']))} {r['backend']} "
            f"({r['variant']})")
