"""One description of each op, for every device path.

Each function here checks one op's arguments and says what the library must
do for it, the same for CPU and CUDA tensors: a :class:`Desc` holding the
op's name, the tensors its Work returns, the library calls it makes (each an
entry point and the fields of its :class:`godist._lib.GodistOp`), what must
stay alive until it completes, and the contiguous stand-ins of
non-contiguous outputs (copied back when it succeeds).

A device path runs the descriptions: the CPU path
(:meth:`godist._group_ops.GroupOps._run`) submits the calls to the engine,
the NCCL path (:meth:`godist._nccl.NcclPath._run`) enqueues them on the
caller's CUDA stream. What differs between devices is in their
:class:`Rules`: which tensors a path takes and which reductions it can do.
The staged path (:mod:`godist._staged`) copies CUDA tensors to host
stand-ins and runs the CPU path's descriptions on them.

Every function takes the rules, the group (its ``_rank`` and ``_size``)
and the arguments of the ProcessGroup method of the same name.
"""

from __future__ import annotations

import torch

from . import _checks, _fast, _lib, _types
from ._args import _async, _desc, _Outputs


# A call of an op: a tuple (entry, fields, named) -- plain tuples, since the
# general path of small ops pays for every object it makes:
#   entry   the entry point: "allreduce", "allgather", ... (_lib.OP_CODES)
#   fields  its GodistOp fields; buf/out a (pointer, nbytes) pair, ins/outs
#           lists of them
#   named   the op's tensors by argument name, as desync detection
#           describes them


class Desc:
    """What one op does: see the module's docstring."""

    __slots__ = ("op", "outputs", "calls", "keep", "outs", "opts", "peer")
    # calls: the op's calls, each (entry, fields, named) as above

    def __init__(self, op, outputs, calls, keep, outs, opts, peer=-1):
        self.op, self.outputs, self.calls, self.keep, self.outs, self.opts = op, outputs, calls, keep, outs, opts
        self.peer = peer  # a point-to-point op's peer rank (-1: a collective)

    @property
    def async_op(self) -> bool:
        return _async(self.opts)

    @property
    def timeout_ms(self) -> int:
        return _types.opts_timeout(self.opts)


def block(h: int, timeout_ms: int, fields: dict, **extra) -> _lib.GodistOp:
    """The GodistOp of one call on group handle h."""
    if "ins" not in fields and "outs" not in fields:
        return _lib.GodistOp(pg=h, timeout_ms=timeout_ms, **fields, **extra)
    ins, outs = fields.get("ins"), fields.get("outs")
    fields = {k: v for k, v in fields.items() if k != "ins" and k != "outs"}
    op = _lib.GodistOp(pg=h, timeout_ms=timeout_ms, **fields, **extra)
    if ins is not None:
        op.ins, op.nins = _lib.buf_list(ins)
    if outs is not None:
        op.outs, op.nouts = _lib.buf_list(outs)
    return op


class Rules:
    """What the CPU path takes: dense CPU tensors; it reduces every dtype of
    godist._types.DTYPE_CODES with every reduce op. The NCCL path's rules
    (godist._nccl) take CUDA tensors of one device and NCCL's reductions."""

    # reduce_scatter's list of inputs goes to the library as one flat tensor
    # (NCCL's form) rather than as a list of buffers.
    flat_scatter = False

    # tensor(op, name, t), tensors(op, name, ts, length=None) and
    # single(op, name, ts): one tensor argument, a list of them, a list of
    # one (the checks, as plain functions: no method call on the CPU path).
    tensor = staticmethod(_checks.tensor)
    tensors = staticmethod(_checks.tensor_list)
    single = staticmethod(_checks.single)

    def reduction(self, op: str, name: str, t: torch.Tensor, opts) -> dict:
        """The dtype, reduce op and factor fields of a reduction of t."""
        code, factor = reduce_op(opts)
        return {"dtype": _checks.dtype_code(op, name, t), "reduce_op": code, "factor": factor}


def reduce_op(opts) -> tuple[int, float]:
    """The options' reduce op: (code, PREMUL_SUM factor). The ops without a
    factor are read as the fast paths read them (godist._fast._op_code)."""
    rop = getattr(opts, "reduceOp", None)
    if rop is not None and _fast._HASH_IS_CODE:
        code = hash(rop)
        if code in _fast._SIMPLE:
            return code, 0.0
    return _types.reduce_op(rop)


CPU = Rules()


def _root(op, opts, g) -> int:
    return _checks.rank(op, "root rank", getattr(opts, "rootRank", 0), g._size)


def _same_dtype(op, out_name, out, in_name, inp) -> None:
    if out.dtype != inp.dtype:
        raise TypeError(f"godist: {op}: {out_name} has dtype {out.dtype} but {in_name} has {inp.dtype}")


