"""What ``pip install .`` gives a user: a wheel built from this checkout holds
every module of the ``godist`` package and its subpackages (the benchmark,
``python -m godist.bench``, included), the Go library, and the entry point
that registers the backend; installed on its own, ``python -m godist.bench``
runs from it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(REPO, "python")


def _package_modules() -> set[str]:
    found = set()
    for d, _, files in os.walk(os.path.join(PKG, "godist")):
        if "__pycache__" in d:
            continue
        for f in files:
            if f.endswith(".py"):
                found.add(os.path.relpath(os.path.join(d, f), PKG).replace(os.sep, "/"))
    return found


@pytest.mark.timeout(600)
def test_wheel_holds_the_whole_package(tmp_path):
    wheels = tmp_path / "wheels"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(wheels), REPO], capture_output=True, text=True, timeout=580)
    assert p.returncode == 0, f"pip wheel failed\n{p.stdout}\n{p.stderr}"
    (whl,) = list(wheels.glob("godist-*.whl"))
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = z.read(entry).decode()
    missing = _package_modules() - names
    assert not missing, f"modules left out of the wheel: {sorted(missing)}"
    assert "godist/libgodist.so" in names
    assert "godist/bench/__main__.py" in names
    assert "[torch.distributed.backends]" in entry_points and "godist = godist:_register" in entry_points

    # Installed alone (no checkout on the path), the benchmark's CLI starts.
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(whl)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"pip install failed\n{p.stdout}\n{p.stderr}"
    env = dict(os.environ, PYTHONPATH=str(site))
    p = subprocess.run([sys.executable, "-m", "godist.bench", "--help"], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"python -m godist.bench --help: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert "--quick" in p.stdout
