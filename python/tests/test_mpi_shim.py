"""The MPI shims (backends/mpi/shim): libgodist.so links no MPI, godist works
where no shim or MPI exists, each built shim links no MPI library either
(its MPI functions stay undefined until the loader has opened the
implementation's library), and the bootstrap calls
(godist_mpi_open/bcast/finalize) work under mpirun."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

from godist import _lib

from test_gpuinfo import _needed

MPI_LIBRARY = re.compile(r"^lib(mpi|mpich|mpi_abi|open-pal|open-rte|pmix)[._]")
SHIMS = {"openmpi": ("mpicc.openmpi", "mpirun.openmpi", "libmpi.so.40"),
         "mpich": ("mpicc.mpich", "mpirun.mpich", "libmpich.so.12")}
MPI_DIR = os.path.join(os.path.dirname(_lib.library_path()), "mpi")
PYTHONPATH = os.path.dirname(os.path.dirname(_lib.library_path()))


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GODIST_MPI", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL"))}
    env["PYTHONPATH"] = PYTHONPATH + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


@pytest.mark.timeout(60)
def test_library_needs_no_mpi_library():
    needed = _needed(_lib.library_path())
    assert needed, "no NEEDED entries read"
    assert not [n for n in needed if MPI_LIBRARY.search(n)], needed


@pytest.mark.timeout(120)
def test_godist_works_without_a_shim(tmp_path):
    """A missing shim only matters once MPI is used: then godist_mpi_open
    fails with a message naming what it tried."""
    code = """if True:
        import json, sys
        import godist
        from godist import _lib
        lib = _lib.load()
        try:
            _lib.read_bytes(lib.mpi_open, sys.argv[1].encode())
        except ValueError as e:
            print(json.dumps(str(e)))
        else:
            print("opened")
        lib.mpi_finalize()
    """
    missing = str(tmp_path / "nope.so")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=100,
                       env=_clean_env(GODIST_MPI_SHIM=missing))
    assert p.returncode == 0, p.stderr
    msg = json.loads(p.stdout.strip().splitlines()[-1])
    assert "MPI is unavailable" in msg and missing in msg, msg
    # No variable at all and an empty directory: the message names what was looked for.
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=100,
                       env=_clean_env())
    assert p.returncode == 0, p.stderr
    msg = json.loads(p.stdout.strip().splitlines()[-1])
    assert "GODIST_MPI_SHIM" in msg and "OMPI_COMM_WORLD_SIZE" in msg and "libgodist_mpi_openmpi.so" in msg, msg
    # The MPI library the loader opens before the shim: GODIST_MPI_LIBRARY
    # names a file that is not there.
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=100,
                       env=_clean_env(GODIST_MPI="openmpi", GODIST_MPI_LIBRARY=missing))
    assert p.returncode == 0, p.stderr
    msg = json.loads(p.stdout.strip().splitlines()[-1])
    assert "MPI is unavailable" in msg and f"GODIST_MPI_LIBRARY={missing}" in msg, msg


def _undefined_symbols(path: str) -> set[str]:
    """The undefined symbols of a 64-bit ELF file's dynamic symbol table."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF file"
    end = "<" if data[5] == 1 else ">"
    shoff, shentsize, shnum = struct.unpack_from(end + "Q10xHH", data, 0x28)
    sections = [struct.unpack_from(end + "IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, kind, _, _, off, size, link, _, _, entsize in sections:
        if kind == 11:  # SHT_DYNSYM; its strings are in section link
            strtab = sections[link][4]
            for i in range(1, size // entsize):
                name, _, _, shndx = struct.unpack_from(end + "IBBH", data, off + i * entsize)
                if shndx == 0:  # SHN_UNDEF
                    start = strtab + name
                    names.add(data[start:data.index(b"\0", start)].decode())
    return names


@pytest.mark.timeout(60)
@pytest.mark.parametrize("impl", sorted(SHIMS))
def test_shim_needs_its_own_mpi(impl):
    """A shim names no MPI library in NEEDED (a wheel carrying it stays
    manylinux): its MPI functions are undefined, and resolve against the
    implementation's library that the loader opens RTLD_GLOBAL first."""
    mpicc, _, soname = SHIMS[impl]
    path = os.path.join(MPI_DIR, f"libgodist_mpi_{impl}.so")
    if not shutil.which(mpicc):
        pytest.skip(f"{mpicc} not found: the {impl} shim is not built here")
    assert os.path.exists(path), f"{path} was not built (make lib)"
    needed = _needed(path)
    assert needed, "no NEEDED entries read"
    assert not [n for n in needed if MPI_LIBRARY.search(n)], needed
    undefined = _undefined_symbols(path)
    assert {"MPI_Init_thread", "MPI_Iallreduce", "MPI_Finalize"} <= undefined, sorted(undefined)


RANK_SCRIPT = """if True:
    import ctypes, json, os, sys
    from godist import _lib
    lib = _lib.load()
    info = json.loads(_lib.read_bytes(lib.mpi_open, sys.argv[1].encode()))
    buf = ctypes.create_string_buffer(32)
    if info["rank"] == 0:
        buf.value = b"host:29500"
    lib.mpi_bcast(buf, len(buf), 0)
    lib.mpi_finalize()
    lib.mpi_finalize()
    line = (f"RANK {info['rank']} {info['size']} {info['impl']} {info['provided_name']} {buf.value.decode()} "
            f"{info['library']}\\n")
    os.write(1, line.encode())  # one write: the launcher forwards it whole
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("impl", sorted(SHIMS))
def test_bootstrap_under_mpirun(impl):
    _, mpirun, soname = SHIMS[impl]
    path = os.path.join(MPI_DIR, f"libgodist_mpi_{impl}.so")
    if not shutil.which(mpirun) or not os.path.exists(path):
        pytest.skip(f"no {mpirun} or no {impl} shim")
    args = [mpirun]
    if impl == "openmpi":
        args += ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
    args += ["-np", "2", sys.executable, "-c", RANK_SCRIPT, MPI_DIR]
    p = subprocess.run(args, capture_output=True, text=True, timeout=100, env=_clean_env())
    assert p.returncode == 0, p.stdout + p.stderr
    # mpirun interleaves the ranks' output, possibly within a line.
    # The loader opened the implementation's library (by its soname) itself.
    got = sorted(re.findall(r"RANK (\d+) (\d+) (\w+) (MPI_THREAD_\w+) (host:29500) (\S+)", p.stdout))
    assert got == [(str(r), "2", impl, "MPI_THREAD_MULTIPLE", "host:29500", soname) for r in range(2)], \
        p.stdout + p.stderr
