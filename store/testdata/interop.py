"""Interop peer for godist's Go stores (store/interop_test.go).

Acts as a torch TCPStore client, a torch TCPStore server or a torch FileStore
user, runs a fixed sequence of operations against a Go peer, and prints one
JSON object with what it observed as its last line of output. Exit status 0
means the sequence completed (the JSON says what torch saw).

    python interop.py tcp-client HOST:PORT
        torch TCPStore client with world_size=2 (it registers with ADD
        "init/" 1, so a Go master waiting for 2 workers is released).
        Peer contract: the Go side sets "go/hello" (any time), and sets
        "go/later" once "py/waiting" exists; this script sets "py/done" last.
    python interop.py tcp-server HOST:PORT [libuv|classic]
        torch TCPStore master (world_size=2, wait_for_workers=True) bound to
        HOST:PORT (PORT 0: an ephemeral port); prints "PORT <n>" first. The
        constructor returns only after a Go client registered under "init/".
        Peer contract: the Go side writes its "go/*" keys (see tcp_server()),
        then sets "go/done"; this script checks them, sets "py/done" and keeps
        serving until the Go side sets "go/bye".
    python interop.py pg HOST:PORT RANK WORLD_SIZE
        one rank of a torch process group (gloo) whose store is the server at
        HOST:PORT, with TORCHELASTIC_USE_AGENT_STORE=True so that no rank
        starts a server of its own (as under torchrun); runs all_reduce, a
        barrier on a new group and all_gather_object.
    python interop.py file PATH first|last
        torch FileStore(PATH, world_size=2) shared with a Go FileStore.
        Peer contract: the Go side writes its "go/*" keys, then "go/done";
        this script then sets "py/done". "first": this process closes (and
        exits) before the Go peer closes; "last": it waits for the Go peer's
        Close (the "cleanup/" record) and closes last, removing the file.

Keys written by this script start with "py/", keys it expects from the Go
peer with "go/". Every wait is bounded by TIMEOUT.
"""

import datetime
import json
import os
import socket
import sys
import time

import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=30)


