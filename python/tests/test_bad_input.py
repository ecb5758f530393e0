"""Bad input raises a clear Python exception (never a crash or a hang), and
the group stays usable afterwards."""

from __future__ import annotations

import ctypes

import pytest
import torch
import torch.distributed as dist

from harness import init, run_world


def _cases(rank, n, pg):
    """(name, callable, expected exception types, substring of the message)."""
    f = torch.ones(4)
    opts = dist.AllreduceOptions()
    bopts = dist.BroadcastOptions()
    bopts.rootRank = n + 3
    band = dist.AllreduceOptions()
    band.reduceOp = dist.ReduceOp.BAND
    cases = [
        ("all_gather wrong list length", lambda: dist.all_gather([torch.zeros(4)] * (n + 1), f), (ValueError,), "must have"),
        ("all_gather dtype mismatch", lambda: dist.all_gather([torch.zeros(4, dtype=torch.int32)] * n, f), (TypeError, ValueError), "dtype"),
        ("all_gather size mismatch", lambda: dist.all_gather([torch.zeros(5)] * n, f), (ValueError,), "elements"),
        ("all_gather_into_tensor wrong size", lambda: dist.all_gather_into_tensor(torch.zeros(4 * n + 1), f), (ValueError,), "elements"),
        ("reduce_scatter_tensor wrong size", lambda: dist.reduce_scatter_tensor(torch.zeros(4), torch.zeros(4 * n + 2)), (ValueError,), "elements"),
        ("reduce_scatter_tensor dtype mismatch", lambda: dist.reduce_scatter_tensor(torch.zeros(4, dtype=torch.float64), torch.zeros(4 * n)), (TypeError, ValueError), "dtype"),
        ("broadcast root out of range", lambda: pg.broadcast([f], bopts), (ValueError,), "out of range"),
        ("send to out-of-range rank", lambda: pg.send([f], n + 1, 0), (ValueError,), "out of range"),
        ("recv from negative rank", lambda: pg.recv([f], -2, 0), (ValueError,), "out of range"),
        ("meta tensor", lambda: pg.allreduce([torch.ones(4, device="meta")], opts), (ValueError,), "device meta"),
        ("sparse tensor", lambda: pg.allreduce([torch.ones(4).to_sparse()], opts), (ValueError,), "sparse"),
        ("not a tensor", lambda: pg.allreduce([[1, 2, 3]], opts), (TypeError,), "torch.Tensor"),
        ("two tensors in allreduce", lambda: pg.allreduce([f, f.clone()], opts), (ValueError,), "1 tensor"),
        ("BAND on float", lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND), (ValueError,), "BAND is not defined for float32"),
        ("BAND on float (direct)", lambda: pg.allreduce([torch.ones(4)], band), (ValueError,), "BAND"),
        ("PREMUL_SUM on int", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0)), (ValueError,), "PREMUL_SUM is not defined for int32"),
        ("AVG on bool", lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool), op=dist.ReduceOp.AVG), (ValueError,), "AVG is not defined for bool"),
        ("MAX on complex", lambda: dist.all_reduce(torch.ones(4, dtype=torch.complex64), op=dist.ReduceOp.MAX), (ValueError, RuntimeError), "complex"),
        ("unsupported dtype for reduction", lambda: dist.all_reduce(torch.ones(4, dtype=torch.uint16)), (TypeError,), "uint16"),
        ("all_to_all_single bad splits", lambda: dist.all_to_all_single(torch.zeros(4 * n), torch.zeros(4 * n), [1] * n, [2] * n), (ValueError,), "split"),
    ]
    if torch.cuda.is_available():
        # Only on a GPU host: CUDA tensors go to the device path, which names
        # what it refuses before any communicator is made.
        cases += [
            ("cpu and cuda tensors mixed", lambda: dist.all_gather([torch.ones(4) for _ in range(n)],
                                                                   torch.ones(4, device="cuda")), (ValueError,),
             "CUDA tensors"),
            ("BAND on cuda", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32, device="cuda"),
                                                     op=dist.ReduceOp.BAND),
             (ValueError,), "bitwise"),
        ]
    if n > 1:
        cases.append(("all_to_all_single indivisible",
                      lambda: dist.all_to_all_single(torch.zeros(4 * n + 1), torch.zeros(4 * n + 1)), (ValueError,), "divisible"))
    return cases


