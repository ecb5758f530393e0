"""Builds the Go library (libgodist.so) into the package at install time.

``pip install .`` and ``pip install -e .`` both run ``go build
-buildmode=c-shared ./capi`` and build ``godist/bin/godist-gpuinfo`` (the
GPU report of ``godist info``, a program of its own so that NVML's bindings
stay out of the library); only a Go toolchain is needed. ``pip wheel .``
builds a wheel that installs without Go: its tag is ``py3-none-<platform>``
(the library is loaded with ctypes, so one wheel serves every Python 3), and
on Linux the platform is the ``manylinux_X_Y`` tag that the glibc symbol
versions the built library and program need allow (docs/install.md).

On Linux a wheel (``pip wheel .``, ``pip install .``; not an editable
install, which uses the system's C compiler) is built for glibc 2.28, the
glibc of torch's own wheels: cgo's and the MPI shims' C compiler is ``zig cc``
targeting it (tools/zigcc.py, with ``ziglang`` from PyPI, a build
requirement). GODIST_WHEEL_GLIBC chooses another version, or ``native`` for
the system's compiler and glibc.
"""

import glob
import importlib.util
import os
import platform
import re
import shlex
import shutil
import struct
import subprocess
import sys

from setuptools import Distribution, find_packages, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1: the command lives in the wheel package
    from wheel.bdist_wheel import bdist_wheel

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


# The native files the package always ships, relative to its directory;
# the MPI shims (mpi/*.so) are built where an mpicc is installed, and decide
# the wheel's platform tag with them when present.
GPUINFO = os.path.join("bin", "godist-gpuinfo")
NATIVE = ["libgodist.so", GPUINFO]


# The glibc a wheel is built for when GODIST_WHEEL_GLIBC is not set: that of
# torch's wheels (manylinux_2_28).
WHEEL_GLIBC = "2.28"


def release_cc() -> str | None:
    """The C compiler command for a wheel's native files: ``zig cc`` for the
    glibc GODIST_WHEEL_GLIBC names (default WHEEL_GLIBC) through
    tools/zigcc.py; None for the system's (``native``; not Linux; unset on
    a musl host or an architecture zig is not used for). When
    GODIST_WHEEL_GLIBC is not set and ziglang is not installed, the system's,
    with a warning: the wheel then needs this machine's glibc."""
    want = os.environ.get("GODIST_WHEEL_GLIBC", "").strip()
    if want == "native" or not sys.platform.startswith("linux"):
        return None
    # Unless asked to, leave alone a host zig has no glibc target for
    # (tools/zigcc.py's ARCH) and a musl host (docs/install.md: a linux_<arch>
    # wheel for that machine).
    if not want and (platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64")
                     or platform.libc_ver()[0] != "glibc"):
        return None
    if want and not re.fullmatch(r"2\.\d+", want):
        raise RuntimeError(f"GODIST_WHEEL_GLIBC={want!r}: use a glibc version (2.28) or native")
    if importlib.util.find_spec("ziglang") is None:
        if want:
            raise RuntimeError(f"GODIST_WHEEL_GLIBC={want}: building for glibc {want} needs zig: pip install ziglang")
        print(f"godist: WARNING: ziglang is not installed: the native files are built with the system's C compiler "
              f"and need this machine's glibc, not {WHEEL_GLIBC} (pip install ziglang, or GODIST_WHEEL_GLIBC=native "
              "to silence this)", file=sys.stderr)
        return None
    global _target_glibc
    _target_glibc = tuple(int(x) for x in (want or WHEEL_GLIBC).split("."))
    cc = [sys.executable, os.path.join(ROOT, "tools", "zigcc.py")]
    return " ".join(shlex.quote(a) for a in cc)


# The glibc release_cc chose to build for, as (2, 28); None: this machine's.
_target_glibc = None