# ----- collectives ----------------------------------------------------------

def allreduce(rules, g, tensors, opts=None) -> Desc:
    op = "allreduce"
    t = rules.single(op, "tensors", tensors)
    red = rules.reduction(op, "tensor", t, opts)
    outs = _Outputs()
    buf = outs.prep(t)
    return Desc(op, [t], [("allreduce", {"buf": _desc(buf), **red}, {"tensor": t})], buf, outs, opts)


def allreduce_coalesced(rules, g, tensors, opts=None) -> Desc:
    op = "allreduce_coalesced"
    ts = rules.tensors(op, "tensors", tensors)
    outs = _Outputs()
    calls, keep = [], []
    for i, t in enumerate(ts):
        red = rules.reduction(op, f"tensors[{i}]", t, opts)
        buf = outs.prep(t)
        keep.append(buf)
        calls.append(("allreduce", {"buf": _desc(buf), **red}, {f"tensors[{i}]": t}))
    return Desc(op, ts, calls, keep, outs, opts)


def broadcast(rules, g, tensors, opts=None) -> Desc:
    op = "broadcast"
    t = rules.single(op, "tensors", tensors)
    root = _root(op, opts, g)
    if getattr(opts, "rootTensor", 0) != 0:
        raise ValueError(f"godist: {op}: rootTensor must be 0 with one tensor per rank, got {opts.rootTensor}")
    outs = _Outputs()
    buf = outs.prep(t)
    fields = {"buf": _desc(buf), "root": root, "dtype": _types.dtype_or_bytes(t)}
    return Desc(op, [t], [("broadcast", fields, {"tensor": t})], buf, outs, opts)


def reduce(rules, g, tensors, opts=None) -> Desc:
    op = "reduce"
    t = rules.single(op, "tensors", tensors)
    red = rules.reduction(op, "tensor", t, opts)
    root = _root(op, opts, g)
    outs = _Outputs()
    buf = outs.prep(t)
    return Desc(op, [t], [("reduce", {"buf": _desc(buf), "root": root, **red}, {"tensor": t})], buf, outs, opts)


def _gather_call(op, name, out_list, inp, outs, named):
    """The allgather call of inp into out_list (one tensor per rank, the
    argument called name)."""
    _checks.same_kind(op, name, out_list, inp)
    bufs = [outs.prep(o) for o in out_list]
    fields = {"buf": _desc(inp), "outs": [_desc(o) for o in bufs], "dtype": _types.dtype_or_bytes(inp)}
    return ("allgather", fields, named), bufs


def allgather(rules, g, output_tensors, input_tensors, opts=None) -> Desc:
    op = "allgather"
    inp = rules.single(op, "input_tensors", input_tensors).contiguous()
    if not isinstance(output_tensors, (list, tuple)) or len(output_tensors) != 1:
        raise ValueError(f"godist: {op}: output_tensors must be a list holding one list of tensors")
    out_list = rules.tensors(op, "output_tensors[0]", output_tensors[0], g._size)
    outs = _Outputs()
    call, bufs = _gather_call(op, "output_tensors[0]", out_list, inp, outs,
                              {"output_tensors": out_list, "input_tensor": inp})
    return Desc(op, output_tensors, [call], (inp, bufs), outs, opts)


def allgather_coalesced(rules, g, output_lists, input_list, opts=None) -> Desc:
    op = "allgather_coalesced"
    ins = [t.contiguous() for t in rules.tensors(op, "input_list", input_list)]
    if not isinstance(output_lists, (list, tuple)) or len(output_lists) != g._size:
        raise ValueError(f"godist: {op}: output_lists must hold one list per rank ({g._size})")
    for r, lst in enumerate(output_lists):
        rules.tensors(op, f"output_lists[{r}]", lst, len(ins))
    outs = _Outputs()
    calls, keep = [], [ins]
    for i, inp in enumerate(ins):
        col = [output_lists[r][i] for r in range(g._size)]
        call, bufs = _gather_call(op, f"output_lists[*][{i}]", col, inp, outs,
                                  {f"output_lists[*][{i}]": col, f"input_list[{i}]": inp})
        calls.append(call)
        keep.append(bufs)
    return Desc(op, output_lists, calls, keep, outs, opts)


