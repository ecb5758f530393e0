"""godist's stores (godist.TCPStore, FileStore, HashStore, PrefixStore) have
the semantics torch's own store tests check (test/distributed/test_store.py,
StoreTestBase and the store-specific classes), on every godist store and
through torch's PrefixStore (the PythonStore trampoline path torch's C++
code takes). Interop with torch's stores in real processes is in
test_store_interop.py."""

from __future__ import annotations

import datetime
import os
import threading

import pytest
import torch.distributed as dist

import godist
from godist import store as gstore

ms = lambda n: datetime.timedelta(milliseconds=n)  # noqa: E731


class Case:
    """A store under test, what num_keys() counts besides the test's keys,
    and the prefix a TCPStore puts on keys in error messages."""

    def __init__(self, store, extra_keys: int, wire_prefix: str, queues: bool, owned):
        self.store, self.extra_keys, self.wire_prefix, self.queues, self.owned = store, extra_keys, wire_prefix, queues, owned


def _make(kind: str, tmp_path) -> Case:
    if kind == "tcp":  # master with world_size=1: registers "init/"
        s = godist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
        return Case(s, 1, "/", True, [s])
    if kind == "tcp_client":  # client of a standalone godist server, no world size
        srv = godist.TCPServer("127.0.0.1", 0)
        s = godist.TCPStore("127.0.0.1", srv.port, timeout=datetime.timedelta(seconds=30))
        return Case(s, 0, "/", True, [s, srv])
    if kind == "hash":
        s = godist.HashStore()
        return Case(s, 0, "", True, [s])
    if kind == "file":  # "refcount/" is a key
        s = godist.FileStore(str(tmp_path / "store"), 1)
        return Case(s, 1, "", False, [s])
    if kind == "prefix_tcp":
        inner = godist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
        s = godist.PrefixStore("pfx", inner)
        return Case(s, 1, "/pfx/", True, [s, inner])
    if kind == "prefix_file":
        inner = godist.FileStore(str(tmp_path / "store"), 1)
        s = godist.PrefixStore("pfx", inner)
        return Case(s, 1, "pfx/", False, [s, inner])
    if kind == "torch_prefix_tcp":  # torch's C++ PrefixStore -> trampoline -> godist
        inner = godist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
        return Case(dist.PrefixStore("tp", inner), 1, "/tp/", True, [inner])
    if kind == "torch_prefix_hash":
        inner = godist.HashStore()
        return Case(dist.PrefixStore("tp", inner), 0, "tp/", True, [inner])
    raise ValueError(kind)


KINDS = ["tcp", "tcp_client", "hash", "file", "prefix_tcp", "prefix_file", "torch_prefix_tcp", "torch_prefix_hash"]


@pytest.fixture(params=KINDS)
def case(request, tmp_path):
    c = _make(request.param, tmp_path)
    yield c
    for o in c.owned:
        o.close()


pytestmark = pytest.mark.timeout(60)


def test_is_a_torch_store(case):
    assert isinstance(case.store, dist.Store)


def test_set_get_check(case):
    s = case.store
    s.add("key", 1)
    s.add("key", 2)
    s.add("key", 3)
    s.set("key0", "value0")
    s.add("key3", 1)
    s.set("key1", "value1")
    s.add("key3", 2)
    s.set("key2", "value2")
    s.add("key3", 3)
    s.add("key3", 4)
    s.add("key3", 5)
    s.add("key3", 6)
    assert s.num_keys() == 5 + case.extra_keys
    assert s.get("key") == b"6"
    assert s.get("key0") == b"value0"
    assert s.get("key1") == b"value1"
    assert s.get("key2") == b"value2"
    assert s.get("key3") == b"21"
    assert s.check(["key3"])
    assert not s.check(["Randomkey3"])
    assert s.check([])
    s.set("-key3", "7")
    assert s.get("-key3") == b"7"
    s.delete_key("-key3")
    assert s.num_keys() == 5 + case.extra_keys
    assert isinstance(s.get("key"), bytes)


