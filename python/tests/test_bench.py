"""``python -m godist.bench --smoke`` end to end: exit status 0, the markdown
and CSV files with the expected columns, a row for both backends in every
cell, no wrong elements. No timing assertions."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys

import pytest

from godist.bench.config import MALLOC_ENV

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

OPS = {"all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "barrier",
       "send_recv"}
SCENARIOS = {"ddp_step", "infer_loop", "async_loop"}
CSV_COLUMNS = {"world_size", "op", "variant", "backend", "dtype", "redop", "nominal_bytes", "size_bytes", "count",
               "n_iters", "repeats", "time_us", "algbw_GBps", "busbw_GBps", "p50_us", "p95_us", "cpu_us_per_op",
               "godist_speedup", "wrong", "status", "transport"}
MD_HEADER = ("| P | size | count | type | redop | backend | time (µs) | algbw (GB/s) | busbw (GB/s) | p50 (µs) "
             "| p95 (µs) | CPU/op (µs) | n | #wrong | godist/gloo |")


@pytest.mark.timeout(300)
def test_bench_smoke(tmp_path):
    out = tmp_path / "perf"
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "godist.bench", "--smoke", "--out", str(out)], cwd=str(tmp_path),
                       env=env, capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    # The machine header and progress go to stderr.
    assert "CPU:" in p.stderr and "torch:" in p.stderr and "loadavg" in p.stderr, p.stderr
    assert "[P=2" in p.stderr, p.stderr
    # The ranks start with glibc's malloc thresholds pinned (config.MALLOC_ENV),
    # and the DDP rows say how many page faults each backend's steps took.
    if not any(k in os.environ for k in MALLOC_ENV):
        for k, v in MALLOC_ENV.items():
            assert f"{k}={v}" in p.stderr, p.stderr

    with open(out / "results.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert CSV_COLUMNS <= set(reader.fieldnames), reader.fieldnames
        rows = list(reader)
    assert rows
    assert {r["op"] for r in rows} == OPS | SCENARIOS
    cells = {}
    for r in rows:
        cells.setdefault((r["world_size"], r["op"], r["dtype"], r["nominal_bytes"]), []).append(r)
        assert r["wrong"] == "0", r
        assert r["status"] in ("ok", "unsupported"), r
    for key, rs in cells.items():
        backends = {r["backend"] for r in rs if r["status"] == "ok"}
        assert backends == {"godist", "gloo"}, (key, rs)
        for r in rs:
            if r["status"] == "ok":
                assert float(r["time_us"]) > 0 and float(r["cpu_us_per_op"]) >= 0, r
                assert float(r["godist_speedup"]) > 0, r
                if r["op"] not in ("barrier",) + tuple(SCENARIOS):
                    assert float(r["algbw_GBps"]) > 0 and float(r["busbw_GBps"]) > 0, r
    ddp_rows = [r for r in rows if r["op"] == "ddp_step"]
    assert {r["backend"] for r in ddp_rows} == {"godist", "gloo"}, ddp_rows
    for r in ddp_rows:
        assert re.search(r"; \d+ page faults per step", r["variant"]), r
    # bfloat16 and int64 spot cells ran.
    assert {"float32", "bfloat16", "int64"} <= {r["dtype"] for r in rows}

    md = (out / "results.md").read_text()
    assert "## godist/gloo speed ratio" in md
    # how fast the machine ran Python around the world size (machine.python_loop_ms)
    m = re.search(r"pyloop:  P=2 ([\d.]+) / ([\d.]+) ms", md)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, md
    assert md.count(MD_HEADER) == len(OPS), md
    for op in OPS:
        assert f"### {op}" in md
        body = md.split(f"### {op}", 1)[1].split("\n### ", 1)[0]
        lines = [ln for ln in body.splitlines() if ln.startswith("| 2 |")]
        assert any("| godist |" in ln for ln in lines) and any("| gloo |" in ln for ln in lines), body
        for ln in lines:
            assert ln.split("|")[14].strip() == "0", ln  # #wrong
    assert "| ddp_step |" in md and "| infer_loop |" in md and "| async_loop |" in md
    assert (out / "results.png").stat().st_size > 1000

    # --render rebuilds the report from results.csv + meta.json alone.
    (out / "results.md").unlink()
    r = subprocess.run([sys.executable, "-m", "godist.bench", "--render", str(out), "--no-plot"], cwd=str(tmp_path),
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    md2 = (out / "results.md").read_text()
    assert md2.count(MD_HEADER) == len(OPS) and "p50 latency" in md2 and m.group(0) in md2


@pytest.mark.timeout(300)
def test_bench_gloo_reduce_scatter_fallback(tmp_path):
    """Where gloo lacks reduce_scatter_tensor (simulated), the cell says
    "unsupported" and the all_reduce + chunk fallback is timed, labelled."""
    out = tmp_path / "perf"
    env = dict(os.environ, GODIST_BENCH_GLOO_NO_RS="1",
               PYTHONPATH=os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "godist.bench", "--smoke", "--ops", "reduce_scatter_tensor",
                        "--scenarios", "none", "--spot-dtypes", "", "--no-plot", "--out", str(out)],
                       cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["backend"], r["variant"], r["status"]) for r in rows} == {
        ("godist", "native", "ok"), ("gloo", "native", "unsupported"), ("gloo", "all_reduce+chunk fallback", "ok")}
    assert all(r["wrong"] == "0" for r in rows), rows
    assert not (out / "results.png").exists()
    assert "all_reduce+chunk fallback" in (out / "results.md").read_text()


def _write_run(folder, times):
    """A results.csv with godist and gloo rows for {(P, op, bytes): (godist µs, gloo µs)}."""
    os.makedirs(folder, exist_ok=True)
    cols = ["world_size", "op", "variant", "backend", "dtype", "redop", "nominal_bytes", "time_us", "godist_speedup",
            "status"]
    with open(os.path.join(folder, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        for (p, op, nbytes), (g, gl) in times.items():
            base = dict(world_size=p, op=op, variant="native", dtype="float32", redop="sum", nominal_bytes=nbytes,
                        godist_speedup=gl / g, status="ok")
            w.writerow(dict(base, backend="godist", time_us=g))
            w.writerow(dict(base, backend="gloo", time_us=gl))


def test_bench_compare_flags_only_slowdowns_beyond_noise(tmp_path):
    """python -m godist.bench.compare: a cell slower than the base's slowest
    run by more than the tolerance, in time and in speed against gloo, is
    reported; one within the base's noise, or one whose gloo slowed as much,
    is not."""
    from godist.bench import compare
    a, b, c = (2, "all_reduce", 8), (2, "broadcast", 8), (4, "barrier", 0)
    _write_run(tmp_path / "b1", {a: (10.0, 100.0), b: (10.0, 100.0), c: (10.0, 100.0)})
    _write_run(tmp_path / "b2", {a: (11.0, 100.0), b: (12.0, 100.0), c: (10.0, 100.0)})
    # a: 30% slower; b: within the base's spread; c: godist and gloo both 30% slower (the machine)
    _write_run(tmp_path / "n1", {a: (13.0, 100.0), b: (12.0, 100.0), c: (13.0, 130.0)})
    out = tmp_path / "cmp.md"
    rc = compare.main(["--base", str(tmp_path / "b1"), str(tmp_path / "b2"), "--new", str(tmp_path / "n1"),
                       "--out", str(out)])
    text = out.read_text()
    assert rc == 1
    assert "Slower cells: 2 all_reduce float32 sum 8\n" in text, text
    assert "| 2 | broadcast |" in text and "| 4 | barrier |" in text
    _write_run(tmp_path / "n2", {a: (11.0, 100.0), b: (11.0, 100.0), c: (10.0, 100.0)})
    assert compare.main(["--base", str(tmp_path / "b1"), str(tmp_path / "b2"), "--new", str(tmp_path / "n2"),
                         "--out", str(out)]) == 0
    with pytest.raises(SystemExit):
        compare.main(["--base", str(tmp_path / "b1"), "--new", str(tmp_path / "n2")])


# ----- the plot -------------------------------------------------------------------------------------------------------

def _rows(Ps=(2, 4), backends=("godist", "gloo")):
    """Rows as the ranks send them: all_reduce at two sizes, a barrier and an
    inference loop per world size, godist 10x faster."""
    rows = []
    for P in Ps:
        for op, size in (("all_reduce", 8), ("all_reduce", 65536), ("barrier", 0), ("infer_loop", 25395)):
            for b in backends:
                t = (20.0 if b == "godist" else 200.0) * P * (1 + size / 4096)
                r = dict(world_size=P, op=op, variant="native" if op != "infer_loop" else "100 x all_reduce",
                         backend=b, dtype="float32" if op != "barrier" else "-", redop="sum", nominal_bytes=size,
                         size_bytes=size, count=size // 4, status="ok", wrong=0, time_us=t)
                if len(backends) == 2:
                    r["godist_speedup"] = 10.0
                rows.append(r)
    return rows


@pytest.mark.timeout(60)
def test_bench_plot_panels(tmp_path):
    """The figure: a log-log time panel per operation with a speed-ratio
    strip under it, a panel for the barrier and the scenarios, a legend
    entry per world size; with one backend, no ratio strips."""
    pytest.importorskip("matplotlib")
    from godist.bench import plot

    fig = plot.figure(_rows())
    panels = {ax.godist_panel: ax for ax in fig.axes if hasattr(ax, "godist_panel")}
    assert set(panels) == {("all_reduce", "time"), ("all_reduce", "ratio"), ("fixed", "time"), ("fixed", "ratio")}
    t = panels[("all_reduce", "time")]
    assert t.get_xscale() == "log" and t.get_yscale() == "log"
    assert panels[("all_reduce", "ratio")].get_yscale() == "log"
    assert len(t.get_lines()) == 4  # 2 world sizes x 2 backends
    assert [tx.get_text() for tx in panels[("fixed", "ratio")].get_xticklabels()] == ["barrier", "inference loop"]
    labels = [tx.get_text() for lg in fig.legends for tx in lg.get_texts()]
    assert labels == ["P=2", "P=4", "godist", "gloo"], labels

    one = plot.figure(_rows(backends=("godist",)), ratio=False)
    panels = {ax.godist_panel: ax for ax in one.axes if hasattr(ax, "godist_panel")}
    assert set(panels) == {("all_reduce", "time"), ("fixed", "time")}
    assert [tx.get_text() for tx in panels[("fixed", "time")].get_xticklabels()] == ["barrier", "inference loop"]
    assert [tx.get_text() for lg in one.legends for tx in lg.get_texts()] == ["P=2", "P=4", "godist"]
    assert "gloo" not in one._suptitle.get_text()

    png = tmp_path / "p.png"
    assert plot.plot(_rows(), str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000