def _gather_into(rules, g, op, output, input, opts, outs):
    """all_gather_into_tensor's checks and call, and what it keeps."""
    out = rules.tensor(op, "output", output)
    inp = rules.tensor(op, "input", input).contiguous()
    _same_dtype(op, "output", out, "input", inp)
    if out.numel() != inp.numel() * g._size:
        raise ValueError(f"godist: {op}: output has {out.numel()} elements, expected input's {inp.numel()} "
                         f"x group size {g._size} = {inp.numel() * g._size}")
    flat = outs.prep(out)
    fields = {"buf": _desc(inp), "out": _desc(flat), "dtype": _types.dtype_or_bytes(inp)}
    return ("allgather", fields, {"output": out, "input": inp}), (inp, flat)


def _one(op, call_of, rules, g, output, input, opts) -> Desc:
    """An op of one output and one input tensor, whose call call_of makes."""
    outs = _Outputs()
    call, keep = call_of(rules, g, op, output, input, opts, outs)
    return Desc(op, [output], [call], keep, outs, opts)


def _coalesced(op, call_of, rules, g, outputs, inputs, opts) -> Desc:
    """An op of lists of output and input tensors, pairwise as _one's."""
    outputs = rules.tensors(op, "outputs", outputs)
    inputs = rules.tensors(op, "inputs", inputs, len(outputs))
    outs = _Outputs()
    pairs = [call_of(rules, g, op, o, i, opts, outs) for o, i in zip(outputs, inputs)]
    return Desc(op, outputs, [c for c, _ in pairs], [k for _, k in pairs], outs, opts)


def all_gather_single(rules, g, output, input, opts=None) -> Desc:
    return _one("all_gather_into_tensor", _gather_into, rules, g, output, input, opts)


def all_gather_single_coalesced(rules, g, outputs, inputs, opts=None) -> Desc:
    return _coalesced("all_gather_into_tensor_coalesced", _gather_into, rules, g, outputs, inputs, opts)


def _root_list(rules, g, op, name, lists, root, like) -> list:
    """The root's list of one tensor per rank, each like ``like`` (argument
    ``name``: a list holding that list); [] on the other ranks, where the
    argument must be empty."""
    if g._rank != root:
        if lists and any(len(x) for x in lists):
            raise ValueError(f"godist: {op}: {name} must be empty on non-root ranks")
        return []
    if not isinstance(lists, (list, tuple)) or len(lists) != 1:
        raise ValueError(f"godist: {op}: on the root, {name} must be a list holding one list of tensors")
    lst = rules.tensors(op, f"{name}[0]", lists[0], g._size)
    _checks.same_kind(op, f"{name}[0]", lst, like)
    return lst


def gather(rules, g, output_tensors, input_tensors, opts=None) -> Desc:
    op = "gather"
    inp = rules.single(op, "input_tensors", input_tensors).contiguous()
    root = _root(op, opts, g)
    outs = _Outputs()
    bufs = [outs.prep(o) for o in _root_list(rules, g, op, "output_tensors", output_tensors, root, inp)]
    fields = {"buf": _desc(inp), "outs": [_desc(o) for o in bufs], "root": root, "dtype": _types.dtype_or_bytes(inp)}
    return Desc(op, output_tensors, [("gather", fields, {"input_tensor": inp})], (inp, bufs), outs, opts)


def scatter(rules, g, output_tensors, input_tensors, opts=None) -> Desc:
    op = "scatter"
    out = rules.single(op, "output_tensors", output_tensors)
    root = _root(op, opts, g)
    outs = _Outputs()
    obuf = outs.prep(out)
    lst = [t.contiguous() for t in _root_list(rules, g, op, "input_tensors", input_tensors, root, out)]
    fields = {"out": _desc(obuf), "ins": [_desc(t) for t in lst], "root": root, "dtype": _types.dtype_or_bytes(out)}
    return Desc(op, output_tensors, [("scatter", fields, {"output_tensor": out})], (obuf, lst), outs, opts)


def reduce_scatter(rules, g, output_tensors, input_tensors, opts=None) -> Desc:
    op = "reduce_scatter"
    out = rules.single(op, "output_tensors", output_tensors)
    red = rules.reduction(op, "output", out, opts)
    if not isinstance(input_tensors, (list, tuple)) or len(input_tensors) != 1:
        raise ValueError(f"godist: {op}: input_tensors must be a list holding one list of tensors")
    lst = [t.contiguous() for t in rules.tensors(op, "input_tensors[0]", input_tensors[0], g._size)]
    _checks.same_kind(op, "input_tensors[0]", lst, out)
    outs = _Outputs()
    obuf = outs.prep(out)
    if rules.flat_scatter:
        flat = torch.cat([t.reshape(-1) for t in lst])
        fields, keep = {"buf": _desc(flat), "out": _desc(obuf), **red}, (flat, obuf)
    else:
        fields, keep = {"out": _desc(obuf), "ins": [_desc(t) for t in lst], **red}, (lst, obuf)
    call = ("reduce_scatter", fields, {"output": out, "input_tensors": lst})
    return Desc(op, output_tensors, [call], keep, outs, opts)


