"""The native kernel of torch.ops.godist.all_reduce_ (godist/_native.py,
godist/csrc/ops.cpp): it is the kernel that runs for the common case, its
answers are gloo's, and every other case (a non-contiguous tensor, another
backend's group, hooks, coalescing, a forked child, a stale group name, a
failed build) goes through the Python kernel with the same results and
errors as without it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist
from harness import init, run_world

DTYPES = [torch.float32, torch.bfloat16, torch.int64]
OPS = ["sum", "avg", "max", "product"]
_OPS_CPP = "csrc/ops.cpp"


def _counts():
    from godist import _native

    return _native.counts()


def _cpu_kernel_is_native() -> bool:
    dump = torch._C._dispatch_dump("godist::all_reduce_")
    return any(line.startswith("CPU:") and _OPS_CPP in line for line in dump.splitlines())


def _input(rank: int, dtype, k: int = 5) -> torch.Tensor:
    base = torch.arange(k) % 3 + rank + 1
    return (base.to(torch.float64) / 4).to(dtype) if dtype.is_floating_point else base.to(dtype)


def _gloo(rank, n, dtype, op, gloo):
    want = _input(rank, dtype)
    if op == "avg":  # gloo has no AVG: the sum, divided as torch divides
        wide = want.to(torch.float64)
        dist.all_reduce(wide, group=gloo)
        return (wide / n).to(dtype)
    import godist.ops

    dist.all_reduce(want, op=godist.ops.reduce_op(op), group=gloo)
    return want


def _match_worker(rank, n, init_file):
    from godist import _native

    gloo = init(rank, n, init_file)
    out = {}
    t = torch.ones(3)
    torch.ops.godist.all_reduce_(t, "sum", "")  # the first call loads the kernel, then binds the group
    out["loaded"] = (_native.loaded(), _native.reason())
    out["dispatch"] = _cpu_kernel_is_native()
    out["bound"] = _native.bound()
    for dtype in DTYPES:
        for op in OPS:
            if op == "avg" and not dtype.is_floating_point:
                continue
            before = _counts()
            t = _input(rank, dtype)
            torch.ops.godist.all_reduce_(t, op, "")
            after = _counts()
            want = _gloo(rank, n, dtype, op, gloo)
            same = torch.allclose(t.double(), want.double(), rtol=1e-2) if op == "avg" else torch.equal(t, want)
            out[(str(dtype), op)] = (t.tolist(), same, after["done"] - before["done"])

    # a non-contiguous tensor: the Python kernel
    before = _counts()
    m = (torch.arange(6.0).reshape(2, 3) + rank).t()
    torch.ops.godist.all_reduce_(m, "sum", "")
    want = (torch.arange(6.0).reshape(2, 3) * n + sum(range(n))).t()
    after = _counts()
    out["noncontiguous"] = (m.tolist(), torch.equal(m, want), after["done"] - before["done"],
                            after["python"] - before["python"])

    # another backend's group: the Python kernel, never bound
    before = _counts()
    for _ in range(2):
        g = torch.full((4,), float(rank))
        torch.ops.godist.all_reduce_(g, "max", gloo.group_name)
    after = _counts()
    out["gloo_group"] = (g.tolist(), g.tolist() == [float(n - 1)] * 4, after["done"] - before["done"],
                         gloo.group_name in _native.bound())

    if n >= 3:
        sub = dist.new_group([0, n - 1])
        if rank in (0, n - 1):
            res = []
            for _ in range(3):
                u = torch.full((3,), rank + 1.0, dtype=torch.bfloat16)
                before = _counts()
                torch.ops.godist.all_reduce_(u, "sum", sub.group_name)
                res.append((u.tolist() == [float(n + 1)] * 3, _counts()["done"] - before["done"]))
            out["subgroup"] = (res, sub.group_name in _native.bound())

    # under torch's profiler: the Python kernel, whose op shows in the profile as godist:allreduce
    p = torch.ones(2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        before = _counts()
        torch.ops.godist.all_reduce_(p, "sum", "")
        after = _counts()
    names = {e.name for e in prof.events()}
    out["profiler"] = (p.tolist() == [float(n)] * 2, after["done"] - before["done"], after["python"] - before["python"],
                       "godist:allreduce" in names)

    # unbinding: set_timeout and coalescing drop the binding; the next call binds again
    import datetime

    world = dist.group.WORLD
    world.set_timeout(datetime.timedelta(seconds=50))
    unbound_timeout = "" not in _native.bound()
    t = torch.ones(2)
    torch.ops.godist.all_reduce_(t, "sum", "")
    rebound = "" in _native.bound()
    world._start_coalescing()
    unbound_coalescing = "" not in _native.bound()
    c = torch.ones(2)
    before = _counts()
    torch.ops.godist.all_reduce_(c, "sum", "")
    in_block = _counts()["done"] - before["done"]
    world._end_coalescing().wait()
    torch.ops.godist.all_reduce_(t, "sum", "")
    out["unbind"] = (unbound_timeout, rebound, unbound_coalescing, in_block, c.tolist() == [float(n)] * 2,
                     t.tolist() == [float(n * n)] * 2, "" in _native.bound())
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_native_kernel_runs_and_matches_gloo(n):
    res = run_world(_match_worker, n, timeout=280)
    for r, out in enumerate(res):
        assert out["loaded"] == (True, ""), out["loaded"]
        assert out["dispatch"], "the CPU kernel of godist::all_reduce_ is not the native one"
        assert out["bound"] == [""], out["bound"]
        for key, entry in out.items():
            if isinstance(key, tuple):
                value, same, native = entry
                assert same, (n, r, key, value)
                assert value == res[0][key][0], (n, r, key)
                assert native == 1, (n, r, key, "not run by the native kernel")
        value, same, native, python = out["noncontiguous"]
        assert same and native == 0 and python == 1, out["noncontiguous"]
        value, same, native, bound = out["gloo_group"]
        assert same and native == 0 and not bound, out["gloo_group"]
        if n >= 3 and r in (0, n - 1):
            calls, bound = out["subgroup"]
            assert all(ok for ok, _ in calls) and bound, out["subgroup"]
            assert [d for _, d in calls] == [0, 1, 1], out["subgroup"]  # bound after its first call
        assert out["profiler"] == (True, 0, 1, True), out["profiler"]
        unbound_timeout, rebound, unbound_coalescing, in_block, c_ok, t_ok, bound = out["unbind"]
        assert unbound_timeout and rebound and unbound_coalescing and in_block == 0, out["unbind"]
        assert c_ok and t_ok and bound, out["unbind"]


def _detail_worker(rank, n, init_file):
    from godist import _native

    init(rank, n, init_file, gloo_group=False)
    res = []
    for _ in range(3):
        t = torch.full((3,), rank + 1.0)
        torch.ops.godist.all_reduce_(t, "sum", "")
        res.append(t.tolist() == [float(sum(range(1, n + 1)))] * 3)
    return {"ok": res, "loaded": _native.loaded(), "bound": _native.bound(), "counts": _counts()}


@pytest.mark.timeout(120)
def test_detail_debug_binds_nothing():
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL ops describe their tensors (the
    Python side's job): the native kernel takes none of them."""
    for out in run_world(_detail_worker, 2, timeout=100, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}):
        assert out["ok"] == [True] * 3 and out["loaded"] and out["bound"] == [], out
        assert out["counts"]["done"] == 0 and out["counts"]["python"] == 2, out


