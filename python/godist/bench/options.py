"""The command-line options the benchmark's modes share (``cli.py`` and the
``--mpi``, ``--hosts`` and ``--device cuda`` modes): parsing lists, sizes,
operations and backends into a :class:`~godist.bench.config.Config`, and the
environment the ranks start in. A wrong value raises :class:`BadOption`."""

from __future__ import annotations

import os

from .config import MALLOC_ENV, OP_ALIASES, Config, geometric_sizes, human_bytes, parse_bytes


class BadOption(ValueError):
    """An option's value is wrong: argparse reports it (exit status 2)."""


def csv_list(text):
    """The non-empty items of a comma-separated list, stripped."""
    return [x.strip() for x in text.split(",") if x.strip()]


def int_list(option, text):
    """``option``'s comma-separated whole numbers."""
    try:
        return [int(x) for x in csv_list(text)]
    except ValueError:
        raise BadOption(f"{option}: expected comma-separated whole numbers, got {text!r}") from None


def byte_size(option, text):
    """``option``'s size in bytes (e.g. 8, 4K, 1M)."""
    try:
        return parse_bytes(text)
    except ValueError as e:
        raise BadOption(f"{option}: {e}") from None


def parse_world_sizes(text) -> list[int]:
    """--world-sizes: the world sizes, first occurrence kept."""
    sizes = list(dict.fromkeys(int_list("--world-sizes", text)))
    if not sizes:
        raise BadOption("--world-sizes: no world size given")
    return sizes


def parse_ops(text, allowed, unknown="--ops: unknown operation {op}; choose from {choices}") -> list[str]:
    """--ops: the operations named (aliases resolved, first occurrence kept);
    one not in ``allowed`` raises ``unknown`` with {op} (its repr) and
    {choices} filled in."""
    ops = []
    for x in csv_list(text):
        x = OP_ALIASES.get(x.lower(), x.lower())
        if x not in allowed:
            raise BadOption(unknown.format(op=repr(x), choices=", ".join(allowed)))
        if x not in ops:
            ops.append(x)
    if not ops:
        raise BadOption("--ops: no operation given")
    return ops


def parse_backends(text, allowed, choose="choose godist, gloo or godist,gloo") -> list[str]:
    """--backends: the backends named, in ``allowed``'s order; ``choose``
    ends the message for a wrong one."""
    chosen = [x.lower() for x in csv_list(text)]
    bad = [x for x in chosen if x not in allowed]
    if bad or not chosen:
        raise BadOption(f"--backends: {'unknown ' + ', '.join(map(repr, bad)) if bad else 'none given'}; {choose}")
    return [b for b in allowed if b in chosen]


def set_sizes(a, cfg: Config, lo: int, hi: int, step: int):
    """cfg.sizes from --sizes, or from --min-bytes/--max-bytes/--step over
    the mode's defaults ``lo``, ``hi`` and ``step`` (a preset cfg.sizes
    stays where none of them is given)."""
    if a.min_bytes:
        lo = byte_size("--min-bytes", a.min_bytes)
    if a.max_bytes:
        hi = byte_size("--max-bytes", a.max_bytes)
    if a.step is not None:
        if a.step < 2:
            raise BadOption("--step: the factor between sizes must be at least 2")
        step = a.step
    if a.sizes is not None:
        cfg.sizes = sorted({byte_size("--sizes", x) for x in csv_list(a.sizes)})
        if not cfg.sizes:
            raise BadOption("--sizes: no size given")
    elif not cfg.sizes or a.min_bytes or a.max_bytes or a.step:
        cfg.sizes = geometric_sizes(lo, hi, step)
        if not cfg.sizes:
            raise BadOption(f"--min-bytes {human_bytes(lo)} is above --max-bytes {human_bytes(hi)}: no sizes")
    if any(s < 1 for s in cfg.sizes):
        raise BadOption("--sizes/--min-bytes: every size must be at least 1 byte")


def set_process_options(a, cfg: Config, world_timeout=True):
    """--timeout (where ``world_timeout``), --op-timeout, --tcp-only and
    --default-malloc."""
    if world_timeout and a.timeout:
        cfg.world_timeout_s = a.timeout
    if a.op_timeout:
        cfg.op_timeout_s = a.op_timeout
    cfg.tcp_only = a.tcp_only
    cfg.pin_malloc = not a.default_malloc


def check_timing(cfg: Config):
    """--repeats and --target-ms must leave something to time."""
    if cfg.repeats < 1:
        raise BadOption("--repeats must be at least 1")
    if cfg.target_s <= 0:
        raise BadOption("--target-ms must be above 0")


def set_rank_env(cfg: Config, master_addr=True):
    """The environment the ranks run in (they inherit it: set it before
    they start): one OpenMP thread, gloo on loopback, the transport and
    malloc settings of cfg."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if master_addr:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if cfg.tcp_only:
        os.environ["GODIST_TRANSPORT"] = "tcp"
    if cfg.pin_malloc:
        for k, v in MALLOC_ENV.items():
            os.environ.setdefault(k, v)