def bad_input_worker(rank, n, init_file):
    init(rank, n, init_file, gloo_group=False)
    pg = dist.group.WORLD
    problems = []
    for name, fn, types, text in _cases(rank, n, pg):
        try:
            fn()
            problems.append(f"{name}: no exception")
        except types as e:
            if text not in str(e):
                problems.append(f"{name}: message {str(e)!r} lacks {text!r}")
        except Exception as e:  # noqa: BLE001
            problems.append(f"{name}: wrong exception {type(e).__name__}: {e}")
    # Non-contiguous tensors work and leave the rest of the storage alone.
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + rank
    view = base[:, ::2]
    dist.all_reduce(view)
    want_view = (torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, ::2]) * n + sum(range(n))
    if not torch.equal(view, want_view):
        problems.append(f"non-contiguous all_reduce: {view.tolist()} != {want_view.tolist()}")
    if not torch.equal(base[:, 1::2], torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1::2] + rank):
        problems.append("non-contiguous all_reduce touched elements outside the view")
    outs = [torch.zeros(4, 2)[:, 0] for _ in range(n)]
    dist.all_gather(outs, torch.full((4,), float(rank)))
    if any(not torch.equal(o, torch.full((4,), float(r))) for r, o in enumerate(outs)):
        problems.append("non-contiguous all_gather outputs wrong")
    # The group is still usable.
    t = torch.ones(3)
    dist.all_reduce(t)
    if not torch.equal(t, torch.full((3,), float(n))):
        problems.append("group unusable after bad input")
    # After shutdown, calls fail clearly.
    dist.barrier()
    pg.shutdown()
    try:
        pg.allreduce([torch.ones(2)], dist.AllreduceOptions())
        problems.append("allreduce after shutdown: no exception")
    except dist.DistBackendError as e:
        if "closed" not in str(e) and "invalid or stale handle" not in str(e):
            problems.append(f"allreduce after shutdown: unclear {e}")
    return problems


@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad_input_raises_clearly(n):
    results = run_world(bad_input_worker, n, timeout=120)
    problems = [f"rank {r}: {p}" for r, ps in enumerate(results) for p in ps]
    assert not problems, "\n".join(problems)


