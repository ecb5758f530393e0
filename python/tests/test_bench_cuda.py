"""``python -m godist.bench --device cuda``: its options, the busbw factors,
the environment of ranks that share a GPU, the refusal without a GPU, the
whole mode on a stand-in GPU (workers/bench_cuda_fake.py), and, on a machine with a
GPU (``-m gpu``), a tiny run against nccl."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
import torch

from godist.bench import cli, cuda
from godist.bench.config import CUDA_OPS
from godist.bench.worker import busbw_factor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")


def _env():
    path = [os.path.join(REPO, "python"), HERE, WORKERS, os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))


def _cfg(args):
    return cuda.config_from_args(cli.build_parser().parse_args(["--device", "cuda", *args]))


@pytest.mark.timeout(60)
def test_cuda_mode_options(capsys):
    """--device cuda: godist vs nccl, world sizes 1,2, the five collectives,
    8 B to 256 MiB by powers of 4; the filters and presets apply; options
    that have no meaning there are refused (exit 2). Without --device the
    CPU mode's configuration is what it was."""
    cfg = _cfg([])
    assert cfg.device == "cuda" and cfg.ref == "nccl" and cfg.backends == ["godist", "nccl"]
    assert cfg.world_sizes == [1, 2] and cfg.ops == list(CUDA_OPS) and cfg.scenarios == ["ddp"]
    assert cfg.sizes[0] == 8 and cfg.sizes[-1] == 256 << 20 and cfg.sizes[1] == 32 and cfg.spot_dtypes == []
    cfg = _cfg(["--ranks", "2,1", "--sizes", "8,1M", "--ops", "allreduce,bcast", "--backends", "nccl",
                "--issue-ops", "50", "--issue-max-bytes", "64K", "--scenarios", "none"])
    assert cfg.world_sizes == [2, 1] and cfg.sizes == [8, 1 << 20] and cfg.ops == ["all_reduce", "broadcast"]
    assert cfg.backends == ["nccl"] and cfg.issue_ops == 50 and cfg.issue_max_bytes == 64 << 10
    assert cfg.scenarios == []
    q = _cfg(["--quick"])
    assert q.mode == "quick" and q.sizes[0] == 8 and q.sizes[-1] == 256 << 20 and len(q.sizes) <= 6

    cpu = cli.config_from_args(cli.build_parser().parse_args([]))
    assert cpu.device == "cpu" and cpu.ref == "gloo" and cpu.backends == ["godist", "gloo"]
    assert cpu.world_sizes == [2, 4, 8] and cpu.sizes[-1] == 64 << 20 and "barrier" in cpu.ops
    assert cli.config_from_args(cli.build_parser().parse_args(["--ranks", "3"])).world_sizes == [3]

    for args, words in ((["--ops", "barrier"], "--ops: 'barrier' is not benchmarked with --device cuda"),
                        (["--backends", "gloo"], "--backends: unknown 'gloo'"),
                        (["--world-sizes", "0"], "every world size must be at least 1"),
                        (["--scenarios", "infer"], "the ddp scenario only"),
                        (["--spot-dtypes", "int64"], "float32 only"),
                        (["--device", "tpu"], "invalid choice: 'tpu'")):
        with pytest.raises(SystemExit) as e:
            cli.main(["--device", "cuda", *args])
        assert e.value.code == 2, args
        assert words in capsys.readouterr().err, args


@pytest.mark.timeout(30)
def test_busbw_factors():
    """nccl-tests: all_reduce 2(n-1)/n, all_gather and reduce_scatter
    (n-1)/n, broadcast 1, all_to_all (n-1)/n."""
    for n in (1, 2, 4, 8):
        assert busbw_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
        for op in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"):
            assert busbw_factor(op, n) == pytest.approx((n - 1) / n)
        assert busbw_factor("broadcast", n) == 1.0
    assert busbw_factor("all_reduce", 2) == 1.0 and busbw_factor("all_to_all_single", 4) == 0.75


@pytest.mark.timeout(30)
def test_share_gpu_env():
    """Nothing where every rank has a GPU of its own; where ranks share one,
    NCCL_MULTI_RANK_GPU_ENABLE on NCCL >= 2.30, else a host id per rank and
    the socket transport; rank r on GPU r % device_count."""
    assert cuda.share_gpu_env(0, 1, 1, (2, 28, 9)) == {}
    assert cuda.share_gpu_env(3, 8, 8, (2, 28, 9)) == {}
    for v in ((2, 30, 0), (2, 31, 2), (3, 0, 0)):
        assert cuda.share_gpu_env(1, 2, 1, v) == {"NCCL_MULTI_RANK_GPU_ENABLE": "1"}
    old = [cuda.share_gpu_env(r, 2, 1, (2, 28, 9)) for r in range(2)]
    assert old[0]["NCCL_HOSTID"] != old[1]["NCCL_HOSTID"]
    assert old[1] == {"NCCL_HOSTID": "godist-bench-1", "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "lo"}
    assert cuda.share_gpu_env(0, 3, 2, (2, 29, 7))["NCCL_HOSTID"] == "godist-bench-0"
    assert cuda.share_gpu_env(0, 2, 1, 2708)["NCCL_NET"] == "Socket"  # torch's old one-number version
    assert [cuda.gpu_of(r, 2) for r in range(5)] == [0, 1, 0, 1, 0] and cuda.gpu_of(3, 0) == 0


@pytest.mark.timeout(120)
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: nothing to refuse")
def test_cuda_mode_without_a_gpu_is_refused(tmp_path):
    out = tmp_path / "perf"
    p = subprocess.run([sys.executable, "-m", "godist.bench", "--device", "cuda", "--out", str(out)],
                       cwd=str(tmp_path), env=_env(), capture_output=True, text=True, timeout=100)
    assert p.returncode == cuda.NO_CUDA_EXIT != 0, p
    assert p.stderr.startswith("no CUDA device: ") and "Traceback" not in p.stderr, p.stderr
    assert not out.exists()


def _read(out):
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.timeout(240)
def test_cuda_mode_on_a_stand_in_gpu(tmp_path):
    """The CUDA mode's ranks, table and report, on the stand-in GPU (CPU
    tensors, gloo in nccl's place): rows for both backends in every cell and
    world size (1 and 2, ranks sharing the one GPU), the speed and CPU-time
    ratios, the DDP step, the markdown, and --render."""
    out = tmp_path / "perf"
    code = (f"import sys, bench_cuda_fake; sys.exit(bench_cuda_fake.main(['--device', 'cuda', '--smoke', '--ranks', "
            f"'1,2', '--ops', 'all_reduce,all_to_all_single', '--no-plot', '--out', {str(out)!r}]))")
    p = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=_env(), capture_output=True, text=True,
                       timeout=220)
    assert p.returncode == 0, f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    assert "2 ranks share 1 GPU(s), set in every rank: NCCL_HOSTID=godist-bench-<rank>" in p.stderr, p.stderr
    heads = [ln.split() for ln in p.stdout.splitlines() if ln.split()[:2] == ["#", "size"]]
    assert heads and all(h[-2:] == ["godist/nccl", "cpu/op"] for h in heads), p.stdout
    rows = _read(out)
    assert {(r["world_size"], r["op"]) for r in rows} == {(p, op) for p in ("1", "2")
                                                         for op in ("all_reduce", "all_to_all_single", "ddp_step")}
    cells = {}
    for r in rows:
        cells.setdefault((r["world_size"], r["op"], r["nominal_bytes"]), set()).add(r["backend"])
        assert r["status"] == "ok" and r["wrong"] == "0", r
        assert float(r["time_us"]) > 0 and float(r["issue_us_per_op"]) > 0 and float(r["godist_speedup"]) > 0, r
        if r["op"] != "ddp_step":
            assert float(r["issue_ratio"]) > 0 and float(r["algbw_GBps"]) > 0, r
            assert float(r["busbw_GBps"]) == pytest.approx(float(r["algbw_GBps"]) * busbw_factor(
                r["op"], int(r["world_size"])), rel=1e-6), r
    assert all(b == {"godist", "nccl"} for b in cells.values()), cells
    md = (out / "results.md").read_text()
    for words in ("# godist vs nccl on CUDA tensors", "## godist/nccl speed", "## CPU time per op, godist/nccl",
                  "## DDP step", "### all_reduce", "### all_to_all_single", "| speed godist/nccl | CPU godist/nccl |"):
        assert words in md, words
    (out / "results.md").unlink()
    r = subprocess.run([sys.executable, "-m", "godist.bench", "--render", str(out), "--no-plot"], cwd=str(tmp_path),
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "## CPU time per op, godist/nccl" in (out / "results.md").read_text()


# Not marked gpu: tools/gpu-check.sh runs the CUDA benchmark itself, after
# the tests; this one is for a full `pytest` run on a GPU host.
@pytest.mark.timeout(300)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_cuda_bench_tiny_on_gpu(tmp_path):
    """On a GPU: one rank, two sizes, all_reduce only, godist against nccl;
    both backends ran every cell without a wrong element."""
    out = tmp_path / "perf"
    p = subprocess.run([sys.executable, "-m", "godist.bench", "--device", "cuda", "--smoke", "--ranks", "1",
                        "--sizes", "8,64K", "--ops", "all_reduce", "--scenarios", "none", "--no-plot", "--out",
                        str(out)], cwd=str(tmp_path), env=_env(), capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    rows = _read(out)
    assert sorted((r["nominal_bytes"], r["backend"]) for r in rows) == [
        ("65536", "godist"), ("65536", "nccl"), ("8", "godist"), ("8", "nccl")], rows
    for r in rows:
        assert r["status"] == "ok" and r["wrong"] == "0" and float(r["time_us"]) > 0, r
        assert float(r["godist_speedup"]) > 0 and float(r["issue_ratio"]) > 0, r
    assert "godist/nccl" in p.stdout and "## godist/nccl speed" in (out / "results.md").read_text()