def _queued_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    t = torch.ones(4)
    for _ in range(2):
        torch.ops.godist.all_reduce_(t, "sum", "")
    res = []
    for _ in range(3):
        big = torch.ones(1 << 20)
        work = dist.all_reduce(big, async_op=True)
        before = _counts()
        t = torch.full((4,), rank + 1.0)
        torch.ops.godist.all_reduce_(t, "sum", "")
        after = _counts()
        work.wait()
        res.append((t.tolist() == [3.0] * 4, big[0].item() == 2.0, after["finished"] - before["finished"]))
    return res


@pytest.mark.timeout(120)
def test_op_queued_behind_async_ops():
    """An all_reduce_ issued while an asynchronous all_reduce is in flight:
    Go queues it and hands back a work handle, which the kernel gives to
    Python to wait for."""
    for res in run_world(_queued_worker, 2, timeout=100):
        assert all(a and b for a, b, _ in res), res
        assert any(f for _, _, f in res), res  # at least one went through _native_finish


def _parity_worker(rank, n, init_file, native):
    from godist import _native
    from test_custom_ops import _ops_worker

    out = _ops_worker(rank, n, init_file)
    out["loaded"] = _native.loaded()
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("native", ["1", "0"])
def test_custom_ops_with_and_without_native(native):
    """test_custom_ops' checks (every dtype and op, errors, torch.compile)
    with the native kernel on and off (GODIST_NATIVE_OPS=0)."""
    res = run_world(_parity_worker, 2, native, timeout=280, env={"GODIST_NATIVE_OPS": native})
    for r, out in enumerate(res):
        assert out.pop("loaded") is (native == "1")
        msgs = out.pop("errors")
        assert "unknown reduce op 'median'" in msgs[0] and "no-such-group" in msgs[1], msgs
        for key, entry in out.items():
            assert entry[1], (r, key, entry[0])