def test_values_are_bytes(case):
    s = case.store
    blob = bytes(range(256)) * 4 + b"\x00tail"
    s.set("bin", blob)
    assert s.get("bin") == blob
    s.set("empty", b"")
    assert s.get("empty") == b""
    assert s.check(["empty"])
    s.set("uni", "ünï")
    assert s.get("uni") == "ünï".encode()


def test_compare_set(case):
    s = case.store
    # key missing, expected non-empty: returns expected, stores nothing
    assert s.compare_set("cs_key0", "wrong_old_value", "new_value0") == b"wrong_old_value"
    assert not s.check(["cs_key0"])
    # key missing, expected empty: stores desired
    assert s.compare_set("cs_key0", "", "new_value0") == b"new_value0"
    assert s.get("cs_key0") == b"new_value0"
    # key present, match: stores desired
    s.set("cs_key1", "old")
    assert s.compare_set("cs_key1", "old", "new") == b"new"
    assert s.get("cs_key1") == b"new"
    # key present, mismatch: returns the current value
    assert s.compare_set("cs_key1", "old", "newer") == b"new"
    assert s.get("cs_key1") == b"new"
    # an existing empty value matches ""
    s.set("cs_key2", "")
    assert s.compare_set("cs_key2", "", "filled") == b"filled"
    assert s.get("cs_key2") == b"filled"


def test_simple_wait(case):
    s = case.store
    with pytest.raises(dist.DistStoreError, match="[t -i]imeout") as ei:
        s.wait(["bad_key"], ms(250))
    assert f"keys: {case.wire_prefix}bad_key" in str(ei.value)
    s.add("good_key", 1)
    s.wait(["good_key"])
    s.wait(["good_key"], ms(250))
    s.wait([])


def test_wait_timeout_names_all_keys_and_matches_torch(case):
    s = case.store
    s.set("present", "1")
    with pytest.raises(dist.DistStoreError) as ei:
        s.wait(["present", "absent1", "absent2"], ms(100))
    p = case.wire_prefix
    assert f"wait timeout after 100ms, keys: {p}present, {p}absent1, {p}absent2" in str(ei.value)
    assert isinstance(ei.value, RuntimeError)


def test_store_timeout_applies_to_get_wait_multi_get(case):
    s = case.store
    s.set_timeout(ms(150))
    assert s.timeout == ms(150)
    p = case.wire_prefix
    with pytest.raises(dist.DistStoreError, match=f"wait timeout after 150ms, keys: {p}nonexistent key"):
        s.get("nonexistent key")
    with pytest.raises(dist.DistStoreError, match="wait timeout after 150ms"):
        s.wait(["nonexistent key"])
    s.set("here", "1")
    with pytest.raises(dist.DistStoreError, match=f"keys: {p}here, {p}missing"):
        s.multi_get(["here", "missing"])
    # a timed-out wait leaves the store usable (test_tcp_store_timeout_doest_break_client)
    s.set("after", "ok")
    assert s.get("after") == b"ok"
    s.set_timeout(datetime.timedelta(seconds=30))
    assert s.timeout == datetime.timedelta(seconds=30)


def test_wait_wakes_on_set_from_another_thread(case):
    s = case.store
    c = s.clone()  # a TCPStore client has one request in flight at a time, like torch's
    t = threading.Timer(0.2, lambda: c.set("late", "v"))
    t.start()
    try:
        s.wait(["late"], datetime.timedelta(seconds=10))
        assert s.get("late") == b"v"
    finally:
        t.join()
        if hasattr(c, "close"):
            c.close()


