"""Writes the results: CSV (every row), markdown (ratio summary, scenarios,
nccl-tests-style tables per operation) and a PNG plot (``plot.py``).

With one backend benchmarked there is no godist/gloo ratio: the markdown
leaves out its summary and its columns, and the CSV leaves its column empty."""

from __future__ import annotations

import json
import os
from collections import defaultdict

from .config import BACKENDS, OPS, human_bytes
from .results import CSV_COLUMNS, CSV_NAME, META_NAME, fmt, fmt_bw, fmt_ratio, read_csv, write_files

MD_COLUMNS = ["P", "size", "count", "type", "redop", "backend", "time (µs)", "algbw (GB/s)", "busbw (GB/s)",
              "p50 (µs)", "p95 (µs)", "CPU/op (µs)", "n", "#wrong", "godist/gloo"]

SCENARIO_OPS = ("ddp_step", "infer_loop", "async_loop", "recreate")


def has_ratio(rows, meta: dict | None = None) -> bool:
    """Whether both backends were benchmarked (the run's meta says; an
    older run's rows tell)."""
    if meta and meta.get("backends"):
        return len(meta["backends"]) == len(BACKENDS)
    return {r["backend"] for r in rows} >= set(BACKENDS)


def _backend_label(r):
    if r["op"] in SCENARIO_OPS or r["variant"] == "native":
        return r["backend"] + ("" if r["status"] == "ok" else f" ({r['status']})")
    return f"{r['backend']} ({r['variant']})"


def _size_label(r):
    if r["op"] == "barrier":
        return "-"
    return human_bytes(int(r["size_bytes"]))


def ratio_table(rows, key="time_us") -> list[str]:
    """Rows (op, dtype, nominal size) x columns P: t_gloo / t_godist (the
    row's godist_speedup), or with key="p50_us" the same ratio of p50s."""
    Ps = sorted({r["world_size"] for r in rows})
    cells = defaultdict(dict)
    order = []
    ref = {}
    for r in rows:
        if r["backend"] == "gloo" and r["status"] == "ok" and r.get(key):
            ref[(r["world_size"], r["op"], r["dtype"], r["nominal_bytes"])] = r[key]
    for r in rows:
        if r["op"] in SCENARIO_OPS or r["backend"] != "godist":
            continue
        k = (r["op"], r["dtype"], r["nominal_bytes"])
        if k not in cells:
            order.append(k)
        if key == "time_us":
            v = r.get("godist_speedup")
        else:
            g, gl = r.get(key), ref.get((r["world_size"],) + k)
            v = gl / g if g and gl else None
        txt = fmt_ratio(v)
        if r["status"] != "ok":
            txt = r["status"]
        if r.get("wrong"):
            txt += " (WRONG)"
        if r.get("speedup_vs") and r["speedup_vs"] != "native":
            txt += "†"
        cells[k][r["world_size"]] = txt
    op_rank = {op: i for i, op in enumerate(OPS)}
    order.sort(key=lambda k: (k[1] not in ("float32", "-"), op_rank.get(k[0], 99), k[1], k[2]))
    out = ["| op | dtype | size | " + " | ".join(f"P={p}" for p in Ps) + " |",
           "| --- | --- | ---: | " + " | ".join("---:" for _ in Ps) + " |"]
    for k in order:
        op, dt, nb = k
        size = "-" if op == "barrier" else human_bytes(nb)
        out.append(f"| {op} | {dt} | {size} | " + " | ".join(cells[k].get(p, "") for p in Ps) + " |")
    return out


def scenario_table(rows, ratio: bool = True) -> list[str]:
    sc = [r for r in rows if r["op"] in SCENARIO_OPS]
    if not sc:
        return []
    head = ["scenario", "P", "backend", "what", "time per step/op (µs)", "p50 (µs)", "p95 (µs)", "CPU (µs)", "#wrong"]
    align = ["---", "---:", "---", "---"] + ["---:"] * 5
    if ratio:
        head.append("godist/gloo")
        align.append("---:")
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    for r in sorted(sc, key=lambda r: (r["op"], r["world_size"], r["backend"] != "godist")):
        vals = [r["op"], r["world_size"], _backend_label(r), r["variant"], fmt(r.get("time_us")), fmt(r.get("p50_us")),
                fmt(r.get("p95_us")), fmt(r.get("cpu_us_per_op")), r.get("wrong", 0)]
        if ratio:
            vals.append(fmt_ratio(r.get("godist_speedup")))
        out.append("| " + " | ".join(str(v) for v in vals) + " |")
    return out


def op_tables(rows, ratio: bool = True) -> list[str]:
    out = []
    ops = [op for op in OPS if any(r["op"] == op for r in rows)]
    cols = MD_COLUMNS if ratio else MD_COLUMNS[:-1]
    for op in ops:
        rs = [r for r in rows if r["op"] == op]
        rs.sort(key=lambda r: (r["dtype"] != "float32", r["dtype"], r["world_size"], r["nominal_bytes"],
                               r["backend"] != "godist", r["variant"]))
        align = ["---" if c in ("type", "redop", "backend") else "---:" for c in cols]
        out += ["", f"### {op}", "", "| " + " | ".join(cols) + " |", "| " + " | ".join(align) + " |"]
        for r in rs:
            vals = [r["world_size"], _size_label(r), r["count"], r["dtype"], r["redop"], _backend_label(r),
                    fmt(r.get("time_us")), fmt_bw(r.get("algbw_GBps")), fmt_bw(r.get("busbw_GBps")), fmt(r.get("p50_us")),
                    fmt(r.get("p95_us")), fmt(r.get("cpu_us_per_op")), r.get("n_iters", ""), r.get("wrong", 0)]
            if ratio:
                vals.append(fmt_ratio(r.get("godist_speedup")))
            out.append("| " + " | ".join(str(v) for v in vals) + " |")
        errs = [r for r in rs if r.get("error")]
        for r in errs:
            out.append(f"\n{_backend_label(r)}, P={r['world_size']}, {_size_label(r)}: `{r['error']}`")
    return out