def build_library(dest_dir: str, cc: str | None = None) -> None:
    """Builds the native files into dest_dir, with C compiler command cc
    (None: the system's)."""
    os.makedirs(os.path.join(dest_dir, "bin"), exist_ok=True)
    out = os.path.join(dest_dir, "libgodist.so")
    go = find_go()
    env = dict(os.environ, CGO_ENABLED="1")
    if cc:
        env.update(CC=cc, GODIST_WHEEL_GLIBC=os.environ.get("GODIST_WHEEL_GLIBC", "").strip() or WHEEL_GLIBC)
    subprocess.check_call([go, "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./capi"], cwd=ROOT, env=env)
    # libgodist.h (written beside the library) includes the ABI's types.
    shutil.copyfile(os.path.join(ROOT, "capi", "godist.h"), os.path.join(dest_dir, "godist.h"))
    # NVML's header marks some functions go-nvml binds deprecated: not our warnings.
    env["CGO_CFLAGS"] = os.environ.get("CGO_CFLAGS", "-O2 -g") + " -Wno-deprecated-declarations"
    subprocess.check_call([go, "build", "-trimpath", "-o", os.path.join(dest_dir, GPUINFO), "./cmd/godist-gpuinfo"],
                          cwd=ROOT, env=env)
    build_mpi_shims(dest_dir, env if cc else None)


# The MPI shims (backends/mpi/shim): one per MPI implementation whose mpicc
# is installed, loaded by libgodist.so only when MPI is used. A build where
# no mpicc exists ships none. Each is compiled with its mpicc's compile flags
# only (include directories, macros: the command that prints them, then the
# flags kept) and links no MPI library: no DT_NEEDED entry for one, so a
# wheel with the shims stays manylinux; their MPI symbols resolve against
# the implementation's library that the loader (backends/mpi/lib.go) opens
# RTLD_GLOBAL first. The Makefile's mpi-shims builds them the same way.
MPI_SHIMS = {"openmpi": ("mpicc.openmpi", "-showme:compile"), "mpich": ("mpicc.mpich", "-compile_info")}


def mpi_compile_flags(mpicc: str, query: str) -> list[str]:
    """The include directories and macros mpicc compiles with (what
    ``mpicc <query>`` prints, without its compiler and link flags)."""
    out = subprocess.run([mpicc, query], capture_output=True, text=True, check=True).stdout
    return [f for f in shlex.split(out) if f.startswith(("-I", "-D")) or f == "-pthread"]


def build_mpi_shims(dest_dir: str, cc_env: dict | None = None) -> list[str]:
    """Builds the shims whose mpicc is installed into dest_dir/mpi, with the
    C compiler command cc_env["CC"] (zig cc for a wheel; its environment
    cc_env), else $CC, else cc."""
    cc = shlex.split(cc_env["CC"] if cc_env else os.environ.get("CC") or "cc")
    out_dir = os.path.join(dest_dir, "mpi")
    src = os.path.join(ROOT, "backends", "mpi", "shim", "godist_mpi.c")
    built = []
    for impl, (mpicc, query) in MPI_SHIMS.items():
        path = shutil.which(mpicc)
        if not path:
            print(f"godist: skipped the {impl} MPI shim: {mpicc} not found")
            continue
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.join(out_dir, f"libgodist_mpi_{impl}.so")
        subprocess.check_call([*cc, *mpi_compile_flags(path, query), "-shared", "-fPIC", "-O2", "-o", out, src],
                              cwd=ROOT, env=cc_env)
        built.append(out)
    return built


class BuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            build_library(os.path.join(ROOT, "python", "godist"))
        else:
            build_library(os.path.join(self.build_lib, "godist"), release_cc())


# Libraries a manylinux wheel may need without carrying them: the glibc family
# (a subset of the manylinux policies' allowed libraries).
MANYLINUX_LIBS = {"libc.so.6", "libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1", "libresolv.so.2"}


