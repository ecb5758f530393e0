"""One torchft replica group (one process) training a small model with
torchft's Manager and DDP, on godist or torchft's gloo group.

    python torchft_worker.py LIGHTHOUSE REPLICA_ID BACKEND STEPS LOG [TIMEOUT_S]

Appends one JSON line per step to LOG ({"step", "t", "committed",
"participants"}) and, after STEPS committed steps, a line with the model's
parameters. Used by test_torchft_faults.py, which kills, pauses and restarts
these processes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn, optim


def main(lighthouse: str, replica_id: int, backend: str, steps: int, log: str, timeout_s: float) -> None:
    from torchft import DistributedDataParallel, Manager
    from torchft.optim import OptimizerWrapper
    from torchft.process_group import ProcessGroupGloo

    torch.set_num_threads(1)
    if backend == "godist":
        from godist.torchft import ProcessGroupGodist

        pg = ProcessGroupGodist(timeout=timedelta(seconds=timeout_s))
    else:
        pg = ProcessGroupGloo(timeout=timedelta(seconds=timeout_s))
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = optim.SGD(model.parameters(), lr=0.05)

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    manager = Manager(pg=pg, min_replica_size=2, load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"replica_{replica_id}", store_addr="localhost", store_port=store.port, rank=0,
                      world_size=1, lighthouse_addr=lighthouse, timeout=timedelta(seconds=timeout_s),
                      quorum_timeout=timedelta(seconds=30), connect_timeout=timedelta(seconds=30),
                      heartbeat_interval=timedelta(milliseconds=50), use_async_quorum=False)
    ddp = DistributedDataParallel(manager, model)
    wopt = OptimizerWrapper(manager, opt)
    gen = torch.Generator().manual_seed(1000 + replica_id)
    with open(log, "a") as f:
        while manager.current_step() < steps:
            x = torch.rand(4, 8, generator=gen)
            y = torch.randint(4, (4,), generator=gen)
            wopt.zero_grad()
            loss = nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            before = manager.current_step()
            wopt.step()  # steps the optimizer only if every participant committed
            committed = manager.current_step() > before
            f.write(json.dumps({"step": manager.current_step(), "t": time.time(), "committed": committed,
                                "participants": manager.num_participants()}) + "\n")
            f.flush()
            time.sleep(0.05)
        params = [p.detach().flatten().tolist() for p in model.parameters()]
        f.write(json.dumps({"final": manager.current_step(), "params": params}) + "\n")
    manager.shutdown(wait=False)
    os._exit(0)  # torchft's threads (checkpoint server, quorum) hold no state worth a clean exit


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], int(a[1]), a[2], int(a[3]), a[4], float(a[5]) if len(a) > 5 else 5.0)
