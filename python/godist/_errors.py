"""The one place where godist status codes become Python exceptions.

Every exported Go function returns a status code and writes a message into
a caller-provided buffer; :func:`check` turns a non-zero code into the
matching exception class below.
"""

from __future__ import annotations

import torch.distributed as dist

# Status codes: the same table as capi/errors.go (statusNames), which _lib.py
# compares with this one when it loads the library (godist_facts).
OK = 0
INVALID = 1
TIMEOUT = 2
PEER = 3
CLOSED = 4
UNSUPPORTED = 5
INTERNAL = 6
NOT_READY = 7
STORE = 8
FORKED = 9
TYPE = 10


# Causes (godist_error.cause): what went wrong, finer than the status code.
# The same table as capi/errors.go (causeNames), by index; _lib.py compares
# them at load.
CAUSES = ("", "invalid", "timeout", "peer_left", "conn_lost", "closed", "broken", "size_mismatch", "not_arrived",
          "handle", "store", "internal", "unsupported", "desync")


class GodistError(dist.DistBackendError):
    """A godist operation failed.

    ``code`` is the Go status code and ``cause`` what went wrong (a name of
    :data:`CAUSES`, "" if not known). For the failure of an op, ``op``,
    ``seq`` and ``group`` name it, ``peer`` is the rank at fault (None if
    none), ``missing_ranks`` the ranks that never joined it and ``after`` the
    timeout that passed, in seconds. Go fills these in (capi/errors.go); the
    message says the same for people."""

    def __init__(self, message: str, code: int = PEER, *, cause: str = "", op: str | None = None,
                 seq: int | None = None, group: str | None = None, peer: int | None = None,
                 missing_ranks=(), after: float | None = None):
        super().__init__(message)
        self.code = code
        self.cause = cause
        self.op = op
        self.seq = seq
        self.group = group
        self.peer = peer
        self.missing_ranks = list(missing_ranks)
        self.after = after


class GodistTimeoutError(GodistError, TimeoutError):
    """An operation or a wait passed its deadline."""


class GodistClosedError(GodistError):
    """The process group (or library) was closed or aborted."""


class GodistDesyncError(GodistError):
    """Ranks called different collectives at the same point of their group
    (or the same collective with another shape, dtype, root or reduce op).
    Every rank of the collective raises it, with the same description of
    the two calls; the group is broken afterwards (later ops raise
    :class:`GodistError` with cause ``"broken"``). ``peer`` is the other rank
    of the pair that differs."""


class GodistInvalidError(GodistError, ValueError):
    """An argument was rejected by the Go side."""


class GodistInternalError(GodistError):
    """A bug in godist (a recovered Go panic). Please report it."""


class GodistForkError(GodistError):
    """godist was used in a forked child process of the process that loaded it."""


_CLASSES = {
    INVALID: GodistInvalidError,
    TIMEOUT: GodistTimeoutError,
    PEER: GodistError,
    CLOSED: GodistClosedError,
    UNSUPPORTED: GodistInvalidError,
    INTERNAL: GodistInternalError,
    FORKED: GodistForkError,
    TYPE: GodistInvalidError,
}


# Called with (group name, exception) when an op of a group fails for a
# reason other than its arguments (a timeout, a lost peer, a desync):
# godist._group runs the group's abort hooks (torch's flight recorder dumps
# its trace from one).
failure_listeners: list = []
_GROUP_FAILURES = (TIMEOUT, PEER, CLOSED)


def make_error(code: int, message: str, **fields) -> Exception:
    """Return the exception for a status code, Go's message and the
    structured fields of GodistError."""
    if not message:
        message = f"godist: operation failed with status {code}"
    if code == STORE:
        return dist.DistStoreError(message)
    if fields.get("cause") == "desync":
        exc = GodistDesyncError(message, code, **fields)
    else:
        exc = _CLASSES.get(code, GodistError)(message, code, **fields)
    group = fields.get("group")
    if group and (code in _GROUP_FAILURES or fields.get("cause") == "desync"):
        for fn in failure_listeners:
            fn(group, exc)
    return exc


def from_buffer(code: int, eb) -> Exception:
    """The exception for a failed call's status code and its error buffer
    (_lib.ErrorBuf: godist_error, then the message)."""
    message = eb.message.decode("utf-8", "replace")
    if eb.status != code:  # Go wrote nothing (a code from the Python side)
        return make_error(code, message)
    cause = eb.cause
    fields = {"cause": CAUSES[cause] if 0 <= cause < len(CAUSES) else ""}
    if eb.seq >= 0:
        fields.update(op=eb.op.decode("utf-8", "replace"), seq=eb.seq, group=eb.group.decode("utf-8", "replace"))
    if eb.seq >= 0 or eb.nmissing > 0:  # an op's, or the ranks that never connected during a rendezvous
        fields["missing_ranks"] = eb.missing[:min(eb.nmissing, len(eb.missing))]
    if eb.peer >= 0:
        fields["peer"] = eb.peer
    if eb.after_ms > 0:
        fields["after"] = eb.after_ms / 1000
    return make_error(code, message, **fields)


def check(code: int, eb) -> int:
    """Raise for a failing status; return the code otherwise (OK, NOT_READY)."""
    if code == OK or code == NOT_READY:
        return code
    raise from_buffer(code, eb)
