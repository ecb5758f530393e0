"""godist under mpirun: the mpi:// rendezvous (godist/_mpi.py), with Open MPI
and MPICH, and examples/mpi_ddp.py.

The runs need an MPI launcher (mpirun.openmpi, mpirun.mpich), godist's shim
for that implementation (python/godist/mpi/libgodist_mpi_<impl>.so, built
by `make lib`) and a libgodist.so that exports godist_mpi_open; each test
skips, saying which is missing, otherwise. The launcher tests without MPI
(the env:// hint, LOCAL_RANK, the store address) always run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from godist import _lib, _mpi
from harness import run_session

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORKERS = HERE / "workers"
RUN_TIMEOUT = 120  # seconds for one mpirun, all its ranks together

# impl: the launcher and its arguments. Open MPI refuses root without
# --allow-run-as-root and more ranks than cores without --oversubscribe;
# --bind-to none leaves each rank all cores (Go and torch run threads).
LAUNCHERS = {
    "openmpi": ["mpirun.openmpi", "--oversubscribe", "--bind-to", "none"]
    + (["--allow-run-as-root"] if os.geteuid() == 0 else []),
    "mpich": ["mpirun.mpich"],
}
IMPLS = sorted(LAUNCHERS)
# Variables that would tell a rank it was started by torchrun or an outer
# MPI job, or change godist's transport or MPI shim (GODIST_MPI*).
_DROP = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GODIST_TRANSPORT")


def _child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in _DROP and not k.startswith(("OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "HYDRA_", "GODIST_MPI"))}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "python"), str(HERE), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def _need_mpi(impl: str) -> list[str]:
    """The launcher command of impl, or skip saying what is missing."""
    argv = LAUNCHERS[impl]
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    lib = _lib.load()
    if not hasattr(lib.raw, "mpi_open"):
        pytest.skip(f"{_lib.library_path()} does not export godist_mpi_open (godist's MPI support is not built)")
    shim = os.path.join(_mpi.shim_dir(), f"libgodist_mpi_{impl}.so")
    if not os.path.exists(shim):
        pytest.skip(f"{shim} is missing (`make lib` builds it where {impl}'s mpicc is installed)")
    return list(argv)


def _mpirun(impl: str, n: int, *args: str, timeout: float = RUN_TIMEOUT, **env) -> subprocess.CompletedProcess:
    """mpirun -np n python args, in its own session, killed whole on timeout."""
    argv = [*_need_mpi(impl), "-np", str(n), sys.executable, *args]
    return run_session(argv, str(ROOT), _child_env(**env), timeout)


def _report(r: subprocess.CompletedProcess) -> str:
    return f"{' '.join(r.args)}: exit status {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"


# ----- under mpirun -----

@pytest.mark.timeout(2 * RUN_TIMEOUT)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("impl", IMPLS)
def test_mpi_rendezvous_and_collectives(impl, n):
    """Every rank inits with mpi://, gets the launcher's rank, size and
    LOCAL_RANK, and godist's all_reduce/broadcast/all_gather agree with
    gloo's on the same inputs."""
    r = _mpirun(impl, n, str(WORKERS / "mpi_worker.py"))
    assert r.returncode == 0, _report(r)
    # mpirun interleaves the ranks' output, possibly within a line.
    got = re.findall(r"MPI-OK rank (\d+) size (\d+) impl (\w+) local_rank (\d+)", r.stdout)
    assert sorted(got) == sorted((str(i), str(n), impl, str(i)) for i in range(n)), _report(r)


@pytest.mark.timeout(2 * RUN_TIMEOUT)
@pytest.mark.parametrize("impl", IMPLS)
def test_mpi_ddp_example(impl):
    r = _mpirun(impl, 4, str(ROOT / "examples" / "mpi_ddp.py"), "--steps", "30")
    assert r.returncode == 0, _report(r)
    assert f"4 ranks under {impl}" in r.stdout, _report(r)
    assert re.search(r"step\s+30\s+loss \d", r.stdout), _report(r)
    assert "parameters identical on all ranks: True" in r.stdout, _report(r)


@pytest.mark.timeout(2 * RUN_TIMEOUT)
@pytest.mark.parametrize("impl", IMPLS)
def test_mpi_ddp_example_over_the_mpi_transport(impl):
    r = _mpirun(impl, 4, str(ROOT / "examples" / "mpi_ddp.py"), "--steps", "10", "--transport", "mpi")
    assert r.returncode == 0, _report(r)
    assert "transport mpi" in r.stdout and "parameters identical on all ranks: True" in r.stdout, _report(r)


@pytest.mark.timeout(2 * RUN_TIMEOUT)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("impl", IMPLS)
def test_mpi_transport_every_op_and_dtype(impl, n):
    """A godist group with GODIST_TRANSPORT=mpi: every collective and
    point-to-point op, every dtype and reduce op, bitwise equal to the same
    ops on godist's own transports (and to gloo's where gloo has them)."""
    r = _mpirun(impl, n, str(WORKERS / "mpi_transport_worker.py"), "ops")
    assert r.returncode == 0, _report(r)
    assert sorted(re.findall(r"MPI-TRANSPORT-OK rank (\d+)", r.stdout)) == sorted(str(i) for i in range(n)), _report(r)


@pytest.mark.timeout(2 * RUN_TIMEOUT)
@pytest.mark.parametrize("impl", IMPLS)
def test_mpi_transport_timeout(impl):
    """An MPI collective cannot be cancelled: a rank waiting for one that a
    peer never joins fails with a timeout naming the op within its deadline,
    the group is broken, and both processes exit (MPI_Finalize included)."""
    r = _mpirun(impl, 2, str(WORKERS / "mpi_transport_worker.py"), "timeout")
    assert r.returncode == 0, _report(r)
    assert sorted(re.findall(r"MPI-TRANSPORT-OK rank (\d+)", r.stdout)) == ["0", "1"], _report(r)


