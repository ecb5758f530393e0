"""The example programs in examples/ run as their docstrings say and print the
results they promise.

Each program runs as a subprocess, the way a user starts it: `python
examples/X.py --world-size N` (the program spawns its own ranks) at 2 and 3
ranks, and some under torchrun. The tests parse every rank's result line and
check the values themselves (the sums, the falling loss, the identical
parameters), not only the exit status. A run that outlives its timeout is
killed with all its ranks.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import run_session

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RUN_TIMEOUT = 150  # seconds for one program, all its ranks together


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_program(argv: list[str], timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """Run argv in its own session with this tree's python/ on PYTHONPATH; kill
    the whole session (every rank) if it runs past timeout."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)  # a program decides from these whether torchrun started it
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "python"), env.get("PYTHONPATH")) if p)
    return run_session(argv, str(ROOT), env, timeout)


def spawned(name: str, world: int, *args: str) -> str:
    """Run examples/name with `python`, at world ranks; return its stdout."""
    r = run_program([sys.executable, str(EXAMPLES / name), f"--world-size={world}", *args])
    assert r.returncode == 0, f"exit status {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def torchrun(script: Path, nproc: int, *args: str) -> subprocess.CompletedProcess:
    return run_program([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                        f"--master-port={free_port()}", str(script), *args])


def by_rank(pattern: str, out: str, world: int) -> dict[int, tuple[str, ...]]:
    """The groups of pattern (whose first group is the rank) for each rank,
    which must print exactly one match. Ranks' lines may interleave in the
    output, so this searches the whole text, not line by line."""
    found = re.findall(pattern, out)
    ranks = sorted(int(m[0]) for m in found)
    assert ranks == list(range(world)), f"expected one line from each of {world} ranks:\n{out}"
    return {int(m[0]): tuple(m[1:]) for m in found}


# -- the tutorial's programs --------------------------------------------------


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.parametrize("world", [2, 3])
def test_p2p_blocking(world):
    out = spawned("p2p_blocking.py", world)
    data = by_rank(r"rank (\d+) has data (-?\d+\.\d+)", out, world)
    assert data == {r: ("1.0",) for r in range(world)}, out


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.parametrize("world", [2, 3])
def test_p2p_nonblocking(world):
    out = spawned("p2p_nonblocking.py", world)
    assert out.count("rank 0 started sending") == 1, out
    by_rank(r"rank (\d+) started (?:sending|receiving)", out, world)
    data = by_rank(r"rank (\d+) has data (-?\d+\.\d+)", out, world)
    assert data == {r: ("1.0",) for r in range(world)}, out


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.parametrize("world", [3])  # a rank outside the group [0, 1]
def test_all_reduce_in_a_group(world):
    out = spawned("all_reduce.py", world)
    got = by_rank(r"rank (\d+): (in|not in) group \[0, 1\], (?:all_reduce gives|keeps) (-?\d+\.\d+); "
                  r"over all ranks (-?\d+\.\d+)", out, world)
    for r in range(world):
        member = r in (0, 1)
        assert got[r] == ("in" if member else "not in", "2.0" if member else "1.0", f"{float(world)}"), out


def test_all_reduce_needs_two_ranks():
    r = run_program([sys.executable, str(EXAMPLES / "all_reduce.py"), "--world-size=1"], timeout=60)
    assert r.returncode != 0 and "at least 2" in r.stderr, r.stderr


def ring_expected(world: int) -> list[float]:
    # Rank r contributes [0, 1, ..., 5] * (r + 1).
    return [float(i * world * (world + 1) // 2) for i in range(6)]


def check_ring(out: str, world: int):
    got = by_rank(r"rank (\d+): ring all-reduce \[([^\]]*)\] equals dist.all_reduce: (True|False)", out, world)
    for r in range(world):
        values, same = got[r]
        assert [float(v) for v in values.split(",")] == ring_expected(world), out
        assert same == "True", out


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.parametrize("world", [3])  # 2 ranks: under torchrun below
def test_ring_allreduce(world):
    check_ring(spawned("ring_allreduce.py", world), world)


def final_lines(out: str, world: int) -> dict[int, tuple[float, float, bool]]:
    got = by_rank(r"rank (\d+): loss (\d+\.\d+) -> (\d+\.\d+), parameters identical on all ranks: (True|False)",
                  out, world)
    return {r: (float(a), float(b), same == "True") for r, (a, b, same) in got.items()}


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.parametrize("world", [3])
def test_distributed_sgd(world):
    epochs = 2
    out = spawned("distributed_sgd.py", world, f"--epochs={epochs}")
    per_epoch = re.findall(r"rank (\d+), epoch (\d+): loss (\d+\.\d+)", out)
    want = [(r, e) for r in range(world) for e in range(epochs)]
    assert sorted((int(r), int(e)) for r, e, _ in per_epoch) == want, out
    loss = {(int(r), int(e)): float(v) for r, e, v in per_epoch}
    for r, (first, last, same) in final_lines(out, world).items():
        assert (first, last) == (loss[r, 0], loss[r, epochs - 1]), out
        assert last < 0.8 * first, f"rank {r}'s loss did not fall:\n{out}"
        assert same, out
    # Each rank reports the loss on its own partition: the partitions differ.
    assert len({loss[r, 0] for r in range(world)}) > 1, out


def check_ddp(out: str, world: int, epochs: int):
    rank0 = [float(v) for v in re.findall(r"^epoch \d+: loss (\d+\.\d+)", out, re.M)]
    assert len(rank0) == epochs, out
    final = final_lines(out, world)
    for r, (first, last, same) in final.items():
        assert (first, last) == (rank0[0], rank0[-1]), out  # averaged over the ranks: the same everywhere
        assert last < 0.8 * first, f"the loss did not fall:\n{out}"
        assert same, out


@pytest.mark.timeout(RUN_TIMEOUT + 30)
@pytest.mark.parametrize("world", [3])  # 2 ranks: under torchrun below
def test_ddp_train(world):
    check_ddp(spawned("ddp_train.py", world, "--epochs=2"), world, 2)


# -- under torchrun -----------------------------------------------------------


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_ring_allreduce_under_torchrun():
    r = torchrun(EXAMPLES / "ring_allreduce.py", 2)
    assert r.returncode == 0, r.stdout + r.stderr
    check_ring(r.stdout, 2)


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_ddp_train_under_torchrun():
    r = torchrun(EXAMPLES / "ddp_train.py", 2, "--epochs=2")
    assert r.returncode == 0, r.stdout + r.stderr
    check_ddp(r.stdout, 2, 2)


BROKEN_RECV = textwrap.dedent("""
    # Runs examples/ring_allreduce.py with a dist.recv that corrupts what it receives.
    import runpy, sys
    import torch.distributed as dist

    recv = dist.recv
    def corrupt_recv(tensor, *args, **kwargs):
        src = recv(tensor, *args, **kwargs)
        tensor += 1
        return src
    dist.recv = corrupt_recv
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_ring_allreduce_fails_on_a_wrong_sum(tmp_path):
    """The program's own check works: a ring whose sums are wrong exits non-zero."""
    script = tmp_path / "broken_recv.py"
    script.write_text(BROKEN_RECV)
    r = torchrun(script, 2, str(EXAMPLES / "ring_allreduce.py"))
    assert r.returncode != 0, r.stdout + r.stderr
    assert "equals dist.all_reduce: False" in r.stdout, r.stdout + r.stderr
