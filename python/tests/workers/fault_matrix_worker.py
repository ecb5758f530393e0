"""The ranks of test_fault_matrix.py, and the fork server that starts them.

``python fault_matrix_worker.py serve`` imports torch and godist once (not
libgodist: the Go runtime does not survive a fork) and then forks a rank
for every ``{"spawn": id, "cfg": {...}}`` line read on stdin, so a rank
starts in milliseconds instead of the seconds an import of torch takes.
It answers ``{"spawned": id, "pid": pid}``, reports every child that ends
as ``{"exited": pid, "status": code}`` (a negative code: the signal) and
runs ``{"sh": id, "argv": [...]}`` commands in its own namespaces.

A rank writes what it goes through as JSON lines to ``cfg["events"]``
(``{"ev": "running", "t": <time.time()>, ...}``), so the test can strike
at a chosen moment, and its outcome as one JSON object to
``cfg["result"]``. Its stdout and stderr (godist's log) go to
``cfg["log"]``.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist

import godist

# ---------------------------------------------------------------- fork server


def serve() -> None:
    out = sys.stdout
    buf = b""
    stdin = sys.stdin.fileno()

    def say(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    say({"ready": os.getpid()})
    while True:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            say({"exited": pid, "status": os.waitstatus_to_exitcode(status)})
        r, _, _ = select.select([stdin], [], [], 0.02)
        if not r:
            continue
        chunk = os.read(stdin, 1 << 16)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            msg = json.loads(line)
            if "spawn" in msg:
                pid = os.fork()
                if pid == 0:
                    code = 70
                    try:
                        code = _child(msg["cfg"])
                    finally:
                        os._exit(code)
                say({"spawned": msg["spawn"], "pid": pid})
            elif "sh" in msg:
                p = subprocess.run(msg["argv"], capture_output=True, text=True)
                say({"sh": msg["sh"], "rc": p.returncode, "out": p.stdout + p.stderr})


def _child(cfg) -> int:
    os.setpgid(0, 0)
    fd = os.open(cfg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.environ.update(cfg.get("env", {}))
    torch.set_num_threads(1)
    rank = Rank(cfg)
    try:
        result = SCENARIOS[cfg["scenario"]](rank)
    except BaseException:  # noqa: BLE001 - the test reads it
        result = {"crash": traceback.format_exc()}
    rank.finish(result)
    return 0


# ---------------------------------------------------------------- one rank


def describe(e: BaseException, start: float | None = None) -> dict:
    """An exception as the test checks it."""
    d = {"type": type(e).__name__, "msg": str(e), "is_dist_error": isinstance(e, dist.DistBackendError),
         "is_godist_error": isinstance(e, godist.GodistError), "is_timeout": isinstance(e, TimeoutError),
         "at": time.time()}
    for f in ("cause", "peer", "missing_ranks", "op", "seq", "group", "after"):
        d[f] = getattr(e, f, None)
    if start is not None:
        d["elapsed"] = time.monotonic() - start
    return d


class Wrong(AssertionError):
    """An op returned without error and with the wrong values."""


class Rank:
    def __init__(self, cfg):
        self.cfg = cfg
        self.rank, self.n = cfg["rank"], cfg["n"]
        self.timeout = cfg.get("timeout", 5.0)
        self.ev = open(cfg["events"], "a", buffering=1)

    def emit(self, ev, **kw):
        kw.update(ev=ev, t=time.time(), rank=self.rank)
        self.ev.write(json.dumps(kw) + "\n")
        self.ev.flush()

    def finish(self, result):
        godist._log.flush()
        tmp = self.cfg["result"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, self.cfg["result"])

    # ----- the group --------------------------------------------------------
    def init(self, path, rank=None, n=None, timeout=None, store=None):
        """The default group over the FileStore at path (or store)."""
        td = datetime.timedelta(seconds=timeout or self.timeout)
        rank = self.rank if rank is None else rank
        n = self.n if n is None else n
        if store is not None:
            dist.init_process_group("godist", store=store, rank=rank, world_size=n, timeout=td)
        else:
            dist.init_process_group("godist", init_method=f"file://{path}", rank=rank, world_size=n, timeout=td)

    def destroy(self):
        if dist.is_initialized():
            dist.destroy_process_group()

    # ----- resources --------------------------------------------------------
    def counts(self) -> dict:
        me = os.getpid()
        shm = sorted(f for f in _listdir("/dev/shm") if f.startswith(f"godist-probe-{me}-"))
        try:
            with open("/proc/self/maps") as f:
                maps = sorted({line.split()[-1] for line in f if "/dev/shm/godist-" in line})
        except OSError:
            maps = []
        st = godist.runtime_stats()
        return {"threads": len(os.listdir("/proc/self/task")), "fds": len(os.listdir("/proc/self/fd")),
                "goroutines": st["goroutines"], "handles": st["handles"], "shm": shm, "maps": maps}

    def settle(self, baseline=None, wait=3.0) -> dict:
        """The counts once the runtime is quiet: equal to baseline in
        goroutines, handles and shared memory, or after wait seconds."""
        gc.collect()
        deadline = time.monotonic() + wait
        prev = None
        while True:
            c = self.counts()
            if baseline is not None:
                if all(c[k] == baseline[k] for k in ("goroutines", "handles", "shm", "maps", "fds")):
                    return c
            elif prev is not None and c == prev:
                return c
            if time.monotonic() > deadline:
                return c
            prev = c
            time.sleep(0.05)
            gc.collect()

    def warmup(self, transport_ops=True):
        """A group like the one under test, formed, used and destroyed, so
        the baseline holds what the Go runtime keeps for good (its threads,
        the network poller)."""
        ranks = self.cfg.get("warm", list(range(self.n)))
        transport = os.environ.get("GODIST_TRANSPORT")
        if self.cfg.get("warm_transport"):
            os.environ["GODIST_TRANSPORT"] = self.cfg["warm_transport"]
        self.init(os.path.join(self.cfg["dir"], "warm"), rank=ranks.index(self.rank), n=len(ranks))
        if transport is None:
            os.environ.pop("GODIST_TRANSPORT", None)
        else:
            os.environ["GODIST_TRANSPORT"] = transport
        if transport_ops:
            t = torch.ones(1 << 16)
            dist.all_reduce(t)
            dist.broadcast(t, 0)
            dist.barrier()
        self.destroy()
        return self.settle()

    def leaks(self, baseline) -> dict:
        after = self.settle(baseline)
        return {"baseline": baseline, "after": after,
                "delta": {k: (after[k] - baseline[k]) if isinstance(after[k], int) else
                          sorted(set(after[k]) - set(baseline[k])) for k in after}}

    def recover(self, members):
        """A new group of the ranks in members, in this process, after the
        fault: it must work."""
        if self.rank not in members:
            return None
        r, m = members.index(self.rank), len(members)
        start = time.monotonic()
        try:
            self.init(os.path.join(self.cfg["dir"], "recover"), rank=r, n=m, timeout=30)
            t = torch.full((1000,), float(r + 1))
            dist.all_reduce(t)
            ok = bool(torch.all(t == m * (m + 1) / 2))
            self.destroy()
            return {"ok": ok, "elapsed": time.monotonic() - start}
        except Exception as e:  # noqa: BLE001
            return {"ok": False, "error": describe(e)}


def _listdir(d):
    try:
        return os.listdir(d)
    except OSError:
        return []


# ---------------------------------------------------------------- the op mix

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16, torch.float16]
SIZES = [8, 64, 1 << 10, 16 << 10, 256 << 10, 1 << 20]  # bytes
SIZE_WEIGHTS = [6, 4, 4, 3, 2, 1]
KINDS = ["all_reduce", "all_reduce_max", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "barrier",
         "send_recv"]
KIND_WEIGHTS = [6, 1, 2, 2, 2, 2, 1, 2]


def op_plan(seed: int, i: int, n: int) -> dict:
    """Op i of the run of seed: the same on every rank."""
    rng = random.Random(seed * 1_000_003 + i)
    kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
    dtype = rng.choice(DTYPES)
    nbytes = rng.choices(SIZES, SIZE_WEIGHTS)[0]
    elem = torch.empty((), dtype=dtype).element_size()
    count = max(n, nbytes // elem) // n * n  # divisible by n for the scatter ops
    return {"kind": kind, "dtype": dtype, "count": count, "async": rng.random() < 0.25, "root": rng.randrange(n),
            "v": rng.randrange(5)}


def run_op(p: dict, rank: int, n: int, i: int):
    """Run one planned op and check what it returned; raise Wrong on a
    wrong value."""
    kind, dt, count, v = p["kind"], p["dtype"], p["count"], p["v"]
    a = p["async"]

    def wait(w):
        if w is not None:
            w.wait()

    def check(t, want, what):
        if not torch.equal(t, want):
            bad = (t != want).nonzero()
            raise Wrong(f"op {i} ({what}, {dt}, {count} elements): {bad.numel()} wrong element(s), first at "
                        f"{bad[0].tolist()}: {t.flatten()[bad[0][0]].item()} instead of "
                        f"{want.flatten()[bad[0][0]].item()}")

    if kind in ("all_reduce", "all_reduce_max"):
        t = torch.full((count,), rank + 1 + v, dtype=dt)
        if kind == "all_reduce":
            wait(dist.all_reduce(t, async_op=a))
            check(t, torch.full((count,), n * (1 + v) + n * (n - 1) // 2, dtype=dt), kind)
        else:
            wait(dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=a))
            check(t, torch.full((count,), n + v, dtype=dt), kind)
    elif kind == "broadcast":
        t = torch.full((count,), rank * 3 + v, dtype=dt)
        wait(dist.broadcast(t, src=p["root"], async_op=a))
        check(t, torch.full((count,), p["root"] * 3 + v, dtype=dt), kind)
    elif kind == "all_gather":
        m = count // n
        out = torch.zeros(m * n, dtype=dt)
        wait(dist.all_gather_into_tensor(out, torch.full((m,), rank + v, dtype=dt), async_op=a))
        check(out, (torch.arange(n).repeat_interleave(m) + v).to(dt), kind)
    elif kind == "reduce_scatter":
        m = count // n
        inp = (torch.arange(n).repeat_interleave(m) + rank + 1).to(dt)
        out = torch.zeros(m, dtype=dt)
        wait(dist.reduce_scatter_tensor(out, inp, async_op=a))
        check(out, torch.full((m,), n * (rank + 1) + n * (n - 1) // 2, dtype=dt), kind)
    elif kind == "all_to_all":
        m = count // n
        inp = ((torch.arange(n) + rank * 4 + v) % 7 + 1).repeat_interleave(m).to(dt)
        out = torch.zeros(m * n, dtype=dt)
        wait(dist.all_to_all_single(out, inp, async_op=a))
        check(out, ((torch.arange(n) * 4 + rank + v) % 7 + 1).repeat_interleave(m).to(dt), kind)
    elif kind == "barrier":
        wait(dist.barrier(async_op=a))
    elif kind == "send_recv":
        peer = rank ^ 1
        if peer >= n:
            return
        mine = torch.full((count,), rank * 10 + v + 1, dtype=dt)
        got = torch.zeros(count, dtype=dt)
        if rank % 2 == 0:
            dist.send(mine, peer)
            dist.recv(got, peer)
        else:
            dist.recv(got, peer)
            dist.send(mine, peer)
        check(got, torch.full((count,), peer * 10 + v + 1, dtype=dt), kind)


def run_ops(rank: Rank, seed: int, count: int, before=None):
    """Ops 0..count-1 of seed's mix; returns (ops done, error or None).
    A wrong value is recorded in rank.wrong and the run goes on."""
    rank.wrong = []
    for i in range(count):
        p = op_plan(seed, i, rank.n)
        if before is not None:
            p = before(i, p) or p
        start = time.monotonic()
        try:
            run_op(p, rank.rank, rank.n, i)
        except Wrong as w:
            rank.wrong.append(str(w))
        except Exception as e:  # noqa: BLE001
            d = describe(e, start)
            d.update(op_index=i, op_kind=p["kind"])
            return i, d
    return count, None


def after_fault(rank: Rank, baseline, members, out):
    """What every rank that lives on does after its fault: destroy the
    group, count what is left, form a new group."""
    start = time.monotonic()
    try:
        rank.destroy()
    except Exception as e:  # noqa: BLE001
        out["destroy_error"] = describe(e)
    out["destroy_s"] = time.monotonic() - start
    out["leaks"] = rank.leaks(baseline)
    rank.emit("settled")
    out["recover"] = rank.recover(members)
    return out


# ---------------------------------------------------------------- scenarios


def sc_kill(rank: Rank):
    """SIGKILL of one rank during a run of mixed collectives."""
    c = rank.cfg
    victim, mode, k, seed, nops = c["victim"], c["mode"], c["kill_at"], c["seed"], c["ops"]
    me = rank.rank
    baseline = rank.warmup()
    rank.init(os.path.join(c["dir"], "store"))
    rank.emit("running", pid=os.getpid())

    def before(i, p):
        if i != k:
            return None
        if mode == "self_thread":
            # Op k is a large all_reduce on every rank; the victim is killed
            # from another thread while inside it.
            if me == victim:
                threading.Timer(c["delay"], os.kill, (os.getpid(), signal.SIGKILL)).start()
            return dict(p, kind="all_reduce", dtype=torch.float32, count=(1 << 20) // 4 // rank.n * rank.n)
        if me == victim and mode == "self_before":
            os.kill(os.getpid(), signal.SIGKILL)
        elif me == victim and mode == "parent":
            rank.emit("reached", op=i)
        return None

    done, err = run_ops(rank, seed, nops, before)
    if err is None:
        start = time.monotonic()
        try:
            if me == victim:
                time.sleep(60)  # the test kills it
            dist.barrier()
        except Exception as e:  # noqa: BLE001
            err = describe(e, start)
            err.update(op_index=nops, op_kind="final barrier")
    rank.emit("failed" if err else "done", error=err)
    out = {"done": done, "error": err, "wrong": rank.wrong}
    return after_fault(rank, baseline, c["members"], out)


def sc_stop(rank: Rank):
    """SIGSTOP of one rank: the others time out naming it; after SIGCONT
    its own ops fail, and nothing returns a wrong value."""
    c = rank.cfg
    baseline = rank.warmup()
    rank.init(os.path.join(c["dir"], "store"))
    rank.emit("running", pid=os.getpid())
    errors, ok_ops, wrong = [], 0, []
    deadline = time.monotonic() + c["run_s"]
    i = 0
    # Keep going until two ops failed (the first, then one refused by the
    # broken group) or the time is up.
    while len(errors) < 2 and time.monotonic() < deadline:
        p = op_plan(c["seed"], i, rank.n)
        if p["kind"] == "send_recv":
            p = dict(p, kind="all_reduce")
        start = time.monotonic()
        try:
            run_op(p, rank.rank, rank.n, i)
            ok_ops += 1
        except Wrong as w:
            wrong.append(str(w))
        except Exception as e:  # noqa: BLE001
            d = describe(e, start)
            d.update(op_index=i, op_kind=p["kind"])
            errors.append(d)
            if len(errors) == 1:
                rank.emit("failed", error=d)
        i += 1
    out = {"ok_ops": ok_ops, "errors": errors, "wrong": wrong}
    # Tear down once every rank has failed (the stopped one after SIGCONT):
    # a survivor that left sooner would end a slower survivor's op before
    # its own deadline, naming the survivor instead of the stopped rank.
    open(os.path.join(c["dir"], f"failed-{rank.rank}"), "w").close()
    until = time.monotonic() + 60
    while time.monotonic() < until and not all(os.path.exists(os.path.join(c["dir"], f"failed-{r}"))
                                               for r in range(rank.n)):
        time.sleep(0.01)
    return after_fault(rank, baseline, c["members"], out)


def sc_reset(rank: Rank):
    """A connection reset under large messages (TCP): the test destroys a
    rank's sockets with ss -K."""
    c = rank.cfg
    baseline = rank.warmup()
    rank.init(os.path.join(c["dir"], "store"))
    rank.emit("running", pid=os.getpid())
    count = c["nbytes"] // 4
    err, ok_ops, wrong = None, 0, []
    deadline = time.monotonic() + c["run_s"]
    i = 0
    while err is None and time.monotonic() < deadline:
        t = torch.full((count,), float(rank.rank + 1 + i % 3))
        start = time.monotonic()
        try:
            if i % 2:
                dist.all_reduce(t)
                want = rank.n * (1 + i % 3) + rank.n * (rank.n - 1) / 2
            else:
                dist.broadcast(t, src=i % rank.n)
                want = i % rank.n + 1 + i % 3
            if not torch.all(t == want):
                wrong.append(f"op {i}: {t[:4].tolist()} instead of {want}")
            ok_ops += 1
        except Exception as e:  # noqa: BLE001
            err = describe(e, start)
            err["op_index"] = i
        i += 1
    rank.emit("failed" if err else "done", error=err)
    out = {"ok_ops": ok_ops, "error": err, "wrong": wrong}
    return after_fault(rank, baseline, c["members"], out)