def _pyloop_lines(meta: dict) -> list[str]:
    """The Python-speed probe around each world size (machine.python_loop_ms),
    when the run recorded it."""
    loops = meta.get("python_loop_ms")
    if not loops:
        return []
    runs = ", ".join(f"P={p} {b:g} / {a:g}" for p, (b, a) in loops.items())
    return [f"pyloop:  {runs} ms (a 200,000-step Python loop, median of 5, before / after each world size)"]


def write_markdown(rows, meta: dict, path: str, png_name: str | None):
    ratio = has_ratio(rows, meta)
    ran = meta.get("backends") or sorted({r["backend"] for r in rows})
    if ratio:
        title = "# godist vs gloo, side by side"
    else:
        title = f"# {', '.join(ran)} alone (" + ", ".join(b for b in BACKENDS if b not in ran) + " not run)"
    lines = [title, "",
             f"Command: `{meta['command']}`  ", f"Mode: {meta['mode']}; {meta['when']}; wall time "
             f"{meta['wall_s']:.0f} s; exit status {meta['exit']}.", "",
             "```", *meta["header"], f"loadavg: {meta['loadavg_end']} (at end)", *_pyloop_lines(meta), "```", ""]
    if meta.get("setup"):
        transports = []
        if "godist" in ran:
            transports.append("godist transport (as reported by the godist group): " + ", ".join(
                f"P={p}: {s.get('godist_transport', '?')}" for p, s in sorted(meta["setup"].items())))
        if "gloo" in ran:
            transports.append("gloo: TCP over loopback")
        lines += ["; ".join(transports) + ".", "",
            "Process-group setup (max over ranks, s): " + "; ".join(
            f"P={p}: " + ", ".join(f"{k} {v:.3f}" for k, v in s.get("times", {}).items())
            for p, s in sorted(meta["setup"].items())), ""]
    if meta.get("errors"):
        lines += ["**Errors:**", "", "```", *meta["errors"], "```", ""]
    if ratio:
        lines += ["## godist/gloo speed ratio", "",
                  "t_gloo / t_godist per cell (median over repeats of the mean over ranks): above 1 godist is "
                  "faster. † = against gloo's all_reduce+chunk fallback (gloo has no native op).", "",
                  *ratio_table(rows), "",
                  "### The same ratio for the median single op (p50 latency)", "",
                  "Per-op p50 inside the timed blocks, gloo / godist. Where it differs a lot from the table above, "
                  "one backend has a heavy tail (on a loaded VM, mostly late wake-ups of a few ms).", "",
                  *ratio_table(rows, key="p50_us"), ""]
    sc = scenario_table(rows, ratio)
    if sc:
        lines += ["## Scenarios", "", *sc, ""]
    if png_name:
        lines += [f"![{'godist vs gloo' if ratio else title.lstrip('# ')}]({png_name})", ""]
    lines += ["## Per operation (nccl-tests columns)", "",
              "size = S of nccl-tests (all_reduce/broadcast/send_recv: the buffer; all_gather: total output; "
              "reduce_scatter: total input; all_to_all: the whole input); algbw = S / time (decimal GB/s); busbw = "
              "algbw x 2(P-1)/P (all_reduce), x (P-1)/P (all_gather, reduce_scatter, all_to_all), x 1 (broadcast, "
              "send_recv). time and CPU/op: median over repeats of the mean over ranks; p50/p95: per-op latencies "
              "inside the timed blocks, mean over ranks. send_recv is a ping-pong between rank pairs (0,1), (2,3), "
              "...: time = half the round trip. CPU/op = getrusage user+system time of the whole process (every "
              "thread) per op. n = ops per timed block.", *op_tables(rows, ratio), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def render(out_dir, want_plot=True):
    """Rewrite results.md (and the PNG) from results.csv and meta.json."""
    with open(os.path.join(out_dir, META_NAME)) as f:
        meta = json.load(f)
    if meta.get("hosts"):
        from . import hosts_report

        return hosts_report.render(out_dir, meta, want_plot)
    meta["setup"] = {int(k): v for k, v in meta.get("setup", {}).items()}
    if meta.get("vs") == "deepspeed":
        from . import ds_report

        return ds_report.render(out_dir, meta, want_plot)
    if meta.get("device") == "cuda":
        from . import cuda_report

        return cuda_report.render(out_dir, meta, want_plot)
    return write_all(read_csv(os.path.join(out_dir, CSV_NAME)), meta, out_dir, want_plot, write_data=False)


def write_all(rows, meta, out_dir, want_plot=True, write_data=True):
    def draw(path):
        from .plot import plot

        return plot(rows, path, ratio=has_ratio(rows, meta))

    paths, png = write_files(rows, meta, out_dir, CSV_COLUMNS, draw, want_plot, write_data)
    write_markdown(rows, meta, paths["md"], png)
    return paths
