"""A C compiler for cgo and the MPI shims that targets an old glibc: ``zig cc`` (from
the ``ziglang`` package on PyPI) with ``-target <arch>-linux-gnu.<glibc>``.

Used as ``CC="python tools/zigcc.py"`` by setup.py for the release wheel
(docs/install.md), so that libgodist.so, godist-gpuinfo and the MPI shims
need nothing newer than that glibc (GODIST_WHEEL_GLIBC, default 2.28: the
manylinux tag torch's own wheels have).

zig's driver refuses one linker flag that cgo passes on: go-nvml (in
godist-gpuinfo) links with ``-Wl,--unresolved-symbols=ignore-in-object-files``
so that NVML's functions stay undefined until the program opens
libnvidia-ml.so.1. zig's linker, ld.lld, understands the flag; only the
driver does not. For such a link this script lets zig print the ld.lld
command it runs (``-v``) and runs that command itself with the flag, and
with lazy binding (``-z lazy``; zig links with ``-z now``, which would make
the loader resolve NVML's functions at start, before the program opens the
library).
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys

UNRESOLVED = "-Wl,--unresolved-symbols=ignore-in-object-files"
ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def target() -> str:
    glibc = os.environ.get("GODIST_WHEEL_GLIBC", "2.28")
    machine = platform.machine().lower()
    if machine not in ARCH:
        sys.exit(f"zigcc: no zig target for this machine ({machine})")
    return f"{ARCH[machine]}-linux-gnu.{glibc}"


def main(argv: list[str]) -> int:
    zig = [sys.executable, "-m", "ziglang"]
    cc = [*zig, "cc", "-target", target()]
    if UNRESOLVED not in argv:
        return subprocess.call([*cc, *argv])
    args = [a for a in argv if a != UNRESOLVED]
    p = subprocess.run([*cc, "-v", *args], capture_output=True, text=True)
    link = [ln for ln in p.stderr.splitlines() if ln.startswith("ld.lld ")]
    if not link:  # compiling, or failed before linking: say what zig said
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        return p.returncode
    # The command zig ran (and that failed on the undefined symbols), again
    # with the flag cgo asked for.
    cmd = [*zig, *shlex.split(link[-1]), "--unresolved-symbols=ignore-in-object-files", "-z", "lazy"]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
