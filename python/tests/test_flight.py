"""godist's own flight recorder (on by default, as gloo's): every op of a
godist group recorded in Go and written in torch's dump format, checked
against what torch records for gloo on the same ops, and read by torch's
analyzer (torchfrtrace) to name the rank that broke a job."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world

C = torch._C._distributed_c10d


def _ops(rank, n, pg):
    """One of each op on pg, every rank the same."""
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    dist.all_reduce(t, group=pg)
    dist.broadcast(t, n - 1, group=pg)
    dist.reduce(t, 0, group=pg)
    dist.all_gather_into_tensor(torch.zeros(2 * n, 3), t, group=pg)
    dist.all_gather([torch.zeros(2, 3) for _ in range(n)], t, group=pg)
    dist.all_to_all_single(torch.zeros(2 * n, dtype=torch.int64), torch.arange(2 * n), group=pg)
    dist.gather(t, [torch.zeros(2, 3) for _ in range(n)] if rank == 0 else None, 0, group=pg)
    dist.scatter(t, [torch.ones(2, 3) for _ in range(n)] if rank == 0 else None, 0, group=pg)
    dist.barrier(group=pg)
    dist.all_reduce(torch.ones(5, dtype=torch.bfloat16), op=dist.ReduceOp.MAX, group=pg)
    dist.broadcast(torch.ones(3, dtype=torch.int32), 0, group=pg)


def _numels(sizes):
    out = []
    for s in sizes:
        k = 1
        for d in s:
            k *= d
        out.append(k)
    return out


def _summary(e):
    return (e["profiling_name"].split(":", 1)[1], e["collective_seq_id"], _numels(e["input_sizes"]),
            _numels(e["output_sizes"]), e["input_dtypes"], e["output_dtypes"])


def _against_gloo_worker(rank, n, init_file):
    import godist

    gloo = init(rank, n, init_file)
    _ops(rank, n, dist.group.WORLD)
    _ops(rank, n, gloo)
    if n > 1 and rank == 0:
        dist.send(torch.ones(4), 1)
    if rank == 1:
        dist.recv(torch.ones(4), 0)
    mine = pickle.loads(godist.dump_fr_trace())
    theirs = pickle.loads(C._dump_fr_trace())
    return mine, theirs


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_records_every_op_as_torch_records_gloos(n):
    """With nothing set, a godist group's trace holds each op as torch's
    recorder holds gloo's (op, sequence number, element counts, dtypes),
    each completed, on every rank; sends and receives carry their peers."""
    for rank, (mine, theirs) in enumerate(run_world(_against_gloo_worker, n, timeout=130)):
        assert mine["version"] == theirs["version"], (mine["version"], theirs["version"])
        assert mine["pg_config"]["0"] == {"name": "0", "desc": "default_pg", "ranks": str(list(range(n)))}
        coll = [e for e in mine["entries"] if not e["is_p2p"]]
        assert [_summary(e) for e in coll] == [_summary(e) for e in theirs["entries"][:len(coll)]], rank
        assert len(coll) == 11 and all(e["state"] == "completed" and e["retired"] for e in coll), coll
        assert all(e["process_group"] == ("0", "default_pg") for e in mine["entries"])
        assert mine["pg_status"]["0"] == {"last_enqueued_collective": 11, "last_started_collective": 11,
                                          "last_completed_collective": 11}
        p2p = [(e["profiling_name"], e["p2p_seq_id"], e["state"]) for e in mine["entries"] if e["is_p2p"]]
        if rank == 0 and n > 1:
            assert p2p == [("godist:send 0->1", 1, "completed")], p2p
        elif rank == 1:
            assert p2p == [("godist:recv 1<-0", 1, "completed")], p2p
        else:
            assert p2p == [], p2p


def _skip_worker(rank, n, init_file):
    import godist

    init(rank, n, init_file, gloo_group=False, timeout_s=20)
    sub = dist.new_group(list(range(n)))
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.all_reduce(t, group=sub)
    dist.all_reduce(t)
    try:
        if rank == 1:
            dist.broadcast(t, 0)  # rank 1 skips the third all_reduce
        else:
            dist.all_reduce(t)
    except dist.DistBackendError as e:
        return str(e), pickle.loads(godist.dump_fr_trace())
    return None, None


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n, recorder", [(2, "godist"), (3, "godist"), (2, "torch")])
def test_a_failed_job_dumps_and_torchfrtrace_names_the_rank(tmp_path, n, recorder):
    """A job where rank 1 calls broadcast where the others call all_reduce:
    every rank fails, writes the flight recorder's trace to
    <TORCH_FR_DUMP_TEMP_FILE><rank> (godist's own by default; torch's when
    TORCH_FR_BUFFER_SIZE asks for it, torch 2.14+), and torchfrtrace names
    rank 1 and both ops at sequence number 3 of the default group."""
    import godist

    if recorder == "torch" and not godist._HAS_BACKEND:
        pytest.skip(f"torch {torch.__version__} cannot record godist's ops in its recorder (needs 2.14+)")
    env = {"TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "rank_")}
    if recorder == "torch":
        env["TORCH_FR_BUFFER_SIZE"] = "100"
    res = run_world(_skip_worker, n, timeout=130, env=env)
    assert all(err is not None for err, _ in res), res
    for rank, (_, trace) in enumerate(res):
        last = [e for e in trace["entries"] if e["process_group"][0] == "0"][-1]
        assert last["collective_seq_id"] == 3, last
        assert last["profiling_name"] == ("godist:broadcast" if rank == 1 else "godist:all_reduce"), last
        if recorder == "godist":
            assert last["state"] == "completed" and "error" in last, last
    assert sorted(os.listdir(tmp_path)) == [f"rank_{r}" for r in range(n)]
    out = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(tmp_path),
                          "-p", "rank_"], capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    if "name formatting error?" in text:
        pytest.skip(f"torch {torch.__version__}'s torchfrtrace reads NCCL's and XCCL's traces only (gloo's neither); "
                    "torch 2.15's reads godist's")
    assert out.returncode == 0, text
    assert "Culprit rank 1" in text and "COLLECTIVE_TYPE_MISMATCH" in text, text
    assert "'all_reduce'" in text and "'broadcast'" in text and "sequence number: 3" in text, text


def _off_worker(rank, n, init_file):
    import godist

    init(rank, n, init_file, gloo_group=False)
    dist.all_reduce(torch.ones(2))
    try:
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX)
    except dist.DistBackendError:
        pass
    return pickle.loads(godist.dump_fr_trace())["entries"]


@pytest.mark.timeout(120)
def test_size_zero_turns_it_off(tmp_path):
    """TORCH_FR_BUFFER_SIZE=0 (torch's switch) records nothing and writes
    no trace when a collective fails."""
    env = {"TORCH_FR_BUFFER_SIZE": "0", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "rank_")}
    assert run_world(_off_worker, 2, timeout=100, env=env) == [[], []]
    assert os.listdir(tmp_path) == []


def _attached_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    sub = dist.new_group(list(range(n)))
    hooks = dist.distributed_c10d._world.pg_flight_recorder_hooks
    return [pg in hooks for pg in (dist.group.WORLD, sub)]


@pytest.mark.skipif(not hasattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS"),
                    reason=f"torch {torch.__version__} attaches no flight recorder hook by itself (2.15+ does)")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [None, "100"])
def test_torch_attaches_its_recorder_only_when_asked(size):
    """torch 2.15 attaches its flight recorder's hook (the Python stack of
    every op that takes torch's route) to groups that do not record
    themselves: to godist's only when TORCH_FR_BUFFER_SIZE asks for it."""
    env = {"TORCH_FR_BUFFER_SIZE": size} if size else {}
    want = [size is not None] * 2
    assert run_world(_attached_worker, 2, timeout=100, env=env) == [want, want]
