"""torch 2.15's reconfigure API on godist groups.

``dist._get_reconfigure_handle()`` returns a member handle; the caller
exchanges handles out of band and calls ``dist._reconfigure(uuid, handles)``
on every member, which forms a new group of exactly those members: ranks by
position in a list, or chosen by godist for a set (sorted handles, so the
ranks of one host stay together). Every later op runs on the new group.

A handle names a small store server that each member opens on first use
(``godist-rc1:<host>:<port>:<token>``): the members of a new configuration
meet in the server of its first member, under keys of the uuid, and connect
as any godist group does. A reconfigure that cannot complete (a member gone,
a mismatched list) fails on every member within the timeout and leaves the
group as it was, so it can be retried with another uuid; a uuid that
formed a group once is refused on that rank.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import socket

from . import _errors, _rendezvous, _types
from . import store as _store

PREFIX = "godist-rc1"


def _listen_host(store) -> str:
    """The address peers reach this rank's handle server at: GODIST_BIND_ADDR,
    else the address of the route to the group's store host (loopback for a
    store on loopback), else this host's name's address."""
    bind = os.environ.get("GODIST_BIND_ADDR", "").strip()
    if bind:
        return bind
    host = _rendezvous.store_host(store) if store is not None else None
    if host:
        try:
            addr = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
            if ipaddress.ip_address(addr).is_loopback:
                return "127.0.0.1"
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((addr, 9))  # no packet: only the route's source address
                return s.getsockname()[0]
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def parse(handle: str) -> tuple[str, int]:
    """(host, port) of a handle's store server."""
    parts = str(handle).split(":")
    if len(parts) != 4 or parts[0] != PREFIX:
        raise ValueError(f"godist: reconfigure: {handle!r} is not a godist reconfigure handle "
                         f"(from dist._get_reconfigure_handle() on a godist group)")
    try:
        return parts[1], int(parts[2])
    except ValueError:
        raise ValueError(f"godist: reconfigure: {handle!r} is not a godist reconfigure handle") from None


class Membership:
    """This rank's handle, its store server and the uuids it has used."""

    def __init__(self, store):
        host = _listen_host(store)
        self.server = _store.TCPServer(host, 0)
        self.handle = f"{PREFIX}:{host}:{self.server.port}:{secrets.token_hex(8)}"
        self.used: set[int] = set()

    def close(self) -> None:
        self.server.close()

    def plan(self, opts) -> tuple[int, int, list[str], datetime.timedelta | None]:
        """(uuid, this rank, the members' handles in rank order, timeout)
        of a ReconfigureOptions, checked."""
        uuid = int(opts.uuid)
        if uuid in self.used:
            raise RuntimeError(f"godist: reconfigure: uuid {uuid} was already used by this rank; pass a fresh uuid "
                               "for every reconfiguration")
        handles = opts.handles
        ordered = list(handles) if isinstance(handles, (list, tuple)) else sorted(handles)
        if not ordered:
            raise ValueError("godist: reconfigure: handles is empty")
        if len(set(ordered)) != len(ordered):
            raise ValueError("godist: reconfigure: handles holds the same handle twice")
        for h in ordered:
            parse(h)
        if self.handle not in ordered:
            raise ValueError(f"godist: reconfigure: this rank's handle {self.handle!r} is not among the {len(ordered)} "
                             "handles: every member passes the handles of all members, its own included")
        timeout = opts.timeout if isinstance(opts.timeout, datetime.timedelta) and \
            opts.timeout.total_seconds() > 0 else None
        return uuid, ordered.index(self.handle), ordered, timeout

    def meeting_store(self, uuid: int, ordered: list[str], timeout: datetime.timedelta):
        """The store the members of configuration uuid meet in: the first
        member's server, under the uuid's keys."""
        host, port = parse(ordered[0])
        client = _store.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
        return _store.PrefixStore(f"godist-reconfigure/{uuid}/", client)


class Unconfigured:
    """The group of a GodistProcessGroup or GodistBackend made with
    ``enable_reconfigure=True``, until its first ``dist._reconfigure``
    forms it: it knows its store, rank and size, and refuses every op."""

    _h = 0
    _closed = False
    _detail = True  # the fast paths step aside and reach the refusal below
    _coalesced = None
    _dev = None

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta | None, group_name: str = ""):
        self._store, self._rank, self._size = store, rank, size
        self._timeout = timeout if timeout is not None and timeout.total_seconds() > 0 else _types.default_timeout()
        self._name = group_name or "godist"
        self._abort_hooks = {}
        self._hooks_ran = False

    def __repr__(self):
        return f"godist group {self._name!r} (not configured yet)"

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def error(self) -> int:
        return _errors.OK

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self._timeout = timeout

    def _get_sequence_number_for_group(self) -> int:
        return 0

    def shutdown(self, *args, **kwargs):
        pass

    abort = _close = shutdown

    _OPS = frozenset(("allreduce", "_allreduce", "allreduce_coalesced", "broadcast", "reduce", "allgather", "allgather_coalesced",
                      "all_gather_single", "all_gather_single_coalesced", "gather", "scatter", "reduce_scatter",
                      "reduce_scatter_single", "reduce_scatter_single_coalesced", "alltoall", "all_to_all_single",
                      "barrier", "monitored_barrier", "send", "recv", "recv_anysource", "_start_coalescing",
                      "_end_coalescing", "_device_path", "_allgather_base", "_reduce_scatter_base",
                      "allgather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced", "alltoall_base"))

    def __getattr__(self, name):
        # Only the ops (torch's trampolines look other names up on the
        # group and must not find them).
        if name not in self._OPS:
            raise AttributeError(name)

        def refuse(*args, **kwargs):
            raise RuntimeError(f"godist: group {self._name!r} was created with enable_reconfigure=True and has no "
                               "members yet: call dist._reconfigure(uuid, handles) before its first operation")

        return refuse