def _store(c, rank, n, timeout):
    """A client of the store server at c["store_addr"]: torch's TCPStore or
    godist's."""
    host, port = c["store_addr"]
    td = datetime.timedelta(seconds=timeout)
    if c["client"] == "godist":
        return godist.TCPStore(host, port, n, is_master=False, timeout=td)
    return dist.TCPStore(host, port, n, is_master=False, timeout=td)


def sc_store(rank: Rank):
    """The TCPStore's server, in a process of its own, is killed (a)
    while the group forms, or (b) once it formed."""
    c = rank.cfg
    baseline = rank.warmup()
    out = {}
    store = _store(c, rank.rank, rank.n, rank.timeout)
    rank.emit("joining")
    start = time.monotonic()
    try:
        rank.init(None, store=store)
    except Exception as e:  # noqa: BLE001
        out["init_error"] = describe(e, start)
        rank.emit("failed", error=out["init_error"])
    else:
        out["init_s"] = time.monotonic() - start
        rank.emit("formed")
        if c["phase"] == "training":
            # Wait for the test to kill the server, then train on.
            while not os.path.exists(c["go"]):
                time.sleep(0.01)
            out["ok_ops"], out["wrong"] = 0, []
            try:
                run_plan(c["seed"], 60, rank, out)
            except Exception as e:  # noqa: BLE001
                out["train_error"] = describe(e)
            # new_group splits from the world: no store needed.
            try:
                g = dist.new_group(list(range(rank.n)), timeout=datetime.timedelta(seconds=rank.timeout))
                t = torch.ones(10)
                dist.all_reduce(t, group=g)
                out["new_group"] = t[0].item()
                del g  # it holds the store (torch's client socket) until released
            except Exception as e:  # noqa: BLE001
                out["new_group_error"] = describe(e)
            # A group formed through the store fails, saying so.
            start = time.monotonic()
            try:
                godist.GodistProcessGroup(dist.PrefixStore("after-kill", store), rank.rank, rank.n,
                                          datetime.timedelta(seconds=rank.timeout), group_name="after-kill")
                out["store_group"] = "formed"
            except Exception as e:  # noqa: BLE001
                out["store_group_error"] = describe(e, start)
            # The old group still works.
            try:
                t = torch.ones(10)
                dist.all_reduce(t)
                out["after_new_group"] = t[0].item()
            except Exception as e:  # noqa: BLE001
                out["after_new_group_error"] = describe(e)
    if hasattr(store, "close"):
        store.close()
    del store
    return after_fault(rank, baseline, c["members"], out)