def test_num_keys_and_delete_key(case):
    s = case.store
    base = s.num_keys()
    assert base == case.extra_keys
    for i in range(4):
        s.set(f"k{i}", "v")
    assert s.num_keys() == base + 4
    assert s.delete_key("k0") is True
    assert s.num_keys() == base + 3
    assert not s.check(["k0"])
    file_backed = isinstance(getattr(s, "_underlying_non_prefix_store", s), godist.FileStore)
    assert s.delete_key("never") is file_backed  # FileStore always reports True, like torch's
    with pytest.raises(dist.DistStoreError):
        s.wait(["k0"], ms(50))


def test_append(case):
    s = case.store
    assert s.has_extended_api()
    s.set("foo", "po")
    s.append("foo", "tato")
    assert s.get("foo") == b"potato"
    s.append("fresh", b"x")
    assert s.get("fresh") == b"x"


def test_multi_set_multi_get(case):
    s = case.store
    s.multi_set(["foo", "bar"], ["po", "tato"])
    assert s.get("foo") == b"po"
    assert s.get("bar") == b"tato"
    assert s.multi_get(["bar", "foo"]) == [b"tato", b"po"]
    s.set("e", b"")
    assert s.multi_get(["e", "foo"]) == [b"", b"po"]
    assert s.multi_get([]) == []
    with pytest.raises(ValueError):
        s.multi_set(["a", "b"], ["1"])


def test_list_keys(case):
    s = case.store
    if isinstance(s, dist.PrefixStore):  # torch's trampoline does not forward listKeys
        s = case.owned[0]
    s.set("foo", "1")
    s.set("baz", "2")
    keys = s.list_keys()
    assert "foo" in keys and "baz" in keys


def test_queues(case):
    s = case.store
    if isinstance(s, dist.PrefixStore):
        pytest.skip("torch's PythonStore trampoline does not forward queues")
    if not case.queues:
        with pytest.raises(NotImplementedError):
            s.queue_push("q", "1")
        return
    assert not s.check(["foo"])
    assert s.queue_len("foo") == 0
    s.queue_push("foo", "1")
    s.queue_push("foo", b"2")
    assert s.check(["foo"])
    assert s.queue_len("foo") == 2
    s.wait(["foo"])
    assert s.queue_pop("foo") == b"1"
    assert s.queue_pop("foo") == b"2"
    assert s.queue_len("foo") == 0
    assert s.queue_len("missing") == 0


def test_queues_nonblocking(case):
    s = case.store
    if isinstance(s, dist.PrefixStore) or not case.queues:
        pytest.skip("no queues here")
    with pytest.raises(dist.QueueEmptyError, match="empty"):
        s.queue_pop("foo", block=False)
    s.queue_push("foo", "a")
    assert s.queue_pop("foo", block=False) == b"a"