def _reuse_worker(rank, n, init_file):
    """The default group destroyed and a new one created under the same
    name: the native kernel must not use the old handle. Python's unbind
    is switched off for the destroy, so that only the kernel's own check
    (the name resolves to another ProcessGroup now) stands in the way."""
    import godist._native as native

    init(rank, n, init_file, gloo_group=False)
    t = torch.ones(4)
    for _ in range(2):
        torch.ops.godist.all_reduce_(t, "sum", "")
    name = dist.group.WORLD.group_name
    bound_before = native.bound()
    real = native.unbind
    native.unbind = lambda h: None
    try:
        dist.destroy_process_group()
        stale = native.bound()
        init(rank, n, init_file + ".2", gloo_group=False)
        name2 = dist.group.WORLD.group_name
    finally:
        native.unbind = real
    before = _counts()
    t = torch.full((4,), rank + 1.0)
    torch.ops.godist.all_reduce_(t, "sum", "")
    first = _counts()
    torch.ops.godist.all_reduce_(t, "sum", "")
    second = _counts()
    want = float(sum(range(1, n + 1)))
    # the usual way: destroying the group unbinds it at once
    dist.destroy_process_group()
    after_destroy = native.bound()
    return {"names": (name, name2), "bound_before": bound_before, "stale": stale,
            "first": (first["done"] - before["done"], first["python"] - before["python"]),
            "second": second["done"] - first["done"], "values": t.tolist() == [want * n] * 4,
            "after_destroy": after_destroy}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [1, 2])
def test_recreated_default_group_is_not_stale(n):
    for out in run_world(_reuse_worker, n, timeout=160):
        assert out["names"][0] == out["names"][1], out  # the same name, another group
        assert out["bound_before"] == [""] and out["stale"] == [""], out
        assert out["first"] == (0, 1), out  # the stale entry dropped: the Python kernel, which binds the new group
        assert out["second"] == 1 and out["values"], out
        assert out["after_destroy"] == [], out


def _hooks_worker(rank, n, init_file):
    from godist import _native

    init(rank, n, init_file, gloo_group=False)
    world = dist.group.WORLD
    t = torch.ones(2)
    for _ in range(2):
        torch.ops.godist.all_reduce_(t, "sum", "")
    bound = _native.bound()
    calls = []
    world.register_pre_hook(3, lambda a: calls.append(str(a.name)))
    hooked_bound = _native.bound()
    before = _counts()
    for _ in range(2):
        torch.ops.godist.all_reduce_(t, "sum", "")
    during = _counts()
    world.unregister_pre_hook(3)
    for _ in range(2):
        torch.ops.godist.all_reduce_(t, "sum", "")
    after = _counts()
    return {"bound": bound, "hooked_bound": hooked_bound, "calls": calls, "native_while_hooked":
            during["done"] - before["done"], "native_after": after["done"] - during["done"],
            "values": t.tolist() == [float(n ** 6)] * 2}


def _has_backend() -> bool:
    import godist

    return godist._HAS_BACKEND


