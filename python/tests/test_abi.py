"""The C ABI's structs: godist.h and _lib.py's ctypes declarations agree,
a library that disagrees is refused, and a failed call's error buffer
carries its fields to the exception."""

import ctypes

import pytest

from godist import _errors, _lib

pytestmark = pytest.mark.timeout(60)


def test_layout_matches_the_library():
    lib = _lib.load()
    want = _lib._layout()
    got = (ctypes.c_int64 * 64)()
    n = lib.raw.abi_layout(got, 64)
    assert list(got)[:n] == want


class _FakeLib:
    """A library whose godist_abi_layout reports the given numbers."""

    def __init__(self, numbers):
        def layout(out, n):
            for i, v in enumerate(numbers[:n]):
                out[i] = v
            return len(numbers)

        self.godist_abi_layout = layout


def test_a_library_laid_out_otherwise_is_refused():
    good = _lib._layout()
    _lib._check_layout(_FakeLib(good), "fake.so")
    moved = list(good)
    moved[-5] += 8  # the error's group field somewhere else
    with pytest.raises(ImportError, match="disagree"):
        _lib._check_layout(_FakeLib(moved), "fake.so")
    with pytest.raises(ImportError, match="disagree"):
        _lib._check_layout(_FakeLib(good[:-1]), "fake.so")


def test_error_fields_reach_the_exception():
    lib = _lib.load()
    out = ctypes.c_uint64()
    with pytest.raises(_errors.GodistInvalidError) as ei:
        lib.pg_create(2, 2, b"g", 1000, b"", b"", b"", b"", ctypes.byref(out))  # rank 2 of 2
    e = ei.value
    assert "rank 2 is out of range" in str(e)
    assert e.code == _errors.INVALID and e.cause == "invalid"
    assert e.op is None and e.seq is None and e.peer is None and e.missing_ranks == []
    with pytest.raises(_errors.GodistInvalidError) as ei:
        lib.pg_seq(1 << 60, ctypes.byref(out))  # no such handle
    assert ei.value.cause == "handle"


def test_error_without_go_fields():
    eb = _lib.ErrorBuf()
    eb.message = b"from python"
    e = _errors.from_buffer(_errors.TIMEOUT, eb)  # Go wrote nothing: status 0
    assert isinstance(e, _errors.GodistTimeoutError) and str(e) == "from python" and e.cause == ""