def op_block_worker(rank, n, init_file):
    """The ops' entry points check a godist_op's fields themselves (C
    callers fill it by hand): out-of-range ranks and codes, a NULL buffer
    with a length, lists of the wrong length, a stale group handle and a
    NULL block are errors."""
    from godist import _errors, _lib
    from godist._lib import OUT_AT, TAG_AT, fill, fill_out, fill_tag

    init(rank, n, init_file, gloo_group=False)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    raw = _lib.load().raw
    view, addr, blk, eb = _lib.op_block()
    t = torch.ones(4)
    h = backend._h
    # (op, (pg, data, nbytes, timeout_ms, flags, dtype, reduce_op, root, peer), expected message)
    cases = [
        ("broadcast", (h, t.data_ptr(), t.nbytes, 0, 0, 0, 0, n, 0), f"root rank {n} is out of range"),
        ("broadcast", (h, t.data_ptr(), t.nbytes, 0, 0, 0, 0, -1, 0), "root rank -1 is out of range"),
        ("reduce", (h, t.data_ptr(), t.nbytes, 0, 0, 2, 0, 1 << 30, 0), f"root rank {1 << 30} is out"),
        ("send", (h, t.data_ptr(), t.nbytes, 0, 0, 0, 0, 0, -(1 << 31)), f"destination rank {-(1 << 31)} is out"),
        ("recv", (h, t.data_ptr(), t.nbytes, 0, 0, 0, 0, 0, n), f"source rank {n} is out"),
        ("allreduce", (h, t.data_ptr(), t.nbytes, 0, 0, 2, (1 << 31) - 1, 0, 0), "reduce op"),
        ("allreduce", (h, t.data_ptr(), t.nbytes, 0, 0, 99, 0, 0, 0), "dtype"),
        ("allreduce", (h, 0, 16, 0, 0, 2, 0, 0, 0), "NULL data pointer with length 16"),
        ("allreduce", (h, t.data_ptr(), -4, 0, 0, 2, 0, 0, 0), "invalid length -4"),
        ("barrier", (h + 1000, 0, 0, 0, 0, 0, 0, 0, 0), "handle"),
    ]
    problems = []
    for op, fields, text in cases:
        fill(view, 0, *fields)
        fill_tag(view, TAG_AT, 0)
        rc = getattr(raw, op)(addr)
        msg = eb.message.decode()
        if rc != _errors.INVALID or text not in msg:
            problems.append(f"{op} {fields[3:]}: rc {rc}, message {msg!r} (want {text!r})")
    if raw.barrier(None) != _errors.INVALID or raw.work_wait(None) != _errors.INVALID:
        problems.append("NULL block accepted")
    for flags in (-1, 4, 1 << 30):  # only GODIST_ASYNC (1) and GODIST_CUDA (2) are defined
        fill(view, 0, h, t.data_ptr(), t.nbytes, 0, flags, 0, 0, 0, 0)
        rc = raw.broadcast(addr)
        msg = eb.message.decode()
        if rc != _errors.INVALID or "unknown flags" not in msg:
            problems.append(f"flags {flags}: rc {rc}, message {msg!r}")
    # Two-buffer entries split evenly: the output's fields, and sizes that
    # do not split into one part per rank.
    big = torch.zeros(4 * n)
    odd = torch.zeros(4 * n + 1, dtype=torch.uint8)
    cases2 = [
        ("allgather", (t.data_ptr(), t.nbytes, 0, 0), (0, 16), "output buffer: NULL data pointer with length 16"),
        ("allgather", (t.data_ptr(), t.nbytes, 0, 0), (big.data_ptr(), -8), "output buffer: invalid length -8"),
        ("reduce_scatter", (big.data_ptr(), big.nbytes, 2, (1 << 31) - 1), (t.data_ptr(), t.nbytes), "reduce op"),
    ]
    if n > 1:  # one part per rank does not fit (any size splits into one part)
        cases2 += [
            ("alltoall", (odd.data_ptr(), odd.nbytes, 0, 0), (odd.data_ptr(), odd.nbytes),
             f"alltoall: the input's {4 * n + 1} bytes do not split into {n} equal parts"),
            ("reduce_scatter", (odd.data_ptr(), odd.nbytes, 0, 0), (t.data_ptr(), 1), "do not split into"),
            ("allgather", (t.data_ptr(), t.nbytes, 0, 0), (big.data_ptr(), big.nbytes + 4),
             f"output list[0] has {(big.nbytes + 4) // n} bytes, expected 16" if 4 % n == 0 else "do not split into"),
        ]
    for op, fields, out, text in cases2:
        fill(view, 0, h, fields[0], fields[1], 0, 0, fields[2], fields[3], 0, 0)
        fill_out(view, OUT_AT, *out)
        rc = getattr(raw, op)(addr)
        msg = eb.message.decode()
        if rc != _errors.INVALID or text not in msg:
            problems.append(f"{op} {fields[2:]} out {out}: rc {rc}, message {msg!r} (want {text!r})")
    fill_out(view, OUT_AT, 0, 0)
    # Lists: a list of the wrong length, a NULL list with a length, a bad
    # entry.
    four = [torch.zeros(4) for _ in range(n + 1)]
    lists = [
        ("allgather", _lib.GodistOp(pg=h, buf=(t.data_ptr(), t.nbytes)), "outs", [(x.data_ptr(), x.nbytes) for x in four],
         f"{n + 1}"),
        ("alltoall", _lib.GodistOp(pg=h, outs=_lib.buf_list([(x.data_ptr(), x.nbytes) for x in four[:n]])[0], nouts=n),
         "ins", [(0, 8)] * n, "NULL data pointer with length 8"),
        ("scatter", _lib.GodistOp(pg=h, out=(t.data_ptr(), t.nbytes), root=0), "nins", 3, "NULL list"),
    ]
    for op, blk2, field, value, text in lists:
        if field == "nins":
            blk2.nins = value
        else:
            arr, k = _lib.buf_list(value)
            setattr(blk2, field, arr)
            setattr(blk2, "n" + field, k)
        try:
            _lib.run(getattr(raw, op), blk2)
            problems.append(f"{op} {field}: accepted")
        except _errors.GodistInvalidError as e:
            if text not in str(e):
                problems.append(f"{op} {field}: {e} (want {text!r})")
        except Exception as e:
            problems.append(f"{op} {field}: {type(e).__name__}: {e}")
    # The same ops through torch, synchronous and asynchronous (the fast
    # paths of process_group.py), against what every rank contributed.
    x = torch.arange(4 * n, dtype=torch.float32) + 100 * rank
    y = torch.zeros(4 * n)
    for async_op in (False, True):
        y.zero_()
        w = dist.all_to_all_single(y, x, async_op=async_op)
        if w is not None:
            w.wait()
        want = torch.cat([torch.arange(4 * rank, 4 * rank + 4, dtype=torch.float32) + 100 * r for r in range(n)])
        if not torch.equal(y, want):
            problems.append(f"all_to_all_single async={async_op}: {y.tolist()} != {want.tolist()}")
        g = torch.zeros(4 * n)
        w = dist.all_gather_into_tensor(g, x[:4], async_op=async_op)
        if w is not None:
            w.wait()
        want = torch.cat([torch.arange(4, dtype=torch.float32) + 100 * r for r in range(n)])
        if not torch.equal(g, want):
            problems.append(f"all_gather_into_tensor async={async_op}: {g.tolist()} != {want.tolist()}")
        s = torch.zeros(4)
        w = dist.reduce_scatter_tensor(s, x, op=dist.ReduceOp.MAX, async_op=async_op)
        if w is not None:
            w.wait()
        want = torch.arange(4 * rank, 4 * rank + 4, dtype=torch.float32) + 100 * (n - 1)
        if not torch.equal(s, want):
            problems.append(f"reduce_scatter_tensor MAX async={async_op}: {s.tolist()} != {want.tolist()}")
    # A good block still works after the bad ones, through the same entry.
    fill(view, 0, h, t.data_ptr(), t.nbytes, 0, 0, 2, 0, 0, 0)
    rc = raw.allreduce(addr)
    if rc != _errors.OK or blk.work != 0 or not torch.equal(t, torch.full((4,), float(n))):
        problems.append(f"good block: rc {rc}, work {blk.work}, {t.tolist()}")
    # work_wait: an asynchronous op's handle is collected once and freed;
    # a second wait finds it gone (cause "handle").
    live = _lib.load().live_handles()
    fill(view, 0, h, t.data_ptr(), t.nbytes, 0, _lib.ASYNC, 2, 0, 0, 0)
    rc, work = raw.allreduce(addr), blk.work
    wb = _lib.GodistOp(work=work, timeout_ms=60_000, errbuf=ctypes.addressof(eb), errlen=_lib.ERRLEN)
    rc2 = raw.work_wait(ctypes.addressof(wb))
    if rc != _errors.OK or work == 0 or rc2 != _errors.OK or wb.source != -1 or \
            not torch.equal(t, torch.full((4,), float(n * n))):
        problems.append(f"async op through work_wait: rc {rc}/{rc2}, handle {work}, source {wb.source}, {t.tolist()}")
    if _lib.load().live_handles() != live:
        problems.append(f"work_wait left {_lib.load().live_handles() - live} handles")
    wb.timeout_ms = 0
    rc = raw.work_wait(ctypes.addressof(wb))
    if rc != _errors.INVALID or _errors.CAUSES[eb.cause] != "handle" or "collected" not in eb.message.decode() and \
            "handle" not in eb.message.decode():
        problems.append(f"work_wait on a collected handle: rc {rc}, cause {eb.cause}, {eb.message.decode()!r}")
    dist.destroy_process_group()
    return problems


@pytest.mark.parametrize("n", [1, 2, 3])
def test_op_block_checks_fields(n):
    results = run_world(op_block_worker, n, timeout=120)
    problems = [f"rank {r}: {p}" for r, ps in enumerate(results) for p in ps]
    assert not problems, "\n".join(problems)
