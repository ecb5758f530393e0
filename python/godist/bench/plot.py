"""The PNG of a run: one panel per operation, time per op against size on
log-log axes, one colour per world size, godist solid and gloo dashed; under
each panel, when both backends ran, godist's speed relative to gloo (t_gloo /
t_godist, log scale, 1 marked). The barrier and the scenarios, which have no
size axis, share one last panel of bars per world size. One legend for the
figure names the world sizes and the line styles.

matplotlib is imported only here, when a plot is asked for; without it the
caller records the failure and writes the other outputs.
"""

from __future__ import annotations

import math

from .config import OPS, human_bytes

SCENARIO_OPS = ("ddp_step", "infer_loop", "async_loop", "recreate")
FIXED_OPS = ("barrier",) + SCENARIO_OPS
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
          "tab:olive", "tab:cyan"]
STYLE = {"godist": dict(ls="-", marker="o", mfc=None), "gloo": dict(ls="--", marker="s", mfc="white"),
         "nccl": dict(ls="--", marker="s", mfc="white")}  # nccl: the reference of --device cuda
FALLBACK_STYLE = dict(ls=":", marker="^", mfc="white")
OP_TITLES = {"send_recv": "send_recv (ping-pong, half round trip)", "all_gather_into_tensor": "all_gather_into_tensor",
             "reduce_scatter_tensor": "reduce_scatter_tensor", "all_to_all_single": "all_to_all_single"}
FIXED_TITLES = {"barrier": "barrier", "ddp_step": "DDP step", "infer_loop": "inference loop",
                "async_loop": "async loop", "recreate": "group re-creation"}


def time_text(us: float) -> str:
    """A time axis label: 500 ns, 20 µs, 1.5 ms, 2 s."""
    if us <= 0:
        return ""
    for unit, m in (("s", 1e6), ("ms", 1e3), ("µs", 1.0), ("ns", 1e-3)):
        if us >= m * 0.999:
            return f"{us / m:g} {unit}"
    return f"{us * 1e3:g} ns"


def size_text(n: float) -> str:
    """A size axis label: 8 B, 4 KiB, 64 MiB."""
    return human_bytes(int(round(n))).replace(".0 ", " ")


def _log_locator(lo: float, hi: float, decades: float = 2.2):
    """Powers of ten, and 2 and 5 times them too when the axis spans fewer
    than ``decades`` decades."""
    from matplotlib.ticker import LogLocator

    span = math.log10(hi / lo) if lo > 0 and hi > 0 else 0
    return LogLocator(base=10, subs=(1.0,) if span > decades else (1.0, 2.0, 5.0))


def _size_ticks(ax, sizes):
    """The measured sizes as ticks when they are few, else powers of two
    down from the largest size, about seven labelled; no minor ticks."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    lo, hi = min(sizes), max(sizes)
    ticks = []
    for s in sorted(set(sizes)):  # sizes closer than x2.5 (all_gather's S grows with P) share a tick
        if not ticks or s >= ticks[-1] * 2.5:
            ticks.append(s)
    if len(ticks) > 8:
        e1 = round(math.log2(hi))
        stride = max(1, math.ceil((e1 - math.log2(lo) + 1) / 7))
        ticks = [2.0 ** e for e in range(e1, math.floor(math.log2(lo)) - 1, -stride)][::-1]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: size_text(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    pad = 2 ** 0.5
    ax.set_xlim(lo / pad, hi * pad)


def _time_axis(ax, values):
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if values:
        ax.yaxis.set_major_locator(_log_locator(min(values), max(values)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: time_text(y)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _ratio_axis(ax, values, ref="gloo"):
    """Log scale, 1 always in view and marked, faster/slower halves tinted."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    lo = min(values + [1.0]) / 1.8
    hi = max(values + [1.0]) * 1.8
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.axhspan(1.0, hi, color="tab:green", alpha=0.07, lw=0)
    ax.axhspan(lo, 1.0, color="tab:red", alpha=0.07, lw=0)
    ax.axhline(1.0, color="black", lw=0.9)
    ax.yaxis.set_major_locator(_log_locator(lo, hi, decades=1.1))  # the strip is short
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"x{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(f"godist/{ref}\nspeed", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)


def _ok(r):
    return r["status"] == "ok" and r.get("time_us")


