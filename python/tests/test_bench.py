"""``python -m godist.bench --smoke`` end to end: exit status 0, the markdown
and CSV files with the expected columns, a row for both backends in every
cell, no wrong elements. No timing assertions."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import pytest

from godist.bench.config import MALLOC_ENV

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

OPS = {"all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "barrier",
       "send_recv"}
SCENARIOS = {"ddp_step", "infer_loop", "async_loop", "recreate"}
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
    assert "| ddp_step |" in md and "| infer_loop |" in md and "| async_loop |" in md and "| recreate |" in md
    # the recreate scenario: a group made anew each time, gloo's beside it
    rec = [r for r in rows if r["op"] == "recreate"]
    assert {r["backend"] for r in rec} == {"godist", "gloo"}, rec
    for r in rec:
        assert re.search(r"creation alone [\d.]+ ms", r["variant"]) and int(r["n_iters"]) >= 1, r
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


# ----- the live output: table on stdout, progress on stderr, filters, plot ----------------------------------------

TINY = ["--world-sizes", "2", "--sizes", "8,64K", "--ops", "all_reduce,broadcast", "--scenarios", "none",
        "--spot-dtypes", "", "--target-ms", "4", "--repeats", "2"]
PROGRESS_LINE = re.compile(r"^\[P=2 \d\d:\d\d\] \[(\d+)/(\d+) ETA (?:\d\d:\d\d|--:--)\] (\S+) float32 ([\d.]+ \w+): ")


def _env():
    return dict(os.environ, PYTHONPATH=os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _table_rows(text):
    """The result table's data rows: lines of the stdout table that are not
    comments, split into fields."""
    return [ln.split() for ln in text.splitlines() if ln.strip() and ln.lstrip()[0].isdigit()]


@pytest.mark.timeout(150)
def test_bench_prints_table_rows_as_cells_finish(tmp_path):
    """Through pipes (no terminal): one plain progress line per cell on
    stderr, and each cell's table row on stdout before the next cell's
    progress line, that is, as the cell finishes, not at the end."""
    out = tmp_path / "perf"
    p = subprocess.run([sys.executable, "-m", "godist.bench", *TINY, "--no-plot", "--out", str(out)],
                       cwd=str(tmp_path), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=140)
    both = p.stdout
    assert p.returncode == 0, both
    assert "\r" not in both and "\x1b[" not in both, "a status line was drawn into a pipe"
    lines = both.splitlines()
    progress = [(i, PROGRESS_LINE.match(ln)) for i, ln in enumerate(lines) if PROGRESS_LINE.match(ln)]
    assert [(int(m.group(1)), int(m.group(2))) for _, m in progress] == [(1, 4), (2, 4), (3, 4), (4, 4)], both
    assert [(m.group(3), m.group(4)) for _, m in progress] == [
        ("all_reduce", "8 B"), ("all_reduce", "64 KiB"), ("broadcast", "8 B"), ("broadcast", "64 KiB")], both
    rows = [(i, ln.split()) for i, ln in enumerate(lines) if ln.strip() and ln.lstrip()[0].isdigit()]
    assert [(r[0], r[2], r[3]) for _, r in rows] == [("8", "float32", "sum"), ("65536", "float32", "sum"),
                                                     ("8", "float32", "-"), ("65536", "float32", "-")], both
    for k in range(3):
        assert rows[k][0] < progress[k + 1][0], f"row {k + 1} was not printed before cell {k + 2} finished:\n{both}"
    wrote = next(i for i, ln in enumerate(lines) if ln.startswith("wrote "))
    assert rows[-1][0] < wrote
    # A header per operation, nccl-tests columns, both backends and the ratio.
    assert "# all_reduce, P=2" in both and "# broadcast, P=2" in both
    heads = [ln for ln in lines if ln.split()[:2] == ["#", "size"]]
    assert len(heads) == 2 and all(h.split()[1:] == ["size", "count", "type", "redop"] + ["time", "algbw", "busbw",
                                   "#wrong"] * 2 + ["godist/gloo"] for h in heads), heads
    with open(out / "results.csv", newline="") as f:
        csv_rows = [r for r in csv.DictReader(f) if r["backend"] == "godist"]
    for (_, r), c in zip(rows, csv_rows):
        assert len(r) == 13, r
        assert r[4] == f"{float(c['time_us']):.2f}" and r[12] == f"{float(c['godist_speedup']):.2f}", (r, c)


@pytest.mark.timeout(150)
def test_bench_backends_godist_alone(tmp_path):
    """--backends godist: no gloo group, no gloo rows, no ratio anywhere (the
    CSV keeps the column, empty); the DDP scenario is checked against the
    harness instead of gloo."""
    import importlib.util

    out = tmp_path / "perf"
    p = subprocess.run([sys.executable, "-m", "godist.bench", "--smoke", "--backends", "godist", "--sizes", "8,64K",
                        "--ops", "all_reduce,barrier", "--scenarios", "ddp", "--spot-dtypes", "", "--out", str(out)],
                       cwd=str(tmp_path), env=_env(), capture_output=True, text=True, timeout=140)
    assert p.returncode == 0, f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    assert "gloo" not in p.stdout, p.stdout
    rows = _table_rows(p.stdout)
    assert len(rows) == 4 and all(len(r) == 8 for r in rows), p.stdout  # size count type redop + one group
    with open(out / "results.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert CSV_COLUMNS <= set(reader.fieldnames)
        csv_rows = list(reader)
    assert {r["op"] for r in csv_rows} == {"all_reduce", "barrier", "ddp_step"}
    assert {r["backend"] for r in csv_rows} == {"godist"}
    assert all(r["godist_speedup"] == "" and r["wrong"] == "0" and r["status"] == "ok" for r in csv_rows), csv_rows
    with open(out / "meta.json") as f:
        meta = json.load(f)
    assert meta["backends"] == ["godist"]
    assert not any("gloo" in k and "harness" not in k for k in meta["setup"]["2"]["times"]), meta["setup"]
    md = (out / "results.md").read_text()
    assert "godist/gloo" not in md and "speed ratio" not in md, md
    assert md.count(MD_HEADER.rsplit(" godist/gloo |", 1)[0]) == 2, md
    if importlib.util.find_spec("matplotlib"):
        assert (out / "results.png").stat().st_size > 1000
    else:
        assert not (out / "results.png").exists() and "plot failed" in md


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


def test_bench_progress_on_a_terminal_redraws_one_status_line():
    """On a terminal the status line is redrawn in place (cell i of N,
    elapsed, ETA) and what is printed goes above it; elsewhere one plain
    line per cell."""
    import io

    from godist.bench.progress import Progress

    class Clock:
        t = 0.0

        def __call__(self):
            return self.t

    rows = _rows(Ps=(2,))
    cells = [[r for r in rows if r["op"] == op and r["nominal_bytes"] == s] for op, s in
             (("all_reduce", 8), ("all_reduce", 65536), ("barrier", 0))]
    clock, err, out = Clock(), io.StringIO(), io.StringIO()
    pr = Progress(3, worlds=1, stream=err, tty=True, clock=clock, columns=200)
    pr.start_world(2, ["all_reduce float32 8 B", "all_reduce float32 64 KiB", "barrier"])
    assert "starting 2 ranks" in err.getvalue()
    clock.t = 4.0
    pr.ready()
    for k, cell in enumerate(cells):
        clock.t += 10.0
        pr.print_to(out, f"row {k}")
        pr.item_done(cell)
    pr.end_world()
    pr.close()
    text = err.getvalue()
    assert "\n" not in text and text.count("\r\x1b[K") >= 6, repr(text)
    assert "1/3" in text and "running: all_reduce float32 64 KiB" in text and "elapsed 00:14" in text
    assert "ETA 00:20" in text  # 10 s per cell, two cells left
    assert text.endswith("\r\x1b[K") and out.getvalue() == "row 0\nrow 1\nrow 2\n"

    plain = io.StringIO()
    pr = Progress(3, stream=plain, clock=clock)  # StringIO is no terminal
    pr.start_world(2, ["a", "b", "c"])
    pr.ready()
    for cell in cells:
        pr.item_done(cell)
    pr.end_world()
    lines = plain.getvalue().splitlines()
    assert len(lines) == 3 and "\r" not in plain.getvalue(), lines
    assert lines[0].startswith("[P=2 ") and "[1/3 ETA" in lines[0] and "godist/gloo x10.00" in lines[0], lines


def test_bench_filters_compose_and_bad_options_are_refused(capsys):
    """--ops, --sizes, --world-sizes, --backends combine (also with a preset);
    a bad value is refused with exit status 2 and a message naming the option."""
    from godist.bench import cli
    from godist.bench.config import cell_list

    cfg = cli.config_from_args(cli.build_parser().parse_args(
        ["--smoke", "--ops", "allreduce,barrier,reduce_scatter", "--sizes", "1K,8", "--world-sizes", "3,2",
         "--backends", "gloo", "--spot-dtypes", "int64"]))
    assert cfg.world_sizes == [3, 2] and cfg.sizes == [8, 1024] and cfg.backends == ["gloo"]
    assert cell_list(cfg) == [("all_reduce", "float32", 8), ("all_reduce", "float32", 1024),
                              ("all_reduce", "int64", 1024), ("barrier", "float32", 0),
                              ("reduce_scatter_tensor", "float32", 8), ("reduce_scatter_tensor", "float32", 1024),
                              ("reduce_scatter_tensor", "int64", 1024)]
    assert cli.config_from_args(cli.build_parser().parse_args(["--backends", "gloo,godist"])).backends == [
        "godist", "gloo"]
    for args, words in ((["--backends", "nccl"], "--backends: unknown 'nccl'"),
                        (["--sizes", "4X"], "--sizes: not a size: '4X'"),
                        (["--world-sizes", "two"], "--world-sizes: expected comma-separated whole numbers"),
                        (["--world-sizes", "1,2"], "--world-sizes: every world size must be at least 2"),
                        (["--min-bytes", "1M", "--max-bytes", "4K"], "no sizes"),
                        (["--spot-dtypes", "float8"], "--spot-dtypes: unknown 'float8'"),
                        (["--ops", "allgather,gather"], "--ops: unknown operation 'gather'")):
        with pytest.raises(SystemExit) as e:
            cli.main(args)
        assert e.value.code == 2, args
        assert words in capsys.readouterr().err, args


@pytest.mark.timeout(240)
def test_bench_layers_table():
    """python -m godist.bench.layers times one all_reduce through every layer
    and prints a row per layer, each cell a time and what the layer adds."""
    from godist.bench import layers

    out = subprocess.run([sys.executable, "-m", "godist.bench.layers", "--sizes", "8,4K", "--rounds", "1",
                          "--target-ms", "2"], capture_output=True, text=True, timeout=220)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("| ")}
    assert set(layers.LAYERS) <= set(rows), out.stdout
    assert "| layer | 8 B | 4 KiB |" in out.stdout
    for name in layers.LAYERS:
        cells = [c.strip() for c in rows[name].split("|")[2:-1]]
        assert len(cells) == 2, rows[name]
        for c in cells:
            assert float(c.split()[0]) > 0, rows[name]
            assert (" (" in c) == (name not in ("ctypes", "gloo")), rows[name]