_DIGEST = re.compile(r"DIGEST rank (\d+) (ddp|fsdp2) ([\w-]+) ([0-9a-f]{16})")


@pytest.mark.timeout(3 * RUN_TIMEOUT)
@pytest.mark.parametrize("impl", IMPLS)
def test_ddp_and_fsdp2_under_mpirun_match_torchrun(impl):
    """DDP and FSDP2 trained under mpirun (mpi://) on godist's own transports,
    on GODIST_TRANSPORT=mpi and on gloo, end with the same parameters,
    bitwise, as the same script under torchrun (2 ranks: every sum is of
    two values, the same bits in any order)."""
    r = _mpirun(impl, 2, str(WORKERS / "mpi_frameworks_worker.py"), "mpi")
    assert r.returncode == 0, _report(r)
    under_mpi = _DIGEST.findall(r.stdout)
    assert {(fw, g) for _, fw, g, _ in under_mpi} == {(fw, g) for fw in ("ddp", "fsdp2")
                                                       for g in ("godist", "godist-mpi", "gloo")}, _report(r)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(WORKERS / "mpi_frameworks_worker.py"), "env"]
    t = subprocess.run(torchrun, cwd=str(ROOT), env=_child_env(), capture_output=True, text=True,
                       timeout=RUN_TIMEOUT)
    assert t.returncode == 0, f"torchrun: {t.returncode}\n{t.stdout}\n{t.stderr}"
    under_torchrun = _DIGEST.findall(t.stdout)
    assert len(under_mpi) == 12 and len(under_torchrun) == 8, (r.stdout, t.stdout)
    digests = {d for *_, d in under_mpi + under_torchrun}
    assert len(digests) == 1, sorted(under_mpi + under_torchrun)


# ----- a simulated launcher, no MPI needed -----

_INIT_DEFAULT = "import godist, torch.distributed as dist; dist.init_process_group('godist')"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", [
    {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"},
    {"PMI_SIZE": "2", "PMI_RANK": "0"},
    {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0", "RANK": "0", "WORLD_SIZE": "2"},  # no MASTER_ADDR
], ids=["openmpi", "mpich", "openmpi-rank-set"])
def test_default_init_under_an_mpi_launcher_names_mpi_scheme(launcher):
    r = subprocess.run([sys.executable, "-c", _INIT_DEFAULT], env=_child_env(**launcher), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0, r.stdout
    assert "ValueError" in r.stderr and 'init_method="mpi://"' in r.stderr, r.stderr
    assert "env:// rendezvous" in r.stderr, r.stderr  # torch's own message is kept


@pytest.mark.timeout(120)
def test_default_init_without_a_launcher_keeps_torchs_error():
    r = subprocess.run([sys.executable, "-c", _INIT_DEFAULT], env=_child_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "env:// rendezvous" in r.stderr, r.stderr
    assert "mpi://" not in r.stderr, r.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher,want", [
    ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, "1 2"),
    ({"PMI_SIZE": "4", "PMI_RANK": "3", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, "1 2"),
    ({"PMI_SIZE": "4", "PMI_RANK": "3", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "LOCAL_RANK": "7"}, "7 2"),
    ({}, "None None"),
], ids=["openmpi", "mpich", "already-set", "no-launcher"])
def test_local_rank_from_the_launcher(launcher, want):
    code = "import os, godist; print(os.environ.get('LOCAL_RANK'), os.environ.get('LOCAL_WORLD_SIZE'))"
    r = subprocess.run([sys.executable, "-c", code], env=_child_env(**launcher), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-2] == want, r.stdout


def test_mpi_scheme_registered_once():
    import torch.distributed.rendezvous  # noqa: F401

    handlers = sys.modules["torch.distributed.rendezvous"]._rendezvous_handlers
    assert handlers["mpi"] is _mpi._rendezvous_handler
    _mpi.register()
    _mpi.register()
    assert handlers["mpi"] is _mpi._rendezvous_handler


def test_store_address():
    assert _mpi.store_addr(4, {"GODIST_MPI_STORE_ADDR": "10.1.2.3", "MASTER_ADDR": "10.9.9.9"}) == "10.1.2.3"
    assert _mpi.store_addr(4, {"MASTER_ADDR": "10.9.9.9"}) == "10.9.9.9"
    assert _mpi.store_addr(1, {}) == "127.0.0.1"
    assert _mpi.store_addr(4, {"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) == "127.0.0.1"
    assert _mpi.store_addr(4, {"MPI_LOCALNRANKS": "4"}) == "127.0.0.1"
    assert _mpi.store_addr(4, {"MPI_LOCALNRANKS": "2"}) not in ("", None)  # this host, by name


def test_launcher_detection():
    assert _mpi.launcher({"OMPI_COMM_WORLD_SIZE": "2"}) == "openmpi"
    assert _mpi.launcher({"PMI_RANK": "0"}) == "mpich"
    assert _mpi.launcher({"PMI_ID": "0", "PMI_PORT": "x:1"}) == "mpich"  # Hydra's -pmi-port mode
    assert _mpi.launcher({"RANK": "0"}) is None
    assert _mpi._env_hint({"OMPI_COMM_WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "h"}) is None
    assert "mpi://" in _mpi._env_hint({"PMI_SIZE": "2", "RANK": "0"})


def test_mpi_info_before_init():
    if _mpi._info is None:
        assert _mpi.mpi_info() is None
    import godist

    assert godist.mpi_info is _mpi.mpi_info and godist.mpi_finalize is _mpi.mpi_finalize