def _sized_panel(ax_t, ax_r, rows, op, Ps, colors, ref="gloo"):
    rs = [r for r in rows if r["op"] == op and r["dtype"] == "float32"]
    times = []
    for p in Ps:
        mine = [r for r in rs if r["world_size"] == p and _ok(r)]
        for (backend, variant) in sorted({(r["backend"], r["variant"]) for r in mine}):
            line = sorted((r for r in mine if r["backend"] == backend and r["variant"] == variant),
                          key=lambda r: r["size_bytes"])
            st = STYLE[backend] if variant == "native" else FALLBACK_STYLE
            ax_t.plot([r["size_bytes"] for r in line], [r["time_us"] for r in line], ls=st["ls"],
                      marker=st["marker"], ms=4.5, lw=1.6, color=colors[p], mfc=st["mfc"] or colors[p],
                      mec=colors[p])
            times += [r["time_us"] for r in line]
    ax_t.set(xscale="log", yscale="log")
    ax_t.set_ylabel("time per op", fontsize=9)
    ax_t.set_title(OP_TITLES.get(op, op), fontsize=11, fontweight="bold", loc="left")
    ax_t.grid(True, which="major", alpha=0.35)
    ax_t.grid(True, which="minor", axis="y", alpha=0.12)
    _time_axis(ax_t, times)
    sizes = [r["size_bytes"] for r in rs if r["size_bytes"]] or [1]
    bottom = ax_r if ax_r is not None else ax_t
    _size_ticks(bottom, sizes)
    bottom.set_xlabel("size", fontsize=9)
    if ax_r is None:
        return
    ax_t.tick_params(labelbottom=False)
    ratios = []
    for p in Ps:
        line = sorted((r for r in rs if r["world_size"] == p and r["backend"] == "godist" and
                       r.get("godist_speedup")), key=lambda r: r["size_bytes"])
        ax_r.plot([r["size_bytes"] for r in line], [r["godist_speedup"] for r in line], "-", marker="o", ms=4,
                  lw=1.4, color=colors[p])
        ratios += [r["godist_speedup"] for r in line]
    _ratio_axis(ax_r, ratios, ref)
    _size_ticks(ax_r, sizes)


def _fixed_panel(ax_t, ax_r, rows, ops, Ps, colors, backends, ref="gloo"):
    """Bars: one group per operation, one bar per world size and backend
    (godist filled, gloo hatched); under them godist's speed per world size."""
    from matplotlib.patches import Patch

    nb = len(backends)
    width = min(0.8 / (len(Ps) * nb), 0.25)
    times = []
    for i, op in enumerate(ops):
        for j, p in enumerate(Ps):
            for k, b in enumerate(backends):
                r = next((r for r in rows if r["op"] == op and r["world_size"] == p and r["backend"] == b and _ok(r)),
                         None)
                if r is None:
                    continue
                x = i + (j * nb + k + 0.5 - len(Ps) * nb / 2) * width
                ax_t.bar(x, r["time_us"], width * 0.92, color=colors[p] if b == "godist" else "white",
                         edgecolor=colors[p], hatch="///" if b == ref else None, lw=1.2)
                times.append(r["time_us"])
    ax_t.set_yscale("log")
    if times:
        ax_t.set_ylim(min(times) / 2.5, max(times) * 1.6)
    _time_axis(ax_t, times)
    ax_t.set_xticks(range(len(ops)))
    ax_t.set_xticklabels([FIXED_TITLES[op] for op in ops], fontsize=9)
    ax_t.set_xlim(-0.5, len(ops) - 0.5)
    ax_t.set_ylabel("time per op / step", fontsize=9)
    title = "barrier" if ops == ["barrier"] else "scenarios" if "barrier" not in ops else "barrier and scenarios"
    ax_t.set_title(title, fontsize=11, fontweight="bold", loc="left")
    ax_t.grid(True, which="major", axis="y", alpha=0.35)
    if nb > 1:
        ax_t.legend(handles=[Patch(facecolor="gray", edgecolor="gray", label="godist"),
                             Patch(facecolor="white", edgecolor="gray", hatch="///", label=ref)],
                    fontsize=8, loc="upper left")
    if ax_r is None:
        return
    ax_t.tick_params(labelbottom=False)
    ratios = []
    for i, op in enumerate(ops):
        for j, p in enumerate(Ps):
            r = next((r for r in rows if r["op"] == op and r["world_size"] == p and r["backend"] == "godist"
                      and r.get("godist_speedup")), None)
            if r is not None:
                x = i + (j * nb + nb / 2 - len(Ps) * nb / 2) * width
                ax_r.plot([x], [r["godist_speedup"]], marker="o", ms=6, color=colors[p], ls="none")
                ratios.append(r["godist_speedup"])
    _ratio_axis(ax_r, ratios, ref)
    ax_r.set_xticks(range(len(ops)))
    ax_r.set_xticklabels([FIXED_TITLES[op] for op in ops], fontsize=9)
    ax_r.set_xlim(-0.5, len(ops) - 0.5)