def run_plan(seed: int, count: int, rank: Rank, out: dict) -> None:
    """Runs the seed's first count ops, counting in out["ok_ops"] those
    that gave the right result and listing in out["wrong"] those that did
    not; any other error ends the run and is raised."""
    for i in range(count):
        try:
            run_op(op_plan(seed, i, rank.n), rank.rank, rank.n, i)
            out["ok_ops"] += 1
        except Wrong as w:
            out["wrong"].append(str(w))


def sc_store_server(rank: Rank):
    """Hosts torch's TCPStore server until killed."""
    c = rank.cfg
    s = dist.TCPStore("127.0.0.1", 0, c["n"], is_master=True, timeout=datetime.timedelta(seconds=60),
                      wait_for_workers=False)
    rank.emit("serving", port=s.port, pid=os.getpid())
    time.sleep(600)
    return {}


def sc_shm(rank: Rank):
    """Forms a group where /dev/shm is too small or read-only (the test
    runs the ranks in a mount namespace of their own)."""
    c = rank.cfg
    baseline = rank.warmup()
    out = {"shm_dir": sorted(_listdir("/dev/shm"))}
    start = time.monotonic()
    try:
        rank.init(os.path.join(c["dir"], "store"))
        out["init_s"] = time.monotonic() - start
        pg = dist.group.WORLD._get_backend(torch.device("cpu"))
        out["shared_memory"] = pg.shared_memory
        out["topology"] = godist.topology()
        out["ok_ops"], out["wrong"] = 0, []
        run_plan(c["seed"], 40, rank, out)
    except Exception as e:  # noqa: BLE001
        out["init_error"] = describe(e, start)
    return after_fault(rank, baseline, c["members"], out)


