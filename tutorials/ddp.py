"""Tutorial: data-parallel training with torchrun, a memory-mapped dataset and tree checkpoints.

Each rank runs this script. Run it::

    python -m torch.distributed.run --nproc_per_node=2 tutorials/ddp.py          # one machine
    python -m torch.distributed.run --nproc_per_node=2 tutorials/ddp.py --small  # CI: seconds
    # the dataset in an S3 bucket (any S3-compatible server: AWS_ENDPOINT_URL), each rank
    # fetching only its share of the rows (docs/remote.md):
    python -m torch.distributed.run --nproc_per_node=2 tutorials/ddp.py --data s3://bucket/train.tdz
    # two machines (see docs/distributed.md), on each of them:
    python -m torch.distributed.run --nnodes=2 --nproc_per_node=4 --node_rank=N \\
        --master_addr=HOST0 --master_port=29500 tutorials/ddp.py --out /shared/run

What happens:

1. the image folder is ingested once into a memory-mapped ``ImageFolderData`` tree (rank
   0 writes it, everyone waits at a barrier, then every rank opens it lazily); with
   ``--data URL`` rank 0 uploads it as one archive object and every rank opens the URL,
   its rows fetched on first use (only the rank's share);
2. the initial weights come from a saved tree, either loaded on rank 0 and broadcast
   with ``tensorbox.distributed.broadcast_`` (no pickle) or opened by every rank;
3. a small CNN trains under ``DistributedDataParallel`` (gloo on CPU, NCCL on GPUs),
   each rank reading its own share with ``BatchLoader`` (``num_replicas`` and ``rank``
   come from the process group);
4. every ``--every`` steps rank 0 writes a checkpoint tree (weights, optimizer, loader,
   every rank's random states) while the others wait;
5. a "restarted job" builds everything anew, resumes from the last checkpoint and sees
   exactly the batches (and losses) of the uninterrupted run.

Every step checks what it claims (``assert``), so the tutorial is also a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorbox.distributed as tbd
from tensorbox import TensorDict
from tensorbox.checkpoint import load_checkpoint, save_checkpoint
from tensorbox.data import BatchLoader, ImageFolderData, ingest_image_folder, make_image_folder


def say(*args: object) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.2),  # random: its streams are part of the checkpoint
        nn.Linear(32, num_classes),
    )


def train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    loader: BatchLoader,
    step: int,
    until: int,
    device: torch.device,
    every: int = 0,
    ckpt: Path | None = None,
) -> list[tuple[torch.Tensor, float]]:
    """Train from ``step`` to ``until``; return (targets, loss) per step."""
    seen = []
    while step < until:
        for batch in loader:
            images, targets = batch.images.to(device), batch.targets.to(device)
            loss = nn.functional.cross_entropy(model(images), targets)
            opt.zero_grad()
            loss.backward()  # DDP averages the gradients over the ranks here
            opt.step()
            seen.append((batch.targets.clone(), loss.item()))
            step += 1
            if every and step % every == 0 and ckpt is not None:
                # One call on every rank: RNG states gathered, rank 0 writes, all wait.
                save_checkpoint(
                    ckpt / f"step_{step:06d}",
                    model=model.module,  # the module inside DDP: keys without "module."
                    optimizer=opt,
                    loader=loader,
                    extra={"step": step},
                )
            if step == until:
                break
    loader.close()
    return seen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--out", help="a folder every rank sees (default: a cache folder)")
    ap.add_argument("--per-node", action="store_true", help="one dataset copy per machine")
    ap.add_argument("--data", help="the dataset's URL (s3://bucket/train.tdz): read from there")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--every", type=int, default=None)
    args = ap.parse_args()
    if "RANK" not in os.environ:
        sys.exit("launch me with: python -m torch.distributed.run --nproc_per_node=2 " + __file__)

    # ------------------------------------------------------------ 0. the process group
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    elif sys.platform == "linux":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: stay on loopback
    torch.set_num_threads(1)  # 2 ranks share this machine's cores
    # Rank 0 may spend minutes making the dataset while the others wait at a barrier.
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(minutes=15))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    say(f"== 0. {world} ranks, backend {dist.get_backend()}, device {device.type}")

    cache = Path(os.environ.get("TENSORBOX_CACHE") or os.path.join(".cache", "tensorbox-demo"))
    out = Path(args.out) if args.out else cache / ("ddp-small" if args.small else "ddp")
    store, crop, per_rank_batch = (32, 28, 8) if args.small else (64, 56, 32)
    steps = args.steps or (12 if args.small else 60)
    every = args.every or (3 if args.small else 20)

    # ------------------------------------------------------------ 1. the dataset, once
    # Rank 0 writes (a shared file system), or with --per-node the first rank of each
    # machine writes its own copy; the others wait at the barrier, then open it lazily.
    writer = local_rank == 0 if args.per_node else rank == 0
    if writer:
        if out.exists():
            shutil.rmtree(out)
        kw = {"num_classes": 4, "min_size": 48, "max_size": 96} if args.small else {}
        folder = make_image_folder(
            cache / ("ddp-images-small" if args.small else "ddp-images"),
            num_images=128 if args.small else 1200,
            seed=0,
            **kw,
        )
        ingest_image_folder(folder, out / "train", store, num_workers=0 if args.small else None)
        if args.data:  # one object: readers see the whole archive or none of it
            ImageFolderData.load_memmap(out / "train").memmap(args.data, archive=True)
    dist.barrier()
    where = args.data or out / "train"
    data = ImageFolderData.load_memmap(where)  # nothing read yet (from a URL: not even fetched)
    say(f"== 1. dataset: {len(data)} images {tuple(data.images.shape[1:])} at {where}")

    # ------------------------------------------------------------ 2. initial weights
    if rank == 0:  # e.g. pretrained weights, saved as a tree
        torch.manual_seed(0)
        TensorDict.from_module(make_model(len(data.classes))).detach().memmap(out / "init")
    dist.barrier()
    torch.manual_seed(1000 + rank)  # every rank starts from different random weights...
    model = make_model(len(data.classes)).to(device)
    weights = TensorDict.from_module(model)  # the module's own parameters, in place
    with torch.no_grad():  # in-place writes into parameters
        t0 = time.perf_counter()
        if rank == 0:  # (a) rank 0 reads the tree, one broadcast gives it to all
            weights.update_(TensorDict.load_memmap(out / "init").to(device))
        tbd.broadcast_(weights, src=0)
        t_broadcast = time.perf_counter() - t0
        t0 = time.perf_counter()
        # (b) every rank opens the tree from the shared path (a copy in place)
        weights.update_(TensorDict.load_memmap(out / "init").to(device))
        t_open = time.perf_counter() - t0
    gathered = tbd.all_gather(TensorDict(w=model[0].weight.detach().flatten()[:4].cpu()))
    assert torch.equal(gathered["w"][0], gathered["w"][-1])  # ...and now all hold the same
    say(
        f"== 2. initial weights: (a) load on rank 0 + broadcast {t_broadcast * 1e3:.1f} ms, "
        f"(b) every rank opens the tree {t_open * 1e3:.1f} ms"
    )

    # ------------------------------------------------------------ 3-4. train, checkpoint
    def setup(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, BatchLoader]:
        torch.manual_seed(seed)
        net = make_model(len(data.classes)).to(device)
        with torch.no_grad():
            TensorDict.from_module(net).update_(TensorDict.load_memmap(out / "init").to(device))
        ddp = DistributedDataParallel(net, device_ids=[local_rank] if cuda else None)
        opt = torch.optim.Adam(ddp.parameters(), lr=3e-3)
        loader = BatchLoader(
            data,
            per_rank_batch,  # per rank: the global batch is world * per_rank_batch
            crop=crop,
            flip=True,
            normalize="imagenet",
            device=device,
            num_threads=1,
        )  # num_replicas and rank: from the process group; seed: 0, the same on all ranks
        return ddp, opt, loader

    ddp, opt, loader = setup(seed=rank)
    assert (loader.num_replicas, loader.rank) == (world, rank)
    say(
        f"== 3. training {steps} steps, {len(loader)} per epoch of {per_rank_batch} images "
        f"per rank; a checkpoint every {every} steps"
    )
    t0 = time.perf_counter()
    whole = train(ddp, opt, loader, 0, steps, device, every, out / "ckpt")
    elapsed = time.perf_counter() - t0
    shares = tbd.all_gather(TensorDict(t=torch.cat([t for t, _ in whole[: len(loader)]])))
    if len(data) % world == 0:  # no padding: in epoch 0 the ranks saw every image once
        assert sorted(shares["t"].flatten().tolist()) == sorted(data.targets.tolist())
    say(
        f"   loss {whole[0][1]:.3f} -> {whole[-1][1]:.3f}; "
        f"{steps * per_rank_batch * world / elapsed:,.0f} images/s over {world} ranks"
    )
    checkpoints = sorted((out / "ckpt").iterdir())
    say(f"== 4. checkpoints: {[p.name for p in checkpoints]}")

    # ------------------------------------------------------------ 5. restart and resume
    last = [p for p in checkpoints if int(p.name.split("_")[1]) < steps][-1]  # mid-run
    ddp2, opt2, loader2 = setup(seed=99 + rank)  # a new job: other weights, other streams
    extra = load_checkpoint(last, model=ddp2.module, optimizer=opt2, loader=loader2)
    start = extra["step"]
    rest = train(ddp2, opt2, loader2, start, steps, device)
    assert len(rest) == steps - start
    for (t_a, loss_a), (t_b, loss_b) in zip(rest, whole[start:]):
        assert torch.equal(t_a, t_b)  # the same batches...
        assert loss_a == loss_b or cuda  # ...and, on CPU, bit for bit the same training
    for a, b in zip(ddp.parameters(), ddp2.parameters()):
        assert torch.equal(a, b) or cuda
    say(f"== 5. resumed from {last.name} (step {start}): the same {len(rest)} batches and losses")
    say("\ndone")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
