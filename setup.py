"""Builds the Go library (libgodist.so) into the package at install time.

``pip install .`` and ``pip install -e .`` both run ``go build
-buildmode=c-shared ./capi``; only a Go toolchain is needed.
"""

import os
import re
import shutil
import subprocess

from setuptools import Distribution, find_packages, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def read_version() -> str:
    """``__version__`` from python/godist/_version.py, read as text so that
    building needs neither torch nor the package importable."""
    path = os.path.join(ROOT, "python", "godist", "_version.py")
    with open(path, encoding="utf-8") as f:
        m = re.search(r"^__version__ = [\"']([^\"']+)[\"']$", f.read(), re.M)
    if not m:
        raise RuntimeError(f"no __version__ = \"...\" line in {path}")
    return m.group(1)


def find_go() -> str:
    go = os.environ.get("GO") or shutil.which("go")
    if not go and os.path.exists("/usr/local/go/bin/go"):
        go = "/usr/local/go/bin/go"
    if not go:
        raise RuntimeError("godist needs a Go toolchain (1.26+) to build libgodist.so: install Go and retry")
    return go


def build_library(dest_dir: str) -> None:
    os.makedirs(dest_dir, exist_ok=True)
    out = os.path.join(dest_dir, "libgodist.so")
    env = dict(os.environ, CGO_ENABLED="1")
    subprocess.check_call([find_go(), "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./capi"], cwd=ROOT, env=env)
    # libgodist.h (written beside the library) includes the ABI's types.
    shutil.copyfile(os.path.join(ROOT, "capi", "godist.h"), os.path.join(dest_dir, "godist.h"))


class BuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            build_library(os.path.join(ROOT, "python", "godist"))
        else:
            build_library(os.path.join(self.build_lib, "godist"))


class BinaryDistribution(Distribution):
    """The wheel carries a native library: never tag it pure-Python."""

    def has_ext_modules(self):
        return True


setup(
    name="godist",
    version=read_version(),
    description="A torch.distributed backend whose collectives run on the Go runtime",
    long_description=open(os.path.join(ROOT, "README.md")).read() if os.path.exists(os.path.join(ROOT, "README.md")) else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    package_dir={"": "python"},
    packages=find_packages(where="python"),  # godist and its subpackages (godist.bench)
    package_data={"godist": ["libgodist.so", "libgodist.h", "godist.h"]},
    install_requires=["torch>=2.11"],
    entry_points={"torch.distributed.backends": ["godist = godist:_register"]},
    cmdclass={"build_py": BuildPy},
    distclass=BinaryDistribution,
    zip_safe=False,
)
