"""One rank of test_netif.py: init the default godist group, all-reduce, and
print one JSON line with the outcome (or the error init raised) and how long
it took. Usage: ``netif_worker.py env`` (env://: MASTER_ADDR, MASTER_PORT),
``netif_worker.py file <path>`` (a FileStore) or ``netif_worker.py store``
(a TCPStore at MASTER_ADDR, MASTER_PORT made first, rank 0 hosting it;
with NETIF_GO_FILE set, the group is created once that file exists); RANK,
WORLD_SIZE and NETIF_TIMEOUT (seconds) from the environment."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time


def main() -> None:
    import torch
    import torch.distributed as dist

    import godist
    from godist import _log

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=float(os.environ.get("NETIF_TIMEOUT", "30")))
    out = {"rank": rank}
    start = time.monotonic()
    try:
        if sys.argv[1] == "store":
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), size, rank == 0,
                                  timeout=timeout, wait_for_workers=False)
            go = os.environ.get("NETIF_GO_FILE")
            while go and not os.path.exists(go) and time.monotonic() < start + timeout.total_seconds():
                time.sleep(0.05)
            dist.init_process_group("godist", store=store, rank=rank, world_size=size, timeout=timeout)
        else:
            init = "env://" if sys.argv[1] == "env" else "file://" + sys.argv[2]
            dist.init_process_group("godist", init_method=init, rank=rank, world_size=size, timeout=timeout)
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t)
        out.update(ok=True, sum=t.tolist())
    except Exception as e:  # noqa: BLE001 - the test reads what init raised
        out.update(ok=False, type=type(e).__name__, error=str(e),
                   timeout_error=isinstance(e, godist.GodistTimeoutError), peer=getattr(e, "peer", None),
                   missing_ranks=getattr(e, "missing_ranks", None))
    out["elapsed"] = time.monotonic() - start
    _log.flush()
    print(json.dumps(out), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
