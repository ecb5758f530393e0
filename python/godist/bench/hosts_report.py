"""The results of ``--hosts H``: CSV, markdown and PNG, per link rate.

The link bound: at a link of R bit/s (both directions), each host must
move at least B bytes of an op across its link, so the op takes at least
t_bound = B * 8 / R, with (S = the size of nccl-tests, P = H * L ranks):

- all_reduce of an S-byte buffer: B = 2(H-1)/H * S (reduce-scatter and
  all-gather among the hosts, whatever happens inside a host);
- broadcast: B = S (every other host must receive the buffer);
- all_gather_into_tensor (S = total output) and reduce_scatter_tensor (S =
  total input): B = (H-1)/H * S (the other hosts' part of the result comes
  in, or this host's partial sums for the other hosts' shards go out);
- all_to_all_single (S = each rank's whole input): B = L * (H-1)/H * S (the
  host's ranks' chunks for ranks on other hosts).

``bound_pct`` = 100 * t_bound / t_max, with t_max the slowest rank's time
per op (median over blocks): how close a backend comes to the link. Not the
mean over ranks: a broadcast's root and the ranks on its host are done once
the data is in their socket buffers, long before the other host has it.
"""

from __future__ import annotations

import math
import os

from .config import HOSTS_OPS, human_bytes, parse_rate
from .results import CSV_COLUMNS, CSV_NAME, fmt, fmt_bw, fmt_ratio, read_csv, write_files

HOSTS_CSV_COLUMNS = ["rate"] + CSV_COLUMNS + ["link_bound_us", "bound_pct"]
STYLES = {"godist": dict(color="tab:blue", ls="-", marker="o", mfc="tab:blue"),
          "gloo": dict(color="tab:orange", ls="--", marker="s", mfc="white")}


def _num(x):
    return x is not None and x != "" and not (isinstance(x, float) and math.isnan(x))


def link_bytes(op: str, size: int, H: int, L: int) -> float | None:
    """B: the bytes each host must move across its link (see the module's doc)."""
    if op == "all_reduce":
        return 2 * (H - 1) / H * size
    if op == "broadcast":
        return float(size)
    if op in ("all_gather_into_tensor", "reduce_scatter_tensor"):
        return (H - 1) / H * size
    if op == "all_to_all_single":
        return L * (H - 1) / H * size
    return None


def add_bounds(rows, meta):
    """Each row's link_bound_us and bound_pct, where its rate has a bound."""
    H, L = meta["hosts"], meta["ranks_per_host"]
    for r in rows:
        bps = parse_rate(r["rate"])
        b = link_bytes(r["op"], int(r["size_bytes"]), H, L)
        r["link_bound_us"] = b * 8 / bps * 1e6 if bps and b else None
        t = r.get("time_max_us")
        r["bound_pct"] = 100 * r["link_bound_us"] / t if r["link_bound_us"] and _num(t) and t > 0 else None
    return rows


def _cells(rows, rate):
    """{(op, nominal): {backend: row}} of one rate."""
    out = {}
    for r in rows:
        if r["rate"] == rate:
            out.setdefault((r["op"], int(r["nominal_bytes"])), {})[r["backend"]] = r
    return out


def _ms(r):
    return fmt(r["time_us"] / 1e3, 2) if r is not None and r["status"] == "ok" and _num(r.get("time_us")) else "-"


def _bound_ms(us):
    if not us:
        return "-"
    return f"{us / 1e3:.3f}" if us >= 1 else "< 0.001"


def _pct(x):
    return f"{x:.0f} %" if _num(x) else "-"


def slower_cells(rows, rate):
    """(op, nominal, godist row, gloo row) where godist took longer than gloo."""
    out = []
    for (op, nb), b in sorted(_cells(rows, rate).items(), key=lambda kv: (_op_rank(kv[0][0]), kv[0][1])):
        g = b.get("godist")
        if g is not None and _num(g.get("godist_speedup")) and g["godist_speedup"] < 1:
            out.append((op, nb, g, b.get("gloo")))
    return out


def _op_rank(op):
    order = list(HOSTS_OPS) + ["ddp_step"]
    return order.index(op) if op in order else 99


