"""One rank of the 2-process checks of ``tests/distributed/test_ddp.py`` (gloo on loopback).

Run as ``python tests/ddp_worker.py RANK WORLD_SIZE SHARED_DIR``: joins the process
group through a file in ``SHARED_DIR``, records what its ``BatchLoader`` and
``AugmentBuffer`` yield (with the process-group defaults and with explicit
``num_replicas``/``rank``) and saves it to ``SHARED_DIR/rank<RANK>.pt`` for the test to
compare across ranks.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorbox.distributed as tbd
from tensorbox import TensorDict
from tensorbox.buffer import AugmentBuffer
from tensorbox.data import BatchLoader

N, BATCH = 21, 4  # 11 rows per rank (one of them padding), or 10 with drop_last


def dataset() -> TensorDict:
    # Every image is the same: two crops of different rows are equal exactly when the
    # crop windows (the random draws) are.
    image = torch.arange(3 * 12 * 12, dtype=torch.uint8).view(3, 12, 12)
    return TensorDict(
        {"images": image.expand(N, 3, 12, 12).clone(), "targets": torch.arange(N)},
        batch_size=[N],
    )


def jitter(sample, generator):
    return {"x": sample["x"] + torch.rand(3, generator=generator), "y": sample["y"]}


def epochs(loader, n: int = 2) -> list[dict[str, torch.Tensor]]:
    out = []
    for epoch in range(n):
        loader.set_epoch(epoch) if hasattr(loader, "set_epoch") else None
        batches = list(loader)
        out.append(
            {
                "targets": torch.cat([b["targets"] for b in batches]),
                "images": torch.cat([b["images"] for b in batches]),
                "sizes": torch.tensor([len(b) for b in batches]),
                "len": torch.tensor(len(loader)),
            }
        )
    return out


def resumed(data: TensorDict, rank: int, drop_last: bool) -> dict[str, torch.Tensor]:
    kw = dict(batch_size=BATCH, crop=6, flip=True, drop_last=drop_last, num_threads=1)
    first = BatchLoader(data, **kw)
    it = iter(first)
    head = [next(it)["targets"] for _ in range(1)]
    state = first.state_dict()
    tail = [b["targets"] for b in it]
    # Every rank resumes from rank 0's state (a checkpoint written by rank 0).
    sent = tbd.broadcast(TensorDict({k: torch.tensor(v) for k, v in state.items()}), src=0)
    again = BatchLoader(data, **kw)
    again.load_state_dict({k: int(v) for k, v in sent.items()})
    return {
        "head": torch.cat(head),
        "tail": torch.cat(tail),
        "again": torch.cat([b["targets"] for b in again]),
        "state_batch": torch.tensor(state["batch"]),
    }


def buffer_epochs(data: TensorDict, **kw) -> list[dict[str, torch.Tensor]]:
    out = []
    with AugmentBuffer(data, jitter, batch_size=BATCH, num_workers=0, **kw) as buf:
        for _ in range(2):
            batches = [b.clone() for b in buf]
            out.append(
                {
                    "y": torch.cat([b["y"] for b in batches]),
                    "x": torch.cat([b["x"] for b in batches]),
                    "len": torch.tensor(len(buf)),
                }
            )
    return out


def main() -> None:
    rank, world, shared = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if sys.platform == "linux":
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method="file://" + os.path.join(shared, "rendezvous"),
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=30),
    )
    try:
        data = dataset()
        flat = TensorDict({"x": torch.zeros(N, 3), "y": torch.arange(N)}, batch_size=[N])
        results: dict[str, object] = {}
        for drop_last in (False, True):
            kw = dict(batch_size=BATCH, crop=6, flip=True, drop_last=drop_last, num_threads=1)
            default = BatchLoader(data, **kw)
            explicit = BatchLoader(data, seed=0, num_replicas=world, rank=rank, **kw)
            results[f"loader/{drop_last}"] = epochs(default)
            results[f"explicit/{drop_last}"] = epochs(explicit)
            results[f"resume/{drop_last}"] = resumed(data, rank, drop_last)
            results[f"buffer/{drop_last}"] = buffer_epochs(flat, drop_last=drop_last)
            results[f"buffer_explicit/{drop_last}"] = buffer_epochs(
                flat, drop_last=drop_last, num_replicas=world, rank=rank
            )
        single = BatchLoader(data, batch_size=BATCH, num_replicas=1, seed=0, shuffle=False)
        results["single"] = epochs(single, 1)
        torch.save(results, os.path.join(shared, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
