"""The ``godist`` command (also ``python -m godist``).

Subcommands:

- ``info [--json]``: what godist sees on this host (see :mod:`godist.info`
  and docs/info.md).

Without a subcommand it prints this help and returns 2. The benchmark is a
command of its own: ``python -m godist.bench``.
"""

from __future__ import annotations

import argparse
import sys

COMMANDS = {"info": "what godist sees on this host: its library, transports, NCCL, CUDA, MPI, GPUs, settings, CPUs"}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="godist", description="godist: a torch.distributed backend whose collectives run on the Go runtime.",
        epilog="Benchmarks against gloo: python -m godist.bench --help")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name, text in COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run the ``godist`` command with argv (default: sys.argv[1:]) and
    return its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = _parser()
    if not argv:
        ap.print_help(sys.stderr)
        return 2
    if argv[0] not in COMMANDS:
        ap.parse_args(argv)  # -h prints the help and exits 0; anything else is an error that exits 2
        return 2
    from . import info

    return info.main(argv[1:], prog=f"{ap.prog} info")


if __name__ == "__main__":
    sys.exit(main())
