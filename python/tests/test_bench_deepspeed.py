"""``python -m godist.bench --vs deepspeed``: godist beside DeepSpeed's CPU
all-reduce kernel and gloo.

DeepSpeed is an optional extra of the benchmark: the tests that run it skip
where it is not installed (pip install 'godist[bench]'); the message and exit
status without it, the options and the package's independence of it are
checked everywhere. No timing assertions."""

from __future__ import annotations

import csv
import glob
import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLUMNS = ["godist", "godist-op", "deepspeed", "deepspeed-op", "gloo"]
needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed (pip install 'godist[bench]' or pip install deepspeed)")


def _env(**extra):
    return dict(os.environ, PYTHONPATH=os.path.join(REPO, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""),
                **extra)


def _bench(tmp_path, args, timeout, **env):
    return subprocess.run([sys.executable, "-m", "godist.bench", "--vs", "deepspeed", *args], cwd=str(tmp_path),
                          env=_env(**env), capture_output=True, text=True, timeout=timeout)


def _shm_files():
    return set(glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_*"))


@pytest.mark.timeout(120)
def test_bench_vs_deepspeed_without_deepspeed_says_how_to_install(tmp_path):
    """Without deepspeed (GODIST_BENCH_NO_DEEPSPEED=1 hides an installed one)
    the mode says how to install it and exits 2, having started nothing; and
    neither godist nor the benchmark's modules import deepspeed."""
    out = tmp_path / "out"
    p = _bench(tmp_path, ["--out", str(out)], 100, GODIST_BENCH_NO_DEEPSPEED="1")
    assert p.returncode == 2, f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    assert "DeepSpeed is not installed" in p.stderr, p.stderr
    assert "pip install 'godist[bench]'" in p.stderr and "pip install deepspeed" in p.stderr, p.stderr
    assert p.stdout == "" and not out.exists()

    code = ("import sys, godist, godist.bench.cli, godist.bench.ds, godist.bench.ds_worker, godist.bench.ds_report\n"
            "assert 'deepspeed' not in sys.modules, sorted(m for m in sys.modules if 'deepspeed' in m)")
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, r.stderr


@pytest.mark.timeout(60)
def test_bench_vs_deepspeed_options(capsys):
    """The defaults are the comparison's table (all_reduce at P=2,4, 4 KiB to
    16 MiB in x8 steps, float32 and bfloat16, five columns); the filters
    work; what the mode cannot do is refused with exit status 2."""
    from godist.bench import cli, ds
    from godist.bench.config import cell_list

    parse = cli.build_parser().parse_args
    cfg = ds.config_from_args(parse(["--vs", "deepspeed"]))
    assert cfg.vs == "deepspeed" and cfg.backends == COLUMNS and cfg.ops == ["all_reduce"]
    assert cfg.world_sizes == [2, 4] and cfg.dtypes == ["float32", "bfloat16"]
    assert cfg.sizes == [4 << 10, 32 << 10, 256 << 10, 2 << 20, 16 << 20]
    assert cell_list(cfg) == [("all_reduce", dt, s) for dt in ("float32", "bfloat16") for s in cfg.sizes]
    cfg = ds.config_from_args(parse(["--vs", "deepspeed", "--smoke", "--sizes", "1M,8K", "--dtypes", "float16",
                                     "--world-sizes", "3"]))
    assert cfg.world_sizes == [3] and cfg.sizes == [8 << 10, 1 << 20] and cfg.dtypes == ["float16"]
    for args, words in ((["--ops", "broadcast"], "--vs deepspeed times all_reduce only"),
                        (["--dtypes", "int64"], "--dtypes: unknown 'int64'"),
                        (["--backends", "gloo"], "--backends: --vs deepspeed always times its five columns"),
                        (["--world-sizes", "1"], "every world size must be at least 2"),
                        (["--device", "cuda"], "--vs deepspeed times CPU tensors"),
                        (["--mpi"], "--vs deepspeed spawns its ranks on this host")):
        with pytest.raises(SystemExit) as e:
            cli.main(["--vs", "deepspeed", *args])
        assert e.value.code == 2, args
        assert words in capsys.readouterr().err, args
    with pytest.raises(SystemExit) as e:
        cli.main(["--dtypes", "float32"])
    assert e.value.code == 2 and "--dtypes goes with --vs deepspeed" in capsys.readouterr().err


@needs_deepspeed
@pytest.mark.timeout(400)
def test_bench_vs_deepspeed_smoke(tmp_path):
    """--vs deepspeed --smoke (P=2, 4 KiB and 32 KiB, float32 and bfloat16):
    five columns per cell, all checked right, the two ratios; where the CPU
    lacks avx512bw, DeepSpeed's bfloat16 cells are its fallback and its bare
    op is not called. Its shared-memory files are gone afterwards."""
    from godist.bench.ds_worker import DS_FALLBACK, cpu_kernel_level

    before = _shm_files()
    out = tmp_path / "out"
    p = _bench(tmp_path, ["--smoke", "--out", str(out)], 380)
    assert p.returncode == 0, f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    assert "# all_reduce, P=2" in p.stdout and "godist/ds" in p.stdout, p.stdout
    assert "built successfully" not in p.stdout  # DeepSpeed's prints go to stderr, not into the table
    assert "deepspeed: " in p.stderr and "vector_kernel_level" in p.stderr, p.stderr
    assert not (_shm_files() - before), _shm_files() - before

    with open(out / "results.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert {"ds_speedup", "op_speedup", "godist_speedup", "wrong", "status"} <= set(reader.fieldnames)
        rows = list(reader)
    cells = {}
    for r in rows:
        cells.setdefault((r["dtype"], int(r["nominal_bytes"])), {})[r["backend"]] = r
    assert sorted(cells) == [(dt, s) for dt in ("bfloat16", "float32") for s in (4096, 32768)], sorted(cells)
    short = cpu_kernel_level() < 2
    for (dt, size), by in cells.items():
        assert list(by) == COLUMNS, by.keys()
        for c, r in by.items():
            if dt == "bfloat16" and short and c == "deepspeed-op":
                assert r["status"] == "unsupported" and r["error"] == "unsupported on this CPU (needs avx512bw)", r
                continue
            assert r["status"] == "ok" and r["wrong"] == "0" and float(r["time_us"]) > 0, r
        want = DS_FALLBACK if dt == "bfloat16" and short else "native"
        assert by["deepspeed"]["variant"] == want, by["deepspeed"]
        assert float(by["godist"]["ds_speedup"]) > 0 and float(by["godist"]["godist_speedup"]) > 0, by["godist"]
        assert (by["godist"]["op_speedup"] == "") == (dt == "bfloat16" and short), by["godist"]

    md = (out / "results.md").read_text()
    assert "## all_reduce, time per op (µs)" in md and "| godist/DeepSpeed | direct op/bare op |" in md, md
    main, _, detail = md.partition("## Per column")
    assert main.count("| 2 | 4 KiB |") == 2 and detail.count("| 2 | 4 KiB |") == 2 * len(COLUMNS), md
    if short:
        assert "unsupported on this CPU (needs avx512bw)" in md and "†" in md, md
    # --render rebuilds the report from results.csv and meta.json alone.
    (out / "results.md").unlink()
    r = subprocess.run([sys.executable, "-m", "godist.bench", "--render", str(out), "--no-plot"], cwd=str(tmp_path),
                       env=_env(), capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, r.stderr
    assert (out / "results.md").read_text() == md


@needs_deepspeed
@pytest.mark.timeout(300)
def test_bench_vs_deepspeed_counts_wrong_results(tmp_path):
    """A DeepSpeed result that is wrong is counted (#wrong), reported and
    fails the run (exit 1): GODIST_BENCH_DS_WRONG=1 makes rank 0 add 1 to
    every element the bare op returns."""
    out = tmp_path / "out"
    p = _bench(tmp_path, ["--smoke", "--sizes", "4K", "--dtypes", "float32", "--no-plot", "--out", str(out)], 280,
               GODIST_BENCH_DS_WRONG="1")
    assert p.returncode == 1, f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    assert "WRONG: P=2 all_reduce float32 4 KiB deepspeed-op (native): 1024 wrong elements" in p.stderr, p.stderr
    with open(out / "results.csv", newline="") as f:
        wrong = {r["backend"]: r["wrong"] for r in csv.DictReader(f)}
    assert wrong == {"godist": "0", "godist-op": "0", "deepspeed": "0", "deepspeed-op": "1024", "gloo": "0"}, wrong
    assert "WRONG(1024)" in p.stdout and "(**WRONG: 1024**)" in (out / "results.md").read_text()
