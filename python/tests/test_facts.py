"""The facts Python and Go both need are defined once, in Go, and reach
Python through godist_facts (capi/facts.go). Where Python keeps a copy of
its own (the status and cause tables, the dtype and reduce op codes, the
names GODIST_TRANSPORT accepts, the rendezvous keys) these tests, or the
check at load, fail when the two differ."""

import ctypes
import datetime

import pytest
import torch
import torch.distributed as dist

from godist import _errors, _group, _lib, _nccl, _rendezvous, _types
from godist import store as gstore
from godist.info import native

pytestmark = pytest.mark.timeout(60)


def test_errors_and_types_tables_equal_go():
    facts = _lib.facts()
    for key, want in _lib._python_facts().items():
        assert facts[key] == want, key
    assert len(facts["causes"]) == _lib._layout()[-3]  # godist_abi_layout's count


def test_a_library_with_other_tables_is_refused():
    good = _lib.facts()
    _lib._check_facts(good, "fake.so")
    for key, change in (("status", lambda t: {**t, "TIMEOUT": 20}), ("causes", lambda t: t[:-1]),
                        ("dtypes", lambda t: {**t, "float8": 12}), ("reduce_ops", lambda t: {**t, "SUM": 9})):
        with pytest.raises(ImportError, match=f"numbers its {key}"):
            _lib._check_facts(dict(good, **{key: change(good[key])}), "fake.so")


def _go_accepts(name: bytes) -> bool:
    lib = _lib.load()
    h = ctypes.c_uint64()
    try:
        lib.pg_create(0, 1, b"facts", 1000, None, None, None, name, ctypes.byref(h))
    except _errors.GodistInvalidError as e:
        assert "unknown transport" in str(e)
        return False
    lib.pg_close(h.value)
    return True


def _python_accepts(monkeypatch, name: str) -> bool:
    monkeypatch.setenv("GODIST_TRANSPORT", name)
    try:
        g = _group.Group(dist.HashStore(), 0, 1, datetime.timedelta(seconds=5), "facts")
    except ValueError as e:
        assert "GODIST_TRANSPORT" in str(e)
        return False
    g._close()
    return True


def test_transport_names_agree(monkeypatch):
    names = _lib.facts()["transports"]
    assert "auto" in names and "tcp" in names
    for name in names:
        assert _go_accepts(name.encode()), name
        assert _python_accepts(monkeypatch, name), name
    for name in ("shm", "nccl", "gloo", "udp"):
        assert not _go_accepts(name.encode()), name
        assert not _python_accepts(monkeypatch, name), name


class _RecordingStore(dist.Store):
    """A store that records the keys the Python rendezvous uses, then
    fails its wait as a store whose other ranks never come."""

    def __init__(self, count):
        super().__init__()
        self.count, self.added, self.set_keys, self.waited = count, [], [], []

    def add(self, key, n):
        self.added.append(key)
        return self.count

    def set(self, key, value):
        self.set_keys.append(key)

    def wait(self, keys, timeout=None):
        self.waited = list(keys)
        raise dist.DistStoreError("nobody else came")

    def check(self, keys):
        return all(k in self.set_keys for k in keys)


def _pg(rank, size):
    h = ctypes.c_uint64()
    _lib.load().pg_create(rank, size, b"facts", 1000, b"127.0.0.1", None, None, b"tcp", ctypes.byref(h))
    return h.value


def test_python_rendezvous_writes_go_keys(monkeypatch):
    rdv = _lib.facts()["rendezvous"]
    monkeypatch.setenv("GODIST_STORE_RENDEZVOUS", "0")
    s, h = _RecordingStore(count=7), _pg(1, 3)  # generation (7 - 1) // 3 = 2
    try:
        with pytest.raises(_errors.GodistTimeoutError):
            _rendezvous.exchange(s, 1, 3, h, datetime.timedelta(seconds=1), "facts")
    finally:
        _lib.load().pg_close(h)
    assert s.added == [rdv["generation_key"]]
    assert s.set_keys == [rdv["record_key"].format(gen=2, rank=1)]
    assert s.waited == [rdv["record_key"].format(gen=2, rank=r) for r in range(3)]


def test_go_rendezvous_writes_the_keys_it_reports():
    rdv = _lib.facts()["rendezvous"]
    s, h = gstore.HashStore(), _pg(0, 2)
    try:
        s.add(rdv["generation_key"], 4)  # two earlier generations: this one is 2
        with pytest.raises(_errors.GodistTimeoutError):
            _lib.load().pg_rendezvous_store(h, s._h, b"", 0, 300)
        assert s.add(rdv["generation_key"], 0) == 5
        assert s.check([rdv["record_key"].format(gen=2, rank=0)])
        assert not s.check([rdv["record_key"].format(gen=2, rank=1)])
    finally:
        _lib.load().pg_close(h)


def test_nccl_path_checks_go_rules():
    nccl = _lib.facts()["nccl"]
    ops = {int(d): set(o) for d, o in nccl["reduce_ops"].items()}
    reducible, _, complex_ops = _nccl._rules()
    assert {_types.DTYPE_CODES[d] for d in reducible} == set(ops)
    assert torch.int16 not in reducible and torch.complex64 not in reducible
    assert ops[_types.DTYPE_CODES[torch.bool]] == {0, 2, 3, 4}  # SUM PRODUCT MIN MAX, as torch's nccl
    assert complex_ops == {0, 1, 8}
    assert not any({5, 6, 7} & o for o in ops.values())  # no bitwise reductions


def test_info_tries_the_names_go_loads():
    libs = _lib.facts()["libraries"]
    assert "libcudart.so.11.0" in libs["cudart"] and libs["nccl"][0] == "libnccl.so.2"
    names = native.loader_names()
    assert names["nccl"] == libs["nccl"] and names["cudart"] == libs["cudart"]
    assert names["mpi"] == [n for impl in libs["mpi_impls"] for n in libs["mpi"][impl]]
    specs = native._native_specs()
    for kind in ("nccl", "cudart", "mpi"):
        assert [c["path"] for c in specs[kind] if c["where"] == "system loader"] == names[kind]
