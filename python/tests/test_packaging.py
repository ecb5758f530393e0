"""What ``pip wheel .`` gives a user: one wheel, built once for this module
from this checkout, that holds every module of the ``godist`` package and its
subpackages (the benchmark included), the Go library and ``py.typed``; is
tagged for a platform (never ``any``: the library is inside) with the
manylinux version its glibc symbols allow; and, installed into a fresh virtual
environment with no Go on PATH and no checkout on sys.path, runs a two-rank
``init_process_group("godist")`` + ``all_reduce``, has the version of
``godist/_version.py`` and the ``godist`` console script. On Linux its native
files (the library, the GPU report program, the MPI shims) are built for
glibc 2.28, torch's manylinux_2_28, and need no newer symbol version, and
auditwheel (when installed) agrees that the wheel is manylinux_2_28."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(REPO, "python")
BUILD_TIMEOUT = 580  # pip wheel compiles the Go library: about a minute on a cold Go cache
WHEEL_GLIBC = (2, 28)  # what the wheel is built for: torch's wheels are manylinux_2_28


def _package_modules() -> set[str]:
    found = set()
    for d, _, files in os.walk(os.path.join(PKG, "godist")):
        if "__pycache__" in d:
            continue
        for f in files:
            if f.endswith(".py"):
                found.add(os.path.relpath(os.path.join(d, f), PKG).replace(os.sep, "/"))
    return found


def _source_version() -> str:
    with open(os.path.join(PKG, "godist", "_version.py"), encoding="utf-8") as f:
        (version,) = re.findall(r"^__version__ = \"([^\"]+)\"$", f.read(), re.M)
    return version


@pytest.fixture(scope="module")
def wheel():
    """The wheel ``pip wheel .`` builds from this checkout (once per module).
    setuptools builds in a fresh directory (not the checkout's build/, where
    files from an earlier build could end up in the wheel). The glibc is
    named, so that a build without zig fails rather than falling back to
    this machine's glibc."""
    with tempfile.TemporaryDirectory(prefix="godist-wheel-") as tmp:
        out, cfg = os.path.join(tmp, "dist"), os.path.join(tmp, "build.cfg")
        with open(cfg, "w") as f:
            f.write(f"[build]\nbuild_base = {tmp}/build\n[egg_info]\negg_base = {tmp}\n")
        p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out,
                            REPO], env=dict(os.environ, DIST_EXTRA_CONFIG=cfg,
                                            GODIST_WHEEL_GLIBC="{}.{}".format(*WHEEL_GLIBC)),
                           capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT)
        assert p.returncode == 0, f"pip wheel failed\n{p.stdout}\n{p.stderr}"
        (whl,) = list(Path(out).glob("godist-*.whl"))
        yield whl


def _read(whl: Path, suffix: str) -> str:
    with zipfile.ZipFile(whl) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(suffix))).decode()