def test_queues_bidirectional(case):
    s = case.store
    if isinstance(s, dist.PrefixStore) or not case.queues:
        pytest.skip("no queues here")
    results = {}

    def worker(st, me, other):
        for i in range(10):
            st.queue_push(other, f"{me}{i}")
        results[me] = [st.queue_pop(me) for _ in range(10)]

    c = s.clone()
    try:
        ts = [threading.Thread(target=worker, args=(s, "a", "b")), threading.Thread(target=worker, args=(c, "b", "a"))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
    finally:
        c.close()
    assert results["a"] == [f"b{i}".encode() for i in range(10)]
    assert results["b"] == [f"a{i}".encode() for i in range(10)]


def test_queues_timeout(case):
    s = case.store
    if isinstance(s, dist.PrefixStore) or not case.queues:
        pytest.skip("no queues here")
    s.set_timeout(ms(10))
    with pytest.raises(dist.DistStoreError, match="timeout"):
        s.queue_pop("foo")


def test_clone(case):
    s = case.store
    c = s.clone()
    try:
        assert isinstance(c, dist.Store)
        s.set("key", "value")
        assert c.get("key") == b"value"
        c.set("back", "1")
        assert s.get("back") == b"1"
    finally:
        if hasattr(c, "close"):
            c.close()


@pytest.mark.skipif(not hasattr(dist.Store, "barrier"), reason="torch.distributed.Store has no barrier in this torch version")
def test_barrier(case):
    case.store.barrier("test_barrier_key", 1)


def test_set_timeout_visible_to_torch(case):
    s = case.store
    s.set_timeout(ms(1500))
    assert s.timeout == ms(1500)
    w = dist.PrefixStore("wrap", s)  # C++ reads the C++ timeout field
    assert w.timeout == ms(1500)


def test_add_rejects_non_numbers(case):
    s = case.store
    s.set("text", "abc")
    s.set("num", " 12abc")
    assert s.add("num", 1) == 13  # std::stoll rules
    tcp = case.wire_prefix.startswith("/")
    with pytest.raises(dist.DistStoreError if tcp else ValueError):
        s.add("text", 1)
    s.set("ok", "1")  # a TCPStore client reconnects after the server dropped it
    assert s.get("ok") == b"1"


# ----- store-specific -------------------------------------------------------------

def test_python_store_trampoline():
    s = godist.HashStore()
    try:
        dist._test_python_store(s)
    finally:
        s.close()


def test_torch_prefix_store_roundtrip():
    inner = godist.HashStore()
    try:
        p = dist.PrefixStore("p", inner)
        p.append("foo", b"bar")
        assert inner.get("p/foo") == b"bar"
        p.multi_set(["a", "b"], [b"1", b"2"])
        assert p.multi_get(["a", "b"]) == [b"1", b"2"]
        assert inner.multi_get(["p/a", "p/b"]) == [b"1", b"2"]
        assert p.num_keys() == 3
        assert p.delete_key("a")
        assert p.underlying_store is inner
        assert p.compare_set("c", "", "x") == b"x"
    finally:
        inner.close()


def test_tcpstore_properties_and_numkeys():
    s = godist.TCPStore("127.0.0.1", 0, 1, True)
    try:
        assert s.host == "127.0.0.1"
        assert 0 < s.port < 65536
        assert s.libuvBackend
        assert s.num_keys() == 1  # "init/"
        assert s.list_keys() == []  # "init/" hidden like torch's client does
        c = godist.TCPStore("127.0.0.1", s.port, world_size=1)
        try:
            assert s.num_keys() == 1  # init/ is one key, now 2
            assert s.get  # noqa
        finally:
            c.close()
    finally:
        s.close()


def test_tcpstore_world_size_0_raises():
    with pytest.raises(ValueError, match="TCPStore world size cannot be 0"):
        godist.TCPStore("127.0.0.1", 0, 0, True)


def test_tcpstore_timeout_on_missing_clients():
    with pytest.raises(dist.DistStoreError,
                       match=r"Timed out after \d+ seconds waiting for clients. \d+/\d+ clients joined."):
        godist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=1))
    s = godist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=1), wait_for_workers=False)
    s.close()


def test_tcpstore_address_in_use():
    s = godist.TCPStore("127.0.0.1", 0, 1, True)
    try:
        with pytest.raises(RuntimeError, match="address already in use"):
            godist.TCPStore("127.0.0.1", s.port, 1, True, timeout=datetime.timedelta(seconds=2))
    finally:
        s.close()


def test_tcpstore_multi_tenant():
    s = godist.TCPStore("127.0.0.1", 0, 1, True)
    try:
        t = godist.TCPStore("127.0.0.1", s.port, 1, True, multi_tenant=True)  # reuses the server
        try:
            t.set("x", "1")
            assert s.get("x") == b"1"
        finally:
            t.close()
    finally:
        s.close()


def test_tcpstore_take_over_listen_socket():
    import socket
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen()
    port = ls.getsockname()[1]
    s = godist.TCPStore("127.0.0.1", port, 1, True, master_listen_fd=ls.detach())
    try:
        s.set("k", "v")
        assert s.port == port
        assert s.get("k") == b"v"
    finally:
        s.close()