def sc_stranger(rank: Rank):
    """Strangers connect to this job's ranks while the group forms (the
    last rank joins late) and while it runs; nothing may change."""
    c = rank.cfg
    baseline = rank.warmup()
    if rank.rank == rank.n - 1:
        while not os.path.exists(c["go"]):
            time.sleep(0.01)
    rank.emit("joining", pid=os.getpid())
    start = time.monotonic()
    out = {}
    try:
        rank.init(os.path.join(c["dir"], "store"))
    except Exception as e:  # noqa: BLE001
        out["init_error"] = describe(e, start)
        rank.emit("failed", error=out["init_error"])
        return after_fault(rank, baseline, c["members"], out)
    out["init_s"] = time.monotonic() - start
    rank.emit("formed")
    ok, wrong, err = 0, [], None
    for i in range(c["ops"]):
        if i == c["ops"] // 2:
            rank.emit("midway")
            while not os.path.exists(c["go2"]):
                time.sleep(0.01)
        p = op_plan(c["seed"], i, rank.n)
        try:
            run_op(p, rank.rank, rank.n, i)
            ok += 1
        except Wrong as w:
            wrong.append(str(w))
        except Exception as e:  # noqa: BLE001
            err = describe(e)
            break
    out.update(ok_ops=ok, wrong=wrong, error=err)
    return after_fault(rank, baseline, c["members"], out)


SCENARIOS = {"kill": sc_kill, "stop": sc_stop, "reset": sc_reset, "store": sc_store, "store_server": sc_store_server,
             "shm": sc_shm, "stranger": sc_stranger}


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