def elf_dependencies(path: str) -> tuple[set[str], set[str]]:
    """The shared libraries an ELF file needs (DT_NEEDED) and the symbol
    versions it needs from them (its GNU version-needs section)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise ValueError(f"{path} is not an ELF file")
    is64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    shoff, shentsize, shnum, _ = struct.unpack_from(end + ("Q10xHHH" if is64 else "I10xHHH"), data,
                                                    0x28 if is64 else 0x20)
    shdr = end + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII")
    sections = [struct.unpack_from(shdr, data, shoff + i * shentsize) for i in range(shnum)]

    def string(strtab: int, off: int) -> str:
        start = sections[strtab][4] + off
        return data[start:data.index(b"\0", start)].decode()

    needed, versions = set(), set()
    for _, kind, _, _, off, size, link, info, _, entsize in sections:
        if kind == 6:  # SHT_DYNAMIC
            fmt = end + ("qQ" if is64 else "iI")
            for i in range(size // entsize):
                tag, val = struct.unpack_from(fmt, data, off + i * entsize)
                if tag == 1:  # DT_NEEDED
                    needed.add(string(link, val))
        elif kind == 0x6FFFFFFE:  # SHT_GNU_verneed: info entries, each with a list of Vernaux
            pos = off
            for _ in range(info):
                _, count, _, aux, nxt = struct.unpack_from(end + "HHIII", data, pos)
                apos = pos + aux
                for _ in range(count):
                    _, _, _, name, anext = struct.unpack_from(end + "IHHII", data, apos)
                    versions.add(string(link, name))
                    apos += anext
                pos += nxt
    return needed, versions


def manylinux_platform(files: list[str], plat: str, floor: tuple[int, int] | None = None) -> str:
    """``manylinux_X_Y_<arch>`` for a ``linux_<arch>`` wheel whose native
    files need only the glibc family, X.Y being the newest GLIBC_ symbol
    version they need, or floor if newer (the glibc they were built for:
    its headers, not only its symbols, went into them); ``plat`` unchanged
    otherwise (another OS, musl, other libraries, a file missing)."""
    if not plat.startswith("linux_") or not files or not all(os.path.exists(f) for f in files):
        return plat
    needed, versions = set(), set()
    for f in files:
        n, v = elf_dependencies(f)
        needed |= n
        versions |= v
    glibc = [(int(m.group(1)), int(m.group(2))) for m in map(re.compile(r"GLIBC_(\d+)\.(\d+)(\.\d+)?").fullmatch, versions)
             if m]
    if not glibc or not needed <= MANYLINUX_LIBS:
        return plat
    major, minor = max(glibc + ([floor] if floor else []))
    return f"manylinux_{major}_{minor}_{plat[len('linux_'):]}"


class BdistWheel(bdist_wheel):
    """Tags the wheel ``py3-none-<platform>``: no extension module, one wheel
    for every Python 3 on that platform; ``--plat-name`` still overrides it."""

    def get_tag(self):
        _, _, plat = super().get_tag()
        if not self.plat_name_supplied:
            pkg = os.path.join(self.get_finalized_command("build_py").build_lib, "godist")
            shims = sorted(glob.glob(os.path.join(pkg, "mpi", "*.so")))
            plat = manylinux_platform([os.path.join(pkg, f) for f in NATIVE] + shims, plat, _target_glibc)
        return "py3", "none", plat


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
    packages=find_packages(where="python"),  # godist and its subpackages (godist.bench, godist.info)
    # csrc/ops.cpp: the native kernel of torch.ops.godist.all_reduce_, compiled on first use (godist/_native.py)
    package_data={"godist": ["libgodist.so", "libgodist.h", "godist.h", "py.typed", GPUINFO, "mpi/*.so",
                             "csrc/*.cpp"]},
    install_requires=["torch>=2.11"],
    # Optional, for the benchmark only (python -m godist.bench --vs deepspeed): never a dependency of godist.
    extras_require={"bench": ["deepspeed"]},
    entry_points={
        "torch.distributed.backends": ["godist = godist:_register"],
        "console_scripts": ["godist = godist.__main__:main"],
    },
    cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel},
    distclass=BinaryDistribution,
    zip_safe=False,
)