@pytest.mark.skipif(not _has_backend(), reason="hooks take torch's route only with godist's c10d Backend (torch 2.14+)")
@pytest.mark.timeout(120)
def test_hooks_registered_after_binding_fire():
    for out in run_world(_hooks_worker, 2, timeout=100):
        assert out["bound"] == [""] and out["hooked_bound"] == [], out
        assert len(out["calls"]) == 2 and all("allreduce" in c.lower() for c in out["calls"]), out
        assert out["native_while_hooked"] == 0 and out["native_after"] == 1 and out["values"], out


def _reconfigure_worker(rank, n, init_file):
    """torch 2.15's reconfigure: the group's fast path moves to a new godist
    group, so the native kernel must forget the old one's handle."""
    import datetime

    store = dist.FileStore(init_file + ".rc", n)
    dist.init_process_group("godist", rank=rank, world_size=n, store=store, timeout=datetime.timedelta(seconds=30),
                            enable_reconfigure=True)
    store.set(f"h_{rank}", dist._get_reconfigure_handle())
    everyone = [store.get(f"h_{r}").decode() for r in range(n)]

    def reconf(uuid, hs):
        dist._reconfigure(uuid, hs, timeout=datetime.timedelta(seconds=30)).wait()

    def calls():
        res = []
        for _ in range(3):
            t = torch.full((4,), rank + 1.0)
            before = _counts()
            torch.ops.godist.all_reduce_(t, "sum", "")
            res.append((t[0].item(), _counts()["done"] - before["done"]))
        return res

    out = {}
    try:  # no members yet: the op refuses (and loads the kernel)
        torch.ops.godist.all_reduce_(torch.ones(1), "sum", "")
        out["before"] = "no error"
    except RuntimeError as e:
        out["before"] = str(e)
    world = dist.group.WORLD
    world.register_pre_hook(5, lambda a: None)  # unbinds the unformed group: nothing to unbind
    world.unregister_pre_hook(5)
    reconf(100, everyone)
    out["all"] = calls()
    reconf(200 + rank, [dist._get_reconfigure_handle()])  # every rank alone
    out["alone"] = calls()
    reconf(300, everyone)
    out["again"] = calls()
    return out


@pytest.mark.skipif(not _has_backend() or not hasattr(dist, "_reconfigure"), reason="needs torch 2.15's reconfigure")
@pytest.mark.timeout(120)
def test_reconfigure_rebinds():
    n = 2
    total = float(sum(range(1, n + 1)))
    for r, out in enumerate(run_world(_reconfigure_worker, n, timeout=100)):
        assert "enable_reconfigure=True" in out["before"], out
        assert out["all"] == [(total, 0), (total, 1), (total, 1)], out
        assert out["alone"] == [(r + 1.0, 0), (r + 1.0, 1), (r + 1.0, 1)], out
        assert out["again"] == [(total, 0), (total, 1), (total, 1)], out


def _kill_worker(rank, n, init_file):
    import godist
    from godist import _native

    init(rank, n, init_file, timeout_s=60, gloo_group=False)
    t = torch.ones(1 << 10)
    for _ in range(3):
        torch.ops.godist.all_reduce_(t, "sum", "")
    if rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    before = _counts()
    start = time.monotonic()
    try:
        for _ in range(5):
            torch.ops.godist.all_reduce_(t, "sum", "")
    except Exception as e:  # noqa: BLE001
        after = _counts()
        return {"type": type(e).__name__, "godist": isinstance(e, godist.GodistError), "msg": str(e),
                "cause": getattr(e, "cause", None), "peer": getattr(e, "peer", None),
                "elapsed": time.monotonic() - start, "listeners_ran": dist.group.WORLD._g._hooks_ran,
                "finished": after["finished"] - before["finished"], "loaded": _native.loaded()}
    return {"type": None}


