"""The one place where godist status codes become Python exceptions.

Every exported Go function returns a status code and writes a message into
a caller-provided buffer; :func:`check` turns a non-zero code into the
matching exception class below.
"""

from __future__ import annotations

import re

import torch.distributed as dist

# Status codes: the same table as capi/errors.go.
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


class GodistError(dist.DistBackendError):
    """A godist operation failed. ``code`` is the Go status code; ``op``,
    ``seq`` and ``peer`` are filled in when the message names them."""

    def __init__(self, message: str, code: int = PEER):
        super().__init__(message)
        self.code = code
        m = re.search(r"godist: (\w+) \(seq (\d+)\)", message)
        self.op = m.group(1) if m else None
        self.seq = int(m.group(2)) if m else None
        m = re.search(r"rank (\d+)", message)
        self.peer = int(m.group(1)) if m else None
        m = re.search(r"rank\(s\) \[([\d ]+)\] did not join", message)
        self.missing_ranks = [int(x) for x in m.group(1).split()] if m else []


class GodistTimeoutError(GodistError, TimeoutError):
    """An operation or a wait passed its deadline."""


class GodistClosedError(GodistError):
    """The process group (or library) was closed or aborted."""


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


def make_error(code: int, message: str) -> Exception:
    """Return the exception for a status code and Go's message."""
    if not message:
        message = f"godist: operation failed with status {code}"
    if code == STORE:
        return dist.DistStoreError(message)
    return _CLASSES.get(code, GodistError)(message, code)


def check(code: int, errbuf) -> int:
    """Raise for a failing status; return the code otherwise (OK, NOT_READY)."""
    if code == OK or code == NOT_READY:
        return code
    raise make_error(code, errbuf.value.decode("utf-8", "replace"))