def summary_table(rows, meta) -> list[str]:
    out = ["| rate | offload | all_reduce size | godist (ms) | gloo (ms) | link bound (ms) | godist % of bound | "
           "godist/gloo busbw | DDP step time godist/gloo | cells where godist is slower |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for rate in meta["rates"]:
        cells = _cells(rows, rate)
        ar = sorted(nb for op, nb in cells if op == "all_reduce")
        topo = (meta["per_rate"].get(rate) or {}).get("topology") or {}
        b = cells.get(("all_reduce", ar[-1]), {}) if ar else {}
        g = b.get("godist")
        ddp = next((c.get("godist") for (op, _), c in cells.items() if op == "ddp_step"), None)
        slow = slower_cells(rows, rate)
        slow_text = ", ".join(f"{op} {human_bytes(nb)} ({g['godist_speedup']:.2f})" for op, nb, g, _ in slow
                              if op != "ddp_step") or "none"
        out.append(f"| {rate} | {topo.get('offload', '?')!r} | {human_bytes(ar[-1]) if ar else '-'} | {_ms(g)} | "
                   f"{_ms(b.get('gloo'))} | {_bound_ms(g.get('link_bound_us') if g else None)}"
                   f" | {_pct(g.get('bound_pct') if g else None)} | {fmt_ratio(g.get('godist_speedup') if g else None)} | "
                   f"{fmt_ratio(1 / ddp['godist_speedup']) if ddp and _num(ddp.get('godist_speedup')) else '-'} | "
                   f"{slow_text} |")
    return out


def all_reduce_table(rows, rate) -> list[str]:
    out = ["| size | godist (ms) | gloo (ms) | link bound (ms) | godist % of bound | gloo % of bound | godist busbw "
           "(GB/s) | gloo busbw (GB/s) | godist/gloo busbw | #wrong |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (op, nb), b in sorted(_cells(rows, rate).items(), key=lambda kv: kv[0][1]):
        if op != "all_reduce":
            continue
        g, gl = b.get("godist"), b.get("gloo")
        bound = next((r["link_bound_us"] for r in (g, gl) if r and r.get("link_bound_us")), None)
        wrong = sum(max(0, int(r.get("wrong") or 0)) for r in (g, gl) if r)
        out.append(f"| {human_bytes(nb)} | {_ms(g)} | {_ms(gl)} | {_bound_ms(bound)} | "
                   f"{_pct(g.get('bound_pct') if g else None)} | {_pct(gl.get('bound_pct') if gl else None)} | "
                   f"{fmt_bw(g.get('busbw_GBps')) if g else '-'} | {fmt_bw(gl.get('busbw_GBps')) if gl else '-'} | "
                   f"{fmt_ratio(g.get('godist_speedup') if g else None)} | {wrong}{' WRONG' if wrong else ''} |")
    return out


def ratio_matrix(rows, rate) -> list[str]:
    """Sizes x operations: t_gloo / t_godist (= godist's busbw / gloo's);
    below 1 (godist slower) in bold."""
    cells = _cells(rows, rate)
    ops = [op for op in HOSTS_OPS if any(o == op for o, _ in cells)]
    sizes = sorted({nb for o, nb in cells if o in ops})
    out = ["| size | " + " | ".join(ops) + " |", "| ---: | " + " | ".join("---:" for _ in ops) + " |"]
    for nb in sizes:
        vals = []
        for op in ops:
            g = cells.get((op, nb), {}).get("godist")
            if g is None:
                vals.append("")
            elif g["status"] != "ok":
                vals.append(g["status"])
            else:
                x = g.get("godist_speedup")
                txt = fmt_ratio(x)
                vals.append((f"**{txt}**" if _num(x) and x < 1 else txt) + (" WRONG" if g.get("wrong") else ""))
        out.append(f"| {human_bytes(nb)} | " + " | ".join(vals) + " |")
    return out


def ddp_table(rows, rate) -> list[str]:
    rs = sorted((r for r in rows if r["rate"] == rate and r["op"] == "ddp_step"),
                key=lambda r: r["backend"] != "godist")
    if not rs:
        return []
    out = ["| backend | step (ms) | p50 (ms) | p95 (ms) | CPU/step (ms) | #wrong | step time godist/gloo | what |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rs:
        sp = r.get("godist_speedup")
        out.append(f"| {r['backend']} | {_ms(r)} | {fmt((r.get('p50_us') or math.nan) / 1e3, 1)} | "
                   f"{fmt((r.get('p95_us') or math.nan) / 1e3, 1)} | {fmt((r.get('cpu_us_per_op') or math.nan) / 1e3, 1)}"
                   f" | {r.get('wrong', 0)} | {fmt_ratio(1 / sp) if _num(sp) else '-'} | {r['variant']} |")
    return out


def op_tables(rows, meta) -> list[str]:
    cols = ["rate", "size", "count", "backend", "transport", "time (µs)", "algbw (GB/s)", "busbw (GB/s)",
            "% of bound", "p50 (µs)", "p95 (µs)", "CPU/op (µs)", "n", "#wrong"]
    out = []
    rate_rank = {r: i for i, r in enumerate(meta["rates"])}
    for op in HOSTS_OPS:
        rs = sorted((r for r in rows if r["op"] == op),
                    key=lambda r: (rate_rank.get(r["rate"], 99), int(r["nominal_bytes"]), r["backend"] != "godist"))
        if not rs:
            continue
        out += ["", f"### {op}", "", "| " + " | ".join(cols) + " |",
                "| " + " | ".join("---" if c in ("rate", "backend", "transport") else "---:" for c in cols) + " |"]
        for r in rs:
            vals = [r["rate"], human_bytes(int(r["size_bytes"])), r["count"],
                    r["backend"] + ("" if r["status"] == "ok" else f" ({r['status']})"), r.get("transport", ""),
                    fmt(r.get("time_us")), fmt_bw(r.get("algbw_GBps")), fmt_bw(r.get("busbw_GBps")), _pct(r.get("bound_pct")),
                    fmt(r.get("p50_us")), fmt(r.get("p95_us")), fmt(r.get("cpu_us_per_op")), r.get("n_iters", ""),
                    r.get("wrong", 0)]
            out.append("| " + " | ".join(str(v) for v in vals) + " |")
        for r in rs:
            if r.get("error"):
                out.append(f"\n{r['backend']}, {r['rate']}, {human_bytes(int(r['size_bytes']))}: `{r['error']}`")
    return out


def write_markdown(rows, meta, path, png_name):
    H, L = meta["hosts"], meta["ranks_per_host"]
    lines = [f"# godist vs gloo across simulated hosts ({H} hosts x {L} ranks)", "",
             f"Command: `{meta['command']}`  ",
             f"Mode: {meta['mode']}; {meta['when']}; wall time {meta['wall_s']:.0f} s; exit status {meta['exit']}.",
             "", "```", *meta["header"], f"loadavg: {meta['loadavg_end']} (at end)", "```", ""]
    if meta.get("errors"):
        lines += ["**Errors:**", "", "```", *meta["errors"], "```", ""]
    lines += ["## Summary", "",
              "The largest all_reduce at each rate against gloo and against the link bound, the DDP step and the "
              "cells where godist took longer than gloo (t_gloo / t_godist in brackets).", "",
              *summary_table(rows, meta), "",
              "## The link bound", "",
              f"At a link rate of R bit/s (tbf on both ends of each host's veth, so R in each direction), each host "
              f"must send 2(H-1)/H * N bytes of an N-byte all_reduce across its link, so t_bound = 2(H-1)/H * N * "
              f"8 / R (here H = {H}: t_bound = {2 * (H - 1) / H:g} * N * 8 / R). % of bound = t_bound / t_max, "
              "t_max the slowest rank's time per op (the times in the tables are means over ranks, as in the "
              "other reports; for all_reduce the two agree within a few %, while a broadcast's root is done long "
              "before the other host). The other operations' bounds (per-operation tables): broadcast N * 8 / R; "
              "all_gather_into_tensor and reduce_scatter_tensor (H-1)/H * S * 8 / R with S the total output / "
              "input; all_to_all_single "
"L * (H-1)/H * S * 8 / R with S each rank's whole input. Unshaped links (rate none) have no bound.", ""]
    for rate in meta["rates"]:
        pr = meta["per_rate"].get(rate) or {}
        topo = pr.get("topology") or {}
        lines += [f"## Rate {rate}", "",
                  f"Topology (rank 0's godist.topology()): hosts {topo.get('hosts')}, offload "
                  f"{topo.get('offload', '?')!r}, via {topo.get('via')}"
                  + ("" if pr.get("topology_agrees", True) else " (**the ranks disagree**)") + ".  ",
                  "Process-group setup (max over ranks, s): " + ", ".join(
                      f"{k} {v:.3f}" for k, v in (pr.get("setup") or {}).items()) + f"; this rate took "
                  f"{pr.get('wall_s', 0):.0f} s" + ("" if pr.get("finished", True) else " and **did not finish**")
                  + ".", ""]
        if any(r["rate"] == rate and r["op"] == "all_reduce" for r in rows):
            lines += ["### all_reduce against the link bound", "", *all_reduce_table(rows, rate), ""]
        lines += ["### godist/gloo per cell", "",
                  "t_gloo / t_godist (= godist's busbw / gloo's): above 1 godist is faster; below 1 in bold.", "",
                  *ratio_matrix(rows, rate), ""]
        dt = ddp_table(rows, rate)
        if dt:
            lines += ["### DDP step", "", "Step time: median over blocks of the mean over ranks. godist/gloo: "
                      "step time ratio, below 1 godist is faster. #wrong: gradients of godist's model against "
                      "gloo's.", "", *dt, ""]
    if png_name:
        lines += [f"![busbw per operation and rate, godist vs gloo]({png_name})", ""]
    lines += ["## Per operation (nccl-tests columns)", "",
              "Median over repeats of the mean over ranks, float32. godist: the default group (env://; "
              "transport shm+tcp = shared memory inside a host, TCP between hosts); gloo: a gloo group over the same "
              "ranks. size = S of nccl-tests (all_gather: total output; reduce_scatter: total input; all_to_all: "
              "the whole input); algbw = S / time (decimal GB/s); busbw = algbw x 2(P-1)/P (all_reduce), x (P-1)/P "
              "(all_gather, reduce_scatter, all_to_all), x 1 (broadcast); #wrong: gloo against the expectation, "
              "godist against gloo's result on the same inputs.", *op_tables(rows, meta), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def plot(rows, meta, path) -> bool:
    """busbw against size: one panel per operation (columns) and rate (rows),
    godist solid, gloo dashed, the link bound dotted. busbw of the slowest
    rank's time, the time the bound is compared with."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    rates = [r for r in meta["rates"] if any(x["rate"] == r for x in rows)]
    ops = [op for op in HOSTS_OPS if any(x["op"] == op for x in rows)]
    if not rates or not ops:
        return False
    P = meta["hosts"] * meta["ranks_per_host"]
    fig = Figure(figsize=(3.6 * len(ops) + 0.6, 3.1 * len(rates) + 0.9))
    axes = fig.subplots(len(rates), len(ops), squeeze=False)
    for i, rate in enumerate(rates):
        for j, op in enumerate(ops):
            ax = axes[i][j]
            rs = [r for r in rows if r["rate"] == rate and r["op"] == op]
            for b, st in STYLES.items():
                pts = sorted((int(r["size_bytes"]), r["busbw_GBps"] * r["time_us"] / r["time_max_us"]) for r in rs
                             if r["backend"] == b and r["status"] == "ok" and _num(r.get("busbw_GBps"))
                             and _num(r.get("time_max_us")) and r["time_max_us"] > 0)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=st["ls"], marker=st["marker"], ms=4,
                            color=st["color"], mfc=st["mfc"], mec=st["color"], label=b)
            # busbw at t_bound (the same for every size): busbw * t / t_bound
            bound = [r["busbw_GBps"] * r["time_us"] / r["link_bound_us"] for r in rs
                     if _num(r.get("link_bound_us")) and _num(r.get("busbw_GBps")) and _num(r.get("time_us"))]
            if bound:
                ax.axhline(bound[0], color="gray", ls=":", lw=1.2, label="link bound")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            sizes = [int(r["size_bytes"]) for r in rs if int(r["size_bytes"])] or [1]
            ticks = [t for t in (8 << 4 * k for k in range(12)) if min(sizes) / 2 <= t <= max(sizes) * 2]
            ax.xaxis.set_major_locator(FixedLocator(ticks or sizes[:1]))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlim(min(sizes) / 1.5, max(sizes) * 1.5)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human_bytes(int(x)).replace(".0 ", " ")))
            ax.grid(True, which="major", alpha=0.3)
            ax.set_title(f"{op} @ {rate}", fontsize=9, loc="left")
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("busbw (GB/s), slowest rank", fontsize=8)
            if i == len(rates) - 1:
                ax.set_xlabel("size", fontsize=8)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"godist vs gloo across {meta['hosts']} simulated hosts x {meta['ranks_per_host']} ranks (P={P}): "
                 "busbw of the slowest rank, higher is better", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=90)
    return True


def write_all(rows, meta, out_dir, want_plot=True, write_data=True):
    add_bounds(rows, meta)
    paths, png = write_files(rows, meta, out_dir, HOSTS_CSV_COLUMNS, lambda path: plot(rows, meta, path), want_plot,
                             write_data)
    write_markdown(rows, meta, paths["md"], png)
    return paths


def render(out_dir, meta, want_plot=True):
    """results.md (and the PNG) again from results.csv and meta.json."""
    rows = read_csv(os.path.join(out_dir, CSV_NAME))
    for r in rows:
        for k in ("link_bound_us", "bound_pct"):
            r[k] = float(r[k]) if r.get(k) not in (None, "") else None
    paths = write_all(rows, meta, out_dir, want_plot, write_data=False)
    return paths