def err_name(fn):
    """Runs fn and returns the exception's class name and message (or "no error")."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - we report whatever torch raises
        return f"{type(e).__name__}: {e}"
    return "no error"


def tcp_client(addr):
    host, port = addr.rsplit(":", 1)
    s = dist.TCPStore(host, int(port), world_size=2, is_master=False, timeout=TIMEOUT)
    r = {}
    s.set("py/a", "1")
    r["get"] = s.get("py/a").decode()
    s.add("py/ctr", 5)
    r["add"] = s.add("py/ctr", 6)
    s.set("py/num", "12abc")
    r["add_stoll"] = s.add("py/num", 1)
    r["cs_missing_wrong"] = s.compare_set("py/cs", "wrong", "new").decode()
    r["cs_missing_empty"] = s.compare_set("py/cs", "", "first").decode()
    r["cs_match"] = s.compare_set("py/cs", "first", "second").decode()
    r["cs_mismatch"] = s.compare_set("py/cs", "first", "third").decode()
    r["check_true"] = s.check(["py/a", "py/ctr"])
    r["check_false"] = s.check(["py/a", "py/nope"])
    r["wait_timeout"] = err_name(lambda: s.wait(["nonexistent key"], datetime.timedelta(milliseconds=100)))
    r["after_timeout"] = s.get("py/a").decode()
    s.append("py/app", "po")
    s.append("py/app", "tato")
    r["append"] = s.get("py/app").decode()
    s.multi_set(["py/m1", "py/m2"], ["x", "y"])
    r["multi_get"] = [v.decode() for v in s.multi_get(["py/m1", "py/m2"])]
    r["delete"] = s.delete_key("py/m2")
    r["delete_again"] = s.delete_key("py/m2")
    s.queue_push("py/q", "1")
    s.queue_push("py/q", "2")
    r["queue_len"] = s.queue_len("py/q")
    r["queue_check"] = s.check(["py/q"])
    r["queue_pop"] = [s.queue_pop("py/q").decode(), s.queue_pop("py/q", block=False).decode()]
    r["queue_empty"] = err_name(lambda: s.queue_pop("py/q", block=False))
    r["barrier"] = err_name(lambda: s.barrier("py/bar", 1))
    r["from_go"] = s.get("go/hello").decode()  # set by the Go side before starting us
    s.set("py/waiting", "1")
    r["go_later"] = s.get("go/later").decode()  # set by the Go side once it sees py/waiting
    r["num_keys"] = s.num_keys()
    r["list_keys"] = sorted(k for k in s.list_keys() if k.startswith("py/"))
    c = s.clone()
    c.set("py/bad", "abc")
    r["bad_add"] = err_name(lambda: c.add("py/bad", 1))
    r["alive_after_bad_add"] = s.get("py/a").decode()
    s.set("py/done", "1")
    print(json.dumps(r), flush=True)


def tcp_server(addr, backend):
    host, port = addr.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)
    port = sock.getsockname()[1]
    print(f"PORT {port}", flush=True)
    s = dist.TCPStore(
        host, port, world_size=2, is_master=True, timeout=TIMEOUT,
        wait_for_workers=True, master_listen_fd=sock.detach(), use_libuv=(backend == "libuv"),
    )
    # The constructor returned: the Go client registered under "init/".
    s.set("py/hello", "hi")
    r = {"libuv": s.libuvBackend}
    s.wait(["go/done"])
    r["go_set"] = s.get("go/set").decode()
    r["go_ctr"] = s.get("go/ctr").decode()
    r["go_append"] = s.get("go/app").decode()
    r["go_multi"] = [v.decode() for v in s.multi_get(["go/m1", "go/m2"])]
    r["go_deleted"] = s.check(["go/del"])
    r["go_binary"] = list(s.get("go/bin"))
    r["list_keys"] = sorted(k for k in s.list_keys() if k.startswith("go/"))
    if backend == "libuv":
        r["go_queue_len"] = s.queue_len("go/q")
        r["go_queue_pop"] = s.queue_pop("go/q", block=False).decode()
    s.set("py/done", "1")
    s.wait(["go/bye"])  # keep serving until the Go side has checked py/*
    print(json.dumps(r), flush=True)


def process_group(addr, rank, world_size):
    host, port = addr.rsplit(":", 1)
    os.environ.update(
        MASTER_ADDR=host, MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world_size),
        TORCHELASTIC_USE_AGENT_STORE="True",
    )
    import torch

    dist.init_process_group("gloo", timeout=TIMEOUT)
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    g = dist.new_group(list(range(world_size)))
    dist.barrier(g)
    gathered = [None] * world_size
    dist.all_gather_object(gathered, {"rank": rank})
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "all_reduce": t.item(), "gathered": gathered}), flush=True)


def file_store(path, order):
    s = dist.FileStore(path, 2)
    s.set_timeout(TIMEOUT)
    r = {}
    s.set("py/a", "1")
    s.add("py/ctr", 5)
    s.wait(["go/done"])
    r["go_set"] = s.get("go/set").decode()
    r["go_ctr"] = s.get("go/ctr").decode()
    r["go_append"] = s.get("go/app").decode()
    r["go_multi"] = [s.get("go/m1").decode(), s.get("go/m2").decode()]
    r["go_deleted"] = s.check(["go/del"])
    r["py_ctr_after_go"] = s.add("py/ctr", 0)
    r["num_keys"] = s.num_keys()
    r["list_keys"] = sorted(s.list_keys())
    s.set("py/done", "1")
    if order == "last":
        # Wait until the Go peer closed: its Close writes "cleanup/", which
        # list_keys shows as "leanup/".
        deadline = time.monotonic() + TIMEOUT.total_seconds()
        while "leanup/" not in s.list_keys():
            if time.monotonic() > deadline:
                raise TimeoutError("Go peer did not close")
            time.sleep(0.01)
    del s  # the destructor does the refcount/cleanup bookkeeping
    r["file_exists_after_close"] = os.path.exists(path)
    print(json.dumps(r), flush=True)


def main():
    mode = sys.argv[1]
    if mode == "tcp-client":
        tcp_client(sys.argv[2])
    elif mode == "tcp-server":
        tcp_server(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "libuv")
    elif mode == "pg":
        process_group(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "file":
        file_store(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