@pytest.mark.timeout(900)
def test_wheel_holds_the_whole_package(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    entry_points = _read(wheel, ".dist-info/entry_points.txt")
    missing = _package_modules() - names
    assert not missing, f"modules left out of the wheel: {sorted(missing)}"
    assert {"godist/libgodist.so", "godist/py.typed", "godist/_version.py", "godist/bench/__main__.py",
            "godist/bin/godist-gpuinfo", "godist/godist.h", "godist/csrc/ops.cpp"} <= names
    assert "[torch.distributed.backends]" in entry_points and "godist = godist:_register" in entry_points
    assert "[console_scripts]" in entry_points and "godist = godist.__main__:main" in entry_points

    # Installed alone (no checkout on the path), the benchmark's CLI starts.
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"pip install failed\n{p.stdout}\n{p.stderr}"
    env = dict(os.environ, PYTHONPATH=str(site))
    p = subprocess.run([sys.executable, "-m", "godist.bench", "--help"], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"python -m godist.bench --help: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert "--quick" in p.stdout
    # The GPU report program is installed executable and answers JSON.
    gpuinfo = site / "godist" / "bin" / "godist-gpuinfo"
    assert gpuinfo.is_file() and os.access(gpuinfo, os.X_OK)
    p = subprocess.run([str(gpuinfo)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and isinstance(json.loads(p.stdout)["available"], bool), p


@pytest.mark.timeout(900)
def test_wheel_tag_and_version(wheel):
    name, version, python_tag, abi_tag, plat = wheel.name[:-len(".whl")].split("-")
    assert (name, version) == ("godist", _source_version())
    assert f"Version: {version}\n" in _read(wheel, ".dist-info/METADATA")
    # No extension module: one wheel for every Python 3, on one platform.
    assert (python_tag, abi_tag) == ("py3", "none")
    assert plat != "any"
    assert f"Tag: py3-none-{plat}\n" in _read(wheel, ".dist-info/WHEEL")
    assert "Root-Is-Purelib: false" in _read(wheel, ".dist-info/WHEEL")
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") and sys.platform.startswith("linux") else None
    if not libc or not libc.startswith("glibc "):
        return
    # On glibc Linux: every native file the wheel ships (the library, the
    # GPU report program, the MPI shims) names no GLIBC_ symbol version
    # newer than WHEEL_GLIBC (found here independently of setup.py), and the
    # tag is manylinux_X_Y_<arch> for WHEEL_GLIBC (the glibc they were built
    # for), or for the newest version they name if that were newer.
    def newest(data: bytes) -> tuple[int, int]:
        return max((int(a), int(b)) for a, b in re.findall(rb"\bGLIBC_(\d+)\.(\d+)", data))

    with zipfile.ZipFile(wheel) as z:
        native = {n: newest(z.read(n)) for n in z.namelist()
                  if n in ("godist/libgodist.so", "godist/bin/godist-gpuinfo") or re.fullmatch(r"godist/mpi/.*\.so", n)}
    assert {"godist/libgodist.so", "godist/bin/godist-gpuinfo"} <= set(native)
    too_new = {n: v for n, v in native.items() if v > WHEEL_GLIBC}
    assert not too_new, f"native files needing a glibc newer than {WHEEL_GLIBC}: {too_new}"
    arch = sysconfig.get_platform().split("-", 1)[1].replace("-", "_").replace(".", "_")
    tag = max(WHEEL_GLIBC, *native.values())
    assert plat == f"manylinux_{tag[0]}_{tag[1]}_{arch}"


def _auditwheel() -> list[str] | None:
    """The auditwheel command (requirements-dev.txt): this interpreter's
    module, else one on PATH; None if neither."""
    import importlib.util

    if importlib.util.find_spec("auditwheel") is not None:
        return [sys.executable, "-m", "auditwheel"]
    exe = shutil.which("auditwheel")
    return [exe] if exe else None


def _manylinux_at_most(tag: str, newest: tuple[int, int]) -> bool:
    """Whether a platform tag is manylinux for glibc newest or older (the
    legacy aliases included: manylinux1 is 2.5, 2010 2.12, 2014 2.17)."""
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag)
    if m:
        return (int(m.group(1)), int(m.group(2))) <= newest
    m = re.fullmatch(r"(manylinux\w+?)_\w+", tag)
    return bool(m) and m.group(1) in legacy and legacy[m.group(1)] <= newest


@pytest.mark.timeout(900)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="auditwheel audits Linux wheels")
def test_auditwheel_agrees(wheel):
    """auditwheel finds the wheel consistent with manylinux_2_28 (or an
    older manylinux) with every native file inside, the MPI shims included
    wherever an mpicc built them: they link no MPI library (the loader opens
    it), so nothing in the wheel needs a library outside the policy."""
    cmd = _auditwheel()
    if cmd is None:
        pytest.skip("auditwheel is not installed (pip install -r requirements-dev.txt)")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    for impl, mpicc in (("openmpi", "mpicc.openmpi"), ("mpich", "mpicc.mpich")):
        if shutil.which(mpicc):
            assert f"godist/mpi/libgodist_mpi_{impl}.so" in names, f"{mpicc} is installed, the {impl} shim is missing"
    p = subprocess.run([*cmd, "show", str(wheel)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"auditwheel show: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    out = " ".join(p.stdout.split())
    m = re.search(r'consistent with the following platform tag: "([^"]+)"', out)
    assert m, f"auditwheel show said:\n{p.stdout}"
    assert _manylinux_at_most(m.group(1), WHEEL_GLIBC), f"auditwheel show said:\n{p.stdout}"


# Run in the fresh environment: what is importable and from where.
PROBE = r"""
import importlib.resources, inspect, json, shutil, sys, typing
import torch
import godist
from godist import _lib

untyped = []
for name in godist.__all__:
    obj = getattr(godist, name, None)
    if inspect.isfunction(obj) and obj.__module__ == "godist":
        hints = typing.get_type_hints(obj)
        params = [p for p in inspect.signature(obj).parameters if p not in hints]
        if params or "return" not in hints:
            untyped.append(name)
print(json.dumps({
    "version": godist.__version__, "godist": godist.__file__, "library": _lib.library_path(), "torch": torch.__file__,
    "prefix": sys.prefix, "path": sys.path, "go": shutil.which("go"),
    "py_typed": importlib.resources.files("godist").joinpath("py.typed").is_file(),
    "missing": [n for n in godist.__all__ if not hasattr(godist, n)], "untyped": untyped,
}))
"""

# One rank of a two-rank all_reduce over godist, with a file:// rendezvous.
RANK = r"""
import datetime, json, os, sys
import torch
import torch.distributed as dist

rank, world, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if not hasattr(dist.Backend, "_ensure_backend_registered"):
    import godist  # noqa: F401  (torch before backend entry points: importing registers it)
dist.init_process_group("godist", init_method=init, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))
t = torch.arange(4, dtype=torch.float32) + 10 * rank
dist.all_reduce(t)
backend = dist.get_backend()
dist.destroy_process_group()
with open("/proc/self/maps") as f:
    libs = sorted({line.split()[-1] for line in f if line.rstrip().endswith("libgodist.so")})
print(json.dumps({"result": t.tolist(), "backend": backend, "loaded": libs}))
"""


# One rank under mpirun: the installed wheel's shim, after the MPI library
# the loader opens itself.
MPI_RANK = r"""
import json, os
from godist import _mpi
info = _mpi.open_mpi()
_mpi.mpi_finalize()
os.write(1, ("MPIRANK " + json.dumps({k: info[k] for k in ("rank", "size", "impl", "shim", "library")}) + "\n").encode())
"""
MPIRUNS = {"openmpi": (["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"], "libmpi.so.40"),
           "mpich": (["mpirun.mpich"], "libmpich.so.12")}


def _env_without_go(venv: Path) -> dict:
    """The environment a user without Go has: the venv's bin first, no
    directory with a ``go`` on PATH, nothing of this checkout importable."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "GO", "GODIST_LIBRARY", "VIRTUAL_ENV")}
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not shutil.which("go", path=d)]
    env.update(PATH=os.pathsep.join([str(venv / "bin"), *dirs]), VIRTUAL_ENV=str(venv), OMP_NUM_THREADS="1")
    assert shutil.which("go", path=env["PATH"]) is None
    return env


def _run(cmd, env, cwd, timeout=180) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    return p


def _inside(path: str, root) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)


@pytest.mark.timeout(900)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the rank script reads /proc/self/maps")
def test_wheel_runs_in_a_fresh_venv_without_go(wheel):
    import torch

    torch_site = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
    with tempfile.TemporaryDirectory(prefix="godist-venv-") as tmp:
        tmp = Path(tmp)
        venv, work = tmp / "venv", tmp / "work"
        work.mkdir()
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        py = str(venv / "bin" / "python")
        env = _env_without_go(venv)
        # Install from the wheel alone: no index, no build, no Go.
        _run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", "-q", str(wheel)],
             env, work, timeout=300)
        # torch and its dependencies come from this test's environment, after
        # the venv's own site-packages (so the installed godist comes first).
        venv_site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env, work).stdout
        extra = [torch_site] + [d for d in sys.path if d.endswith("-packages") and os.path.isdir(d) and d != torch_site]
        Path(venv_site.strip(), "_godist_test_torch.pth").write_text("\n".join(extra) + "\n")

        probe = json.loads(_run([py, "-c", PROBE], env, work).stdout)
        assert os.path.realpath(probe["prefix"]) == os.path.realpath(venv)
        assert probe["go"] is None
        assert _inside(probe["godist"], venv) and _inside(probe["library"], venv), probe
        assert _inside(probe["torch"], torch_site), probe
        checkout = {os.path.realpath(d) for d in (REPO, PKG)}
        assert not [p for p in probe["path"] if p and os.path.realpath(p) in checkout], probe["path"]
        assert probe["version"] == wheel.name.split("-")[1] == _source_version()
        assert probe["py_typed"]
        assert probe["missing"] == [] and probe["untyped"] == [], probe

        script = venv / "bin" / "godist"
        assert script.is_file() and os.access(script, os.X_OK)
        assert py in script.read_text()[:1000]  # its interpreter is the venv's
        _run([str(script), "info"], env, work)

        (work / "rank.py").write_text(RANK)
        init = f"file://{work / 'rendezvous'}"
        procs = [subprocess.Popen([py, str(work / "rank.py"), str(r), "2", init], env=env, cwd=str(work),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
        outs = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=240)
                outs.append((p.returncode, out, err))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for rank, (rc, out, err) in enumerate(outs):
            assert rc == 0, f"rank {rank}: exit {rc}\n--- stdout\n{out}\n--- stderr\n{err}"
            got = json.loads(out.strip().splitlines()[-1])
            assert got["backend"] == "godist"
            # sum over ranks r of arange(4) + 10 r
            assert got["result"] == [10.0, 12.0, 14.0, 16.0], got
            assert got["loaded"] and all(_inside(lib, venv) for lib in got["loaded"]), got

        # The wheel's MPI shims work under their mpirun: each links no MPI
        # library, and the loader opens the machine's before it.
        (work / "mpi_rank.py").write_text(MPI_RANK)
        for impl, (mpirun, soname) in MPIRUNS.items():
            shim = Path(probe["library"]).parent / "mpi" / f"libgodist_mpi_{impl}.so"
            if not shutil.which(mpirun[0], path=env["PATH"]) or not shim.exists():
                continue
            p = _run([*mpirun, "-np", "2", py, str(work / "mpi_rank.py")], env, work, timeout=240)
            ranks = sorted((r["rank"], r["size"], r["impl"], os.path.realpath(r["shim"]), r["library"])
                           for r in map(json.loads, re.findall(r"MPIRANK (\{.*?\})", p.stdout)))
            assert ranks == [(r, 2, impl, os.path.realpath(shim), soname) for r in range(2)], p.stdout + p.stderr