def test_tcpstore_legacy_server_has_no_queues():
    srv = godist.TCPServer("127.0.0.1", 0)
    s = godist.TCPStore("127.0.0.1", srv.port, use_libuv=False)
    try:
        with pytest.raises(NotImplementedError, match="legacy TCPStore backend"):
            s.queue_push("q", "1")
        assert not s.libuvBackend
    finally:
        s.close()
        srv.close()


def test_tcpstore_connect_timeout():
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(dist.DistStoreError, match="timed out after .*connect"):
            godist.TCPStore("127.0.0.1", port, timeout=datetime.timedelta(milliseconds=300))


def test_filestore_refcount(tmp_path):
    path = str(tmp_path / "refcount")
    a = godist.FileStore(path, 1)
    b = godist.FileStore(path, 1)
    assert a.path == path
    a.set("k", "v")
    assert b.get("k") == b"v"
    a.close()
    assert os.path.exists(path)
    b.close()
    assert not os.path.exists(path)
    b.close()  # idempotent


def test_hashstore_zero_timeout_means_forever():
    s = godist.HashStore()
    try:
        s.set_timeout(datetime.timedelta(0))
        t = threading.Timer(0.3, lambda: s.set("k", "v"))
        t.start()
        assert s.get("k") == b"v"
        t.join()
    finally:
        s.close()


def test_tcpstore_zero_timeout_fails_at_once():
    s = godist.TCPStore("127.0.0.1", 0, 1, True)
    try:
        s.set_timeout(datetime.timedelta(0))
        with pytest.raises(dist.DistStoreError, match="wait timeout after 0ms, keys: /k"):
            s.get("k")
        s.set("k", "v")
        assert s.get("k") == b"v"  # present: no wait needed
        s.wait(["k"])
        s.queue_push("q", "1")
        s.queue_push("q", "2")
        assert s.queue_pop("q") == b"1"
        assert s.queue_pop("q", block=False) == b"2"
    finally:
        s.close()


def test_prefix_store_arguments():
    with pytest.raises(ValueError):
        godist.PrefixStore("p", None)
    with pytest.raises(TypeError, match="torch.distributed.PrefixStore"):
        godist.PrefixStore("p", dist.HashStore())
    inner = godist.HashStore()
    try:
        p = godist.PrefixStore("a", godist.PrefixStore("b", inner))
        p.set("k", "v")
        assert inner.get("b/a/k") == b"v"
        assert p._underlying_non_prefix_store is inner
        p.close()
        assert inner.get("b/a/k") == b"v"  # closing a PrefixStore leaves its inner store open
    finally:
        inner.close()


def test_closed_store_raises_and_close_is_idempotent():
    s = godist.HashStore()
    s.close()
    s.close()
    with pytest.raises(godist.GodistError):
        s.set("k", "v")


def test_store_survives_losing_its_python_reference():
    """torch keeps only a C++ reference to a Python store: the godist store
    must stay usable through it (until closed)."""
    import gc

    def make():
        return dist.PrefixStore("p", godist.HashStore())

    p = make()
    gc.collect()
    p.set("k", "v")
    assert p.get("k") == b"v"
    p.underlying_store.close()


def test_resolve_finds_key_prefix():
    inner = godist.HashStore()
    try:
        chain = dist.PrefixStore("cpu/", dist.PrefixStore("0/", dist.PrefixStore("default_pg", inner)))
        got = gstore.resolve(chain)
        assert got is not None and got[0] is inner and got[1] == b"default_pg/0//cpu//"
        assert gstore.resolve(inner) == (inner, b"")
        assert gstore.resolve(dist.PrefixStore("x", dist.HashStore())) is None
        gp = godist.PrefixStore("g", inner)
        got = gstore.resolve(dist.PrefixStore("t", gp))
        assert got[0] is gp and got[1] == b"t/"
        gp.close()
    finally:
        inner.close()
