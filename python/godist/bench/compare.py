"""Compare benchmark runs of two builds: ``python -m godist.bench.compare``.

Give it the output folders (``results.csv``) of at least two runs of the
base build and one or more of the new build, made on the same machine in the
same hour, best alternating (base, new, base, new). For each cell it
reports godist's time per op in every run, the new time over the base time
(medians over runs), and the noise of the base, the largest over the
smallest of its runs. A cell counts as slower when the new median exceeds
the slowest base run by more than the tolerance (5% by default): a change
smaller than what the same code varies by is not a finding.

The same is reported for godist's speed against gloo measured in the same
run, which cancels what the machine's own speed did between runs.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys


def _load(folder: str) -> dict:
    """{cell key: (godist time µs, speedup against gloo)} of one run."""
    path = folder if folder.endswith(".csv") else os.path.join(folder, "results.csv")
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["backend"] != "godist" or row["status"] != "ok":
                continue
            # A scenario's variant ends with what its run measured ("; 2048
            # page faults per step"): not part of the cell's identity.
            key = (int(row["world_size"]), row["op"], row["variant"].split(";")[0], row["dtype"], row["redop"],
                   int(row["nominal_bytes"]))
            speed = float(row["godist_speedup"]) if row.get("godist_speedup") else float("nan")
            out[key] = (float(row["time_us"]), speed)
    return out


def compare(base: list[dict], new: list[dict], tolerance: float = 0.05) -> tuple[list[dict], list[dict]]:
    """Rows for every cell present in all runs, and the rows of the cells
    found slower (see the module's docstring)."""
    keys = set(base[0])
    for run in base[1:] + new:
        keys &= set(run)
    rows, slower = [], []
    for key in sorted(keys):
        bt = [r[key][0] for r in base]
        nt = [r[key][0] for r in new]
        bs = [r[key][1] for r in base]
        ns = [r[key][1] for r in new]
        row = {
            "key": key,
            "base": bt,
            "new": nt,
            "ratio": statistics.median(nt) / statistics.median(bt),
            "noise": max(bt) / min(bt),
            "speed_ratio": statistics.median(bs) / statistics.median(ns),
            "speed_noise": max(bs) / min(bs),
        }
        row["slower"] = statistics.median(nt) > max(bt) * (1 + tolerance) and \
            row["speed_ratio"] > row["speed_noise"] * (1 + tolerance)
        rows.append(row)
        if row["slower"]:
            slower.append(row)
    return rows, slower


def _fmt_key(key) -> list[str]:
    p, op, variant, dtype, redop, nbytes = key
    name = op if variant in ("native", "") else f"{op} ({variant})"
    return [str(p), name, f"{dtype} {redop}".strip(), str(nbytes)]


def render(rows: list[dict], slower: list[dict], base_names: list[str], new_names: list[str], tolerance: float) -> str:
    """The comparison as Markdown."""
    head = ["P", "op", "dtype", "bytes"] + [f"{n} µs" for n in base_names] + [f"{n} µs" for n in new_names] + \
        ["new/base time", "base noise", "base/new speed vs gloo", "base noise (speed)"]
    lines = [f"Cells: {len(rows)}. Slower beyond the base's own noise by more than {tolerance:.0%} (in time per op "
             f"and in speed against gloo): {len(slower)}.", ""]
    if slower:
        lines += ["Slower cells: " + "; ".join(" ".join(_fmt_key(r["key"])) for r in slower), ""]
    ratios = sorted(r["ratio"] for r in rows)
    if ratios:
        lines += [f"new/base time: median {statistics.median(ratios):.3f}, lowest {ratios[0]:.3f}, highest "
                  f"{ratios[-1]:.3f}. Base noise: median {statistics.median(r['noise'] for r in rows):.3f}.", ""]
    lines += ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for r in rows:
        cells = _fmt_key(r["key"]) + [f"{t:.1f}" for t in r["base"]] + [f"{t:.1f}" for t in r["new"]]
        cells += [f"{r['ratio']:.3f}" + (" **slower**" if r["slower"] else ""), f"{r['noise']:.3f}",
                  f"{r['speed_ratio']:.3f}", f"{r['speed_noise']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m godist.bench.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", nargs="+", required=True, help="output folders of the base build's runs (two or more)")
    ap.add_argument("--new", nargs="+", required=True, help="output folders of the new build's runs")
    ap.add_argument("--tolerance", type=float, default=0.05, help="allowed slowdown beyond the noise (default 0.05)")
    ap.add_argument("--out", help="write the Markdown here (default: standard output)")
    a = ap.parse_args(argv)
    if len(a.base) < 2:
        ap.error("--base needs two runs or more: their spread is the noise")
    base = [_load(d) for d in a.base]
    new = [_load(d) for d in a.new]
    rows, slower = compare(base, new, a.tolerance)
    text = render(rows, slower, [f"base-{i + 1}" for i in range(len(base))], [f"new-{i + 1}" for i in range(len(new))],
                  a.tolerance)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