def _scatter_from(rules, g, op, output, input, opts, outs):
    """reduce_scatter_tensor's checks and call, and what it keeps."""
    out = rules.tensor(op, "output", output)
    inp = rules.tensor(op, "input", input).contiguous()
    red = rules.reduction(op, "output", out, opts)
    _same_dtype(op, "output", out, "input", inp)
    if inp.numel() != out.numel() * g._size:
        raise ValueError(f"godist: {op}: input has {inp.numel()} elements, expected output's {out.numel()} "
                         f"x group size {g._size} = {out.numel() * g._size}")
    obuf = outs.prep(out)
    fields = {"buf": _desc(inp), "out": _desc(obuf), **red}
    return ("reduce_scatter", fields, {"output": out, "input": inp}), (inp, obuf)


def reduce_scatter_single(rules, g, output, input, opts=None) -> Desc:
    return _one("reduce_scatter_tensor", _scatter_from, rules, g, output, input, opts)


def reduce_scatter_single_coalesced(rules, g, outputs, inputs, opts=None) -> Desc:
    return _coalesced("reduce_scatter_tensor_coalesced", _scatter_from, rules, g, outputs, inputs, opts)


def alltoall(rules, g, output_tensors, input_tensors, opts=None) -> Desc:
    op = "alltoall"
    ins = [t.contiguous() for t in rules.tensors(op, "input_tensors", input_tensors, g._size)]
    outl = rules.tensors(op, "output_tensors", output_tensors, g._size)
    for i, (o, t) in enumerate(zip(outl, ins)):
        _same_dtype(op, f"output_tensors[{i}]", o, f"input_tensors[{i}]", t)
    outs = _Outputs()
    obufs = [outs.prep(o) for o in outl]
    dt = _types.dtype_or_bytes(ins[0]) if ins and all(t.dtype == ins[0].dtype for t in ins) else -1
    fields = {"ins": [_desc(t) for t in ins], "outs": [_desc(o) for o in obufs], "dtype": dt}
    return Desc(op, output_tensors, [("alltoall", fields, {})], (ins, obufs), outs, opts)


def all_to_all_single(rules, g, output, input, output_split_sizes=None, input_split_sizes=None, opts=None) -> Desc:
    op = "all_to_all_single"
    out = rules.tensor(op, "output", output)
    inp = rules.tensor(op, "input", input).contiguous()
    _same_dtype(op, "output", out, "input", inp)
    outs = _Outputs()
    obuf = outs.prep(out)
    fields = {"ins": _checks.rows(op, "input", inp, input_split_sizes, g._size),
              "outs": _checks.rows(op, "output", obuf, output_split_sizes, g._size),
              "dtype": _types.dtype_or_bytes(inp)}
    return Desc(op, [output], [("alltoall", fields, {})], (inp, obuf), outs, opts)


# ----- point to point -------------------------------------------------------

def send(rules, g, tensors, dstRank, tag=0) -> Desc:
    op = "send"
    t = rules.single(op, "tensors", tensors).contiguous()
    dst = _checks.rank(op, "destination rank", dstRank, g._size)
    fields = {"buf": _desc(t), "peer": dst, "tag": _checks.tag(op, tag)}
    return Desc(op, [t], [("send", fields, {})], t, _Outputs(), None, peer=dst)


_ANY = object()  # recv_anysource's source


def _recv(rules, g, tensors, src, tag) -> Desc:
    """recv's description; src _ANY: from any rank (recv_anysource)."""
    op = "recv"
    t = rules.single(op, "tensors", tensors)
    src = -1 if src is _ANY else _checks.rank(op, "source rank", src, g._size)
    outs = _Outputs()
    buf = outs.prep(t)
    fields = {"buf": _desc(buf), "peer": src, "tag": _checks.tag(op, tag)}
    return Desc(op, [t], [("recv", fields, {})], buf, outs, None, peer=src)


def recv(rules, g, tensors, srcRank, tag=0) -> Desc:
    return _recv(rules, g, tensors, srcRank, tag)


def recv_anysource(rules, g, tensors, tag=0) -> Desc:
    return _recv(rules, g, tensors, _ANY, tag)


# The ops every device path describes here, by their ProcessGroup method names.
OPS = ("allreduce", "allreduce_coalesced", "broadcast", "reduce", "allgather", "allgather_coalesced",
       "all_gather_single", "all_gather_single_coalesced", "gather", "scatter", "reduce_scatter",
       "reduce_scatter_single", "reduce_scatter_single_coalesced", "alltoall", "all_to_all_single", "send", "recv",
       "recv_anysource")