def figure(rows, ratio: bool = True, ref: str = "gloo"):
    """The matplotlib Figure of the rows (None when nothing can be drawn).
    Its axes carry a ``godist_panel`` attribute: (op or "fixed", "time" or
    "ratio")."""
    from matplotlib.figure import Figure
    from matplotlib.gridspec import GridSpec, GridSpecFromSubplotSpec
    from matplotlib.lines import Line2D

    Ps = sorted({r["world_size"] for r in rows})
    colors = {p: COLORS[i % len(COLORS)] for i, p in enumerate(Ps)}
    backends = [b for b in STYLE if any(r["backend"] == b for r in rows)]
    sized = [op for op in OPS if op not in FIXED_OPS and any(r["op"] == op and r["dtype"] == "float32" and _ok(r)
                                                             for r in rows)]
    fixed = [op for op in FIXED_OPS if any(r["op"] == op and _ok(r) for r in rows)]
    panels = sized + (["fixed"] if fixed else [])
    if not panels:
        return None
    ncols = 1 if len(panels) == 1 else 2
    nrows = math.ceil(len(panels) / ncols)
    row_h = 4.6 if ratio else 3.3
    top_in = 1.15
    fig = Figure(figsize=(6.6 * ncols + 0.4, row_h * nrows + top_in))
    outer = GridSpec(nrows, ncols, figure=fig, hspace=0.36, wspace=0.2, left=0.07 if ncols == 2 else 0.12,
                     right=0.98, bottom=0.45 / (row_h * nrows + top_in) * 1.5,
                     top=1 - top_in / (row_h * nrows + top_in))
    for i, name in enumerate(panels):
        cell = outer[i // ncols, i % ncols]
        if ratio:
            inner = GridSpecFromSubplotSpec(2, 1, subplot_spec=cell, height_ratios=[2.7, 1.2], hspace=0.07)
            ax_t = fig.add_subplot(inner[0])
            ax_r = fig.add_subplot(inner[1], sharex=ax_t)
            ax_r.godist_panel = (name, "ratio")
        else:
            ax_t, ax_r = fig.add_subplot(cell), None
        ax_t.godist_panel = (name, "time")
        if name == "fixed":
            _fixed_panel(ax_t, ax_r, rows, fixed, Ps, colors, backends, ref)
        else:
            _sized_panel(ax_t, ax_r, rows, name, Ps, colors, ref)
        for ax in (ax_t, ax_r):
            if ax is not None:
                ax.tick_params(labelsize=8.5)

    handles = [Line2D([], [], color=colors[p], lw=3, label=f"P={p}") for p in Ps]
    for b in backends:
        st = STYLE[b]
        handles.append(Line2D([], [], color="black", ls=st["ls"], marker=st["marker"], mfc=st["mfc"] or "black",
                              label=b))
    if any(r["variant"] != "native" and r["op"] not in SCENARIO_OPS and _ok(r) for r in rows):
        handles.append(Line2D([], [], color="black", ls=FALLBACK_STYLE["ls"], marker=FALLBACK_STYLE["marker"],
                              mfc="white", label="gloo all_reduce+chunk fallback"))
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=10, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.42 / (row_h * nrows + top_in)))
    what = " vs ".join(backends)
    title = f"{what}: time per op (log-log, lower is better)"
    if ratio:
        title += f"; under each panel godist's speed = t_{ref} / t_godist (above x1: godist faster)"
    fig.suptitle(title, fontsize=12, y=1 - 0.12 / (row_h * nrows + top_in), va="top")
    return fig


def plot(rows, path, ratio: bool = True, ref: str = "gloo") -> bool:
    """Write the PNG; False (and no file) when no row can be drawn."""
    fig = figure(rows, ratio, ref)
    if fig is None:
        return False
    fig.savefig(path, dpi=100)
    return True