@pytest.mark.timeout(200)
def test_killed_peer_raises_the_same_error():
    """A peer killed between two ops: the survivor's all_reduce_ raises the
    same GodistError subclass, with the same fields, and runs the group's
    failure listeners, with the native kernel and without."""
    got = {}
    for native in ("1", "0"):
        (r,) = run_world(_kill_worker, 2, timeout=90, expect_exit={1: None}, env={"GODIST_NATIVE_OPS": native})[:1]
        assert r["type"] is not None, f"GODIST_NATIVE_OPS={native}: all_reduce_ succeeded with a dead peer"
        assert r["godist"] and r["loaded"] is (native == "1"), r
        assert "rank 1" in r["msg"] and "connection lost" in r["msg"], r["msg"]
        assert r["cause"] == "conn_lost" and r["peer"] == 1 and r["elapsed"] < 10, r
        assert r["listeners_ran"], r
        got[native] = r
    assert got["1"]["finished"] == 1, got["1"]  # the native kernel's call failed, Python raised its error
    assert got["1"]["type"] == got["0"]["type"], got


def _fork_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    t = torch.ones(4)
    for _ in range(2):
        torch.ops.godist.all_reduce_(t, "sum", "")
    child = None
    if rank == 0:
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what the op raised, and leave at once
            try:
                try:
                    torch.ops.godist.all_reduce_(torch.ones(4), "sum", "")
                    msg = "no error"
                except BaseException as e:  # noqa: BLE001
                    msg = type(e).__name__ + ": " + str(e).splitlines()[0]
                os.write(wr, msg.encode()[:4000])
            finally:
                os._exit(0)
        os.close(wr)
        deadline = time.monotonic() + 60
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.05)
        child = os.read(rd, 4096).decode() or "nothing (killed after 60 s)"
        os.close(rd)
    before = _counts()
    t = torch.ones(4)
    torch.ops.godist.all_reduce_(t, "sum", "")  # the parent goes on, natively
    return {"child": child, "after": (t.tolist() == [float(n)] * 4, _counts()["done"] - before["done"])}


@pytest.mark.timeout(180)
def test_forked_child_gets_fork_error():
    res = run_world(_fork_worker, 2, timeout=160)
    assert res[0]["child"].startswith("GodistForkError"), res[0]["child"]
    for out in res:
        assert out["after"] == (True, 1), out


def _gil_worker(rank, n, init_file):
    """Another Python thread runs while this one waits in the native kernel
    for a late peer: the kernel runs without the GIL, as ctypes calls do."""
    init(rank, n, init_file, gloo_group=False)
    t = torch.ones(4)
    for _ in range(2):
        torch.ops.godist.all_reduce_(t, "sum", "")
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1

    if rank == 1:
        time.sleep(1.0)
    th = threading.Thread(target=spin, daemon=True)
    th.start()
    before = _counts()
    start_ticks = ticks[0]
    torch.ops.godist.all_reduce_(t, "sum", "")
    during = ticks[0] - start_ticks
    stop.set()
    th.join()
    return {"ticks": during, "native": _counts()["done"] - before["done"]}


@pytest.mark.timeout(120)
def test_native_kernel_releases_the_gil():
    out = run_world(_gil_worker, 2, timeout=100)[0]
    assert out["native"] == 1, out
    assert out["ticks"] > 1000, out


def _build_fails_worker(rank, n, init_file):
    from godist import _native

    gloo = init(rank, n, init_file)
    res = []
    for dtype in (torch.float32, torch.int64):
        t = _input(rank, dtype)
        torch.ops.godist.all_reduce_(t, "sum", "")
        res.append(torch.equal(t, _gloo(rank, n, dtype, "sum", gloo)))
    return {"ok": res, "loaded": _native.loaded(), "reason": _native.reason(), "dispatch": _cpu_kernel_is_native()}


@pytest.mark.timeout(120)
def test_failed_build_falls_back(tmp_path):
    env = {"CXX": "/bin/false", "GODIST_CACHE": str(tmp_path / "cache")}
    for out in run_world(_build_fails_worker, 2, timeout=100, env=env):
        assert out["ok"] == [True, True], out
        assert not out["loaded"] and not out["dispatch"], out
        assert "failed" in out["reason"], out


@pytest.mark.timeout(120)
def test_import_builds_nothing(tmp_path):
    """import godist (and godist.ops) compiles nothing: the op's first call does."""
    code = ("import godist, godist.ops, godist._native as n, os; "
            "assert n._state is None, n._state; assert not os.path.exists(n.cache_root()), n.cache_root(); print('ok')")
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, GODIST_CACHE=str(tmp_path / "c")),
                       capture_output=True, text=True, timeout=100)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr
