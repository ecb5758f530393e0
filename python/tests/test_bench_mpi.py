"""``python -m godist.bench --mpi``: its options, the refusal without an MPI
launcher, and one tiny run under Open MPI's mpirun (2 ranks, 2 sizes, 1 op).

Until godist has its MPI path, the run makes its default group through the
test hook GODIST_BENCH_MPI_FILESTORE and the godist-over-MPI column is
marked unavailable with the reason; once it has, the same run times all
three groups."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from godist.bench import cli, mpi
from godist.bench.cli import BadOption

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = shutil.which("mpirun.openmpi")
LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("OMPI_")}
    path = [os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    env.update(extra)
    return env


def _cfg(args):
    return mpi.config_from_args(cli.build_parser().parse_args(["--mpi", *args]))


@pytest.mark.timeout(30)
def test_mpi_options():
    cfg = _cfg([])
    assert cfg.backends == ["godist", "godist-mpi", "gloo"]
    assert cfg.ops == list(mpi.MPI_OPS) and cfg.sizes[0] == 8 and cfg.sizes[-1] == 64 << 20
    assert cfg.spot_dtypes == [] and cfg.scenarios == []
    cfg = _cfg(["--sizes", "8,64K", "--ops", "allreduce,bcast", "--repeats", "2", "--target-ms", "5"])
    assert cfg.sizes == [8, 64 << 10] and cfg.ops == ["all_reduce", "broadcast"]
    assert cfg.repeats == 2 and cfg.target_s == 0.005
    assert _cfg(["--smoke"]).sizes == [8, 64 << 10]
    for bad in (["--ops", "barrier"], ["--ops", "nope"], ["--world-sizes", "2"], ["--backends", "gloo"],
                ["--device", "cuda"], ["--spot-dtypes", "int64"], ["--scenarios", "ddp"], ["--sizes", "0"],
                ["--repeats", "0"]):
        with pytest.raises(BadOption):
            _cfg(bad)
    assert _cfg(["--scenarios", "none"]).scenarios == []


@pytest.mark.timeout(30)
def test_mpi_launcher_detection(monkeypatch):
    for k in LAUNCHER_VARS + ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(k, raising=False)
    assert mpi.launcher() is None
    monkeypatch.setenv("PMI_SIZE", "3")
    monkeypatch.setenv("PMI_RANK", "1")
    assert mpi.launcher() == ("MPICH", 1, 3, 3)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    assert mpi.launcher() == ("Open MPI", 2, 4, 2)


@pytest.mark.timeout(60)
def test_mpi_without_launcher_refuses(tmp_path):
    p = subprocess.run([sys.executable, "-m", "godist.bench", "--mpi", "--out", str(tmp_path / "out")],
                       env=_env(), capture_output=True, text=True, timeout=50)
    assert p.returncode != 0
    assert "mpirun" in p.stderr and "mpirun -np 2 python -m godist.bench --mpi" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(MPIRUN is None, reason="mpirun.openmpi (Open MPI) is not installed")
@pytest.mark.timeout(180)
def test_mpi_tiny_run(tmp_path):
    out = tmp_path / "out"
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2", sys.executable, "-m",
           "godist.bench", "--mpi", "--sizes", "8,4K", "--ops", "all_reduce", "--repeats", "2", "--target-ms", "5",
           "--out", str(out)]
    env = _env(GODIST_BENCH_MPI_FILESTORE=str(tmp_path / "store"))
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=170)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # mpirun and every rank it started
        stdout, stderr = p.communicate()
        pytest.fail(f"mpirun did not finish in 170 s\nstdout:\n{stdout}\nstderr:\n{stderr}")
    assert p.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}"
    for name in ("results.csv", "results.md", "meta.json"):
        assert (out / name).is_file(), name
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    meta = json.loads((out / "meta.json").read_text())
    assert meta["ranks"] == 2 and any(line.startswith("MPI:     Open MPI") for line in meta["header"])
    by = {}
    for r in rows:
        assert r["op"] == "all_reduce" and r["world_size"] == "2"
        by.setdefault(r["backend"], []).append(r)
    assert set(by) == {"godist", "godist-mpi", "gloo"}
    for b in ("godist", "gloo"):
        assert sorted(int(r["nominal_bytes"]) for r in by[b]) == [8, 4096]
        assert all(r["status"] == "ok" and float(r["time_us"]) > 0 and r["wrong"] == "0" for r in by[b])
    mpi_rows = by["godist-mpi"]
    assert len(mpi_rows) == 2
    if meta["groups"]["godist-mpi"].startswith("ok"):
        assert all(r["status"] == "ok" and float(r["time_us"]) > 0 and r["wrong"] == "0" for r in mpi_rows)
    else:  # godist without its MPI transport: the column says why
        assert all(r["status"] == "unavailable" and "GODIST_TRANSPORT=mpi" in r["error"] for r in mpi_rows)
        assert "unavailable" in (out / "results.md").read_text()
    assert "all_reduce" in stdout
