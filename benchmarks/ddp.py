"""Data-parallel loading: 2 ranks with ``BatchLoader`` against 2 ranks with a per-image
``DataLoader`` + ``DistributedSampler``, and two ways of giving every rank the weights.

Two processes on this machine join a gloo process group (loopback). In each round,
both contenders run one untimed warm-up epoch, then ``--epochs`` timed epochs, each
rank reading its own share of the training set; the time is taken between barriers,
so the aggregate rate (images of all ranks / seconds) waits for the slower rank:

- ``BatchLoader``: the memory-mapped dataset ingested once (``ingest_image_folder``, 256
  px), crop 224 + flip + normalise at read time, 1 reader thread per rank,
  ``num_replicas``/``rank`` from the process group;
- per-image: torchvision-style ``RandomResizedCrop(224)`` + flip + normalise on the
  JPEG files (decoded per image), a ``DistributedSampler``, 1 worker process per rank.

Then the weights of a model (``--params`` float32 values in 20 tensors) saved as a tree:
(a) rank 0 opens the tree, copies it into its model, and ``tensorbox.distributed.
broadcast_`` sends it to every rank; (b) every rank opens the tree (a shared path) and
copies it. Page cache warm, medians of 5.

Usage::

    python benchmarks/ddp.py --small     # 256 images, 2 epochs: the smoke run
    python benchmarks/ddp.py             # 1,200 images
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorbox.distributed as tbd
from benchmarks.demo import cache_dir, demo_folders
from benchmarks.harness.reference import image_folder_dataset, reference_transform
from tensorbox import TensorDict
from tensorbox.data import BatchLoader, ImageFolderData, ingest_image_folder

WORLD = 2


def _timed(rank: int, make, epochs: int) -> tuple[int, float]:
    """Images this rank read in ``epochs`` epochs after a warm-up one; barrier to barrier."""
    loader = make()

    def one(epoch: int) -> int:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        elif hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        n = 0
        for batch in loader:
            n += len(batch[0]) if isinstance(batch, list | tuple) else batch.batch_size[0]
        return n

    one(0)
    dist.barrier()
    t0 = time.perf_counter()
    n = sum(one(e) for e in range(1, epochs + 1))
    dist.barrier()
    return n, time.perf_counter() - t0


def _rank(rank: int, args: argparse.Namespace, shared: str, train_root: str) -> None:
    if sys.platform == "linux":
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method="file://" + os.path.join(shared, "rendezvous"),
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=300),
    )
    data = ImageFolderData.load_memmap(os.path.join(shared, "train"))
    bs = args.batch_size

    def fast() -> BatchLoader:
        return BatchLoader(data, bs, crop=224, flip=True, normalize="imagenet", num_threads=1)

    dataset = image_folder_dataset(train_root, reference_transform("train", size=224))

    def slow() -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=bs,
            sampler=DistributedSampler(dataset, seed=0),
            num_workers=1,
            persistent_workers=True,
        )

    rates: dict[str, list[float]] = {"BatchLoader": [], "per-image": []}
    for _ in range(args.repeats):
        for name, make in (("BatchLoader", fast), ("per-image", slow)):
            n, s = _timed(rank, make, args.epochs)
            total = tbd.all_gather(TensorDict(n=torch.tensor(n), s=torch.tensor(s)))
            rates[name].append(float(total["n"].sum()) / float(total["s"].max()))

    # Weights: a model-sized tree, (a) rank 0 + broadcast, (b) every rank opens it.
    path = os.path.join(shared, "weights")
    weights = TensorDict.load_memmap(path).apply(lambda t: torch.zeros(t.shape, dtype=t.dtype))
    times: dict[str, list[float]] = {"broadcast": [], "open": []}
    for _ in range(5):
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            weights.update_(TensorDict.load_memmap(path))
        tbd.broadcast_(weights, src=0)
        dist.barrier()
        times["broadcast"].append(time.perf_counter() - t0)
        weights.zero_()
        dist.barrier()
        t0 = time.perf_counter()
        weights.update_(TensorDict.load_memmap(path))
        dist.barrier()
        times["open"].append(time.perf_counter() - t0)
    assert torch.equal(weights["w0"], TensorDict.load_memmap(path)["w0"])
    if rank == 0:
        out = {"rates": rates, "weights": {k: statistics.median(v) for k, v in times.items()}}
        Path(shared, "result.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--root")
    ap.add_argument("--cache")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--params", type=int, default=None)
    args = ap.parse_args()
    args.epochs = args.epochs or (2 if args.small else 3)
    args.repeats = args.repeats or (1 if args.small else 3)
    params = args.params or (2_000_000 if args.small else 25_000_000)
    train_root, _, what = demo_folders(args.root, cache_dir(args.cache), args.small)
    with tempfile.TemporaryDirectory() as shared:
        t0 = time.perf_counter()
        data = ingest_image_folder(train_root, Path(shared) / "train", 256, progress=False)
        ingest_s = time.perf_counter() - t0
        g = torch.Generator().manual_seed(0)
        sizes = [params // 20] * 19 + [params - 19 * (params // 20)]
        TensorDict({f"w{i}": torch.randn(n, generator=g) for i, n in enumerate(sizes)}).memmap(
            Path(shared) / "weights"
        )
        ctx = mp.get_context("spawn")
        procs = [
            ctx.Process(target=_rank, args=(r, args, shared, str(train_root))) for r in range(WORLD)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=900)
        codes = [p.exitcode for p in procs]
        for p in procs:
            if p.is_alive():
                p.kill()
        if codes != [0] * WORLD:
            print(f"rank processes failed: exit codes {codes}", file=sys.stderr)
            return 1
        result = json.loads((Path(shared) / "result.json").read_text())
    fast = statistics.median(result["rates"]["BatchLoader"])
    slow = statistics.median(result["rates"]["per-image"])
    print(f"ddp benchmark: {len(data)} train images ({what})")
    print(
        f"{WORLD} ranks (gloo, loopback), torch.set_num_threads(1) per rank, batch "
        f"{args.batch_size} per rank, {args.epochs} timed epochs, medians of {args.repeats} "
        f"round(s), cpu_count={os.cpu_count()}, torch {torch.__version__}; ingestion once: "
        f"{ingest_s:.1f} s"
    )
    print("\nTrain pipeline (crop 224 + flip + normalise), aggregate images/s over the ranks")
    print(f"  BatchLoader, 1 reader thread per rank          {fast:>10,.0f}")
    print(f"  DataLoader + DistributedSampler, 1 worker/rank {slow:>10,.0f}")
    print(f"  ratio                                          {fast / slow:>10.1f}x")
    mb = params * 4 / 1e6
    w = result["weights"]
    print(f"\nInitial weights on every rank ({mb:,.0f} MB in 20 tensors), median of 5")
    print(f"  (a) rank 0 opens the tree + broadcast_         {w['broadcast'] * 1e3:>10.1f} ms")
    print(f"  (b) every rank opens the tree (shared path)    {w['open'] * 1e3:>10.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
