"""Background augmentation: AugmentBuffer against a sequential loop and torch's DataLoader.

Two measurements, both printed as tables of medians:

1. **Epochs.** A training loop over a folder of synthetic JPEGs
   (``tensorbox.data.make_image_folder``), each sample decoded with Pillow and
   augmented per sample (RandomResizedCrop 224, flip, ImageNet normalisation: float32
   ``[3, 224, 224]``), batches of 32, and a simulated training step of fixed cost
   (``time.sleep``: a GPU step leaves the CPU to the producers). The step is set to
   the measured time of making one batch in this process, so ``--workers 2``
   producers are up to 2x faster than the trainer. Per mode: epoch time and the
   consumer's wait (time blocked for a batch), for the first epoch (with start-up) and
   the median of the later ones. Modes: sequential (no workers), torch DataLoader
   (``num_workers=N, prefetch_factor=2, persistent_workers=True``, forkserver) and
   AugmentBuffer (``N`` producers).
2. **Hand-off.** The per-batch cost of moving finished ``32x3x224x224`` float32 batches
   from one worker process to the trainer, with nothing else to do: steady-state time
   per batch (the worker's side: DataLoader collates into fresh shared memory and sends
   a file descriptor; AugmentBuffer copies rows into a reused slot and sends a batch
   number) and the trainer's side (the time ``next()`` takes when the batch is ready).
   The copy floor is ``torch.stack`` of the 32 samples into a reused buffer in-process:
   the copy that any path has to make once (DataLoader's collate makes it too), so
   "beyond the copy floor" is what the transport itself costs. Both paths are measured
   in alternating rounds, medians of the rounds' medians.

torch runs one intra-op thread in every process (``torch.set_num_threads(1)``, and
``worker_threads=1`` for producers), so N workers use N cores.

Usage::

    python benchmarks/buffer.py            # 1200 JPEGs 300-500 px, 3 epochs (a few minutes)
    python benchmarks/buffer.py --small    # 192 smaller JPEGs, 2 epochs (about a minute)
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _results
from tensorbox.buffer import AugmentBuffer, sample_seed
from tensorbox.data import make_image_folder, scan_image_folder
from tensorbox.data.transforms import Normalize, RandomHorizontalFlip, RandomResizedCrop

BATCH = 32
SIZE = 224


class JpegFolder:
    """``dataset[i]``: ``{"image": uint8 [3, H, W], "label": int}``, decoded with Pillow."""

    def __init__(self, root: str) -> None:
        index = scan_image_folder(root)
        self.paths, self.targets = index.paths, index.targets

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict[str, Any]:
        with Image.open(self.paths[i]) as img:
            arr = np.array(img.convert("RGB"))  # a writable copy: torch wants one
        return {"image": torch.from_numpy(arr).permute(2, 0, 1), "label": self.targets[i]}


class Augment:
    """The per-sample train transform: RandomResizedCrop, flip, normalise to float32.

    Given ``out`` (AugmentBuffer passes the slot row to a transform with an ``out``
    parameter), the normalisation writes straight into the slot: no copy afterwards.
    """

    def __init__(self, size: int = SIZE) -> None:
        self.crop = RandomResizedCrop(size)
        self.flip = RandomHorizontalFlip()
        self.norm = Normalize.imagenet()

    def __call__(
        self, sample: dict[str, Any], generator: torch.Generator, out: Any = None
    ) -> dict[str, Any]:
        x = sample["image"].unsqueeze(0)  # a batch of one: the transforms are batched
        x = self.flip(self.crop(x, generator), generator)
        dest = None if out is None else out["image"].unsqueeze(0)
        return {"image": self.norm(x, out=dest)[0], "label": sample["label"]}


class Seeded(torch.utils.data.Dataset):
    """The same samples for DataLoader: per-sample generators as AugmentBuffer seeds them."""

    def __init__(self, data: JpegFolder, transform: Augment, seed: int = 0) -> None:
        self.data, self.transform, self.seed = data, transform, seed

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, Any]:
        gen = torch.Generator().manual_seed(sample_seed(self.seed, 0, i))
        return self.transform(self.data[i], gen)


class Cached(torch.utils.data.Dataset):
    """Prepared float32 samples (32 distinct ones, cycled), for the hand-off measurement."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.samples: list[torch.Tensor] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not self.samples:  # made in the worker, in its private memory
            self.samples = [torch.randn(3, SIZE, SIZE) for _ in range(BATCH)]
        return {"image": self.samples[i % BATCH]}


# ------------------------------------------------------------------ epochs


def _epochs(batches: Any, epochs: int, step_s: float, restart: Any = None) -> list[tuple]:
    """Run ``epochs`` epochs; per epoch (epoch seconds, seconds blocked for batches)."""
    out = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        it = iter(batches)  # DataLoader starts its workers here: that is waiting too
        wait = time.perf_counter() - t0
        while True:
            w0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - w0
            assert batch["image"].shape[1:] == (3, SIZE, SIZE)
            time.sleep(step_s)  # the training step
        out.append((time.perf_counter() - t0, wait))
    return out


class Sequential:
    """Batches made in the training process, one after the other (no workers)."""

    def __init__(self, ds: Seeded) -> None:
        self.ds = ds

    def __iter__(self) -> Any:
        for start in range(0, len(self.ds), BATCH):
            samples = [self.ds[i] for i in range(start, min(start + BATCH, len(self.ds)))]
            yield torch.utils.data.default_collate(samples)


def bench_epochs(root: str, workers: int, epochs: int, shm: str | None) -> tuple[list, float]:
    data = JpegFolder(root)
    ds = Seeded(data, Augment())
    seq = Sequential(ds)
    # Calibrate: the time to make one batch here sets the training step.
    it = iter(seq)
    next(it)  # warm up (first decode, allocator)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        next(it)
        times.append(time.perf_counter() - t0)
    make_s = statistics.median(times)
    step_s = make_s
    rows = []
    rows.append(("sequential", _epochs(seq, epochs, step_s)))
    loader = torch.utils.data.DataLoader(
        ds, batch_size=BATCH, num_workers=workers, prefetch_factor=2,
        persistent_workers=True, multiprocessing_context="forkserver",
    )  # fmt: skip
    rows.append((f"DataLoader, {workers} workers", _epochs(loader, epochs, step_s)))
    del loader
    buf = AugmentBuffer(
        data, Augment(), batch_size=BATCH, num_workers=workers, capacity=16, dir=shm,
        shuffle=False, seed_global=False,
    )  # fmt: skip
    with buf:
        rows.append((f"AugmentBuffer, {workers} producers", _epochs(buf, epochs, step_s)))
    return rows, step_s


# ------------------------------------------------------------------ hand-off


def _intervals(it: Any, count: int, pause: float = 0.0) -> tuple[float, float]:
    """(median seconds between batches, median seconds inside next()) in steady state."""
    next(it)
    next(it)  # warm up: workers started, slots touched once
    stamps, inside = [time.perf_counter()], []
    for _ in range(count):
        if pause:
            time.sleep(pause)  # let the worker get ahead: next() then only hands over
        t0 = time.perf_counter()
        next(it)
        t1 = time.perf_counter()
        inside.append(t1 - t0)
        stamps.append(t1)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return statistics.median(gaps), statistics.median(inside)


def bench_handoff(count: int, shm: str | None, rounds: int = 3) -> list[tuple[str, float, float]]:
    """Both paths measured in alternating rounds (medians of the rounds' medians), so
    that a burst of load on the machine does not land on one of them only."""
    n = BATCH * (rounds * (2 * count + 8) + 8)
    loader = torch.utils.data.DataLoader(
        Cached(n), batch_size=BATCH, num_workers=1, prefetch_factor=2,
        persistent_workers=True, multiprocessing_context="forkserver",
    )  # fmt: skip
    buf = AugmentBuffer(
        Cached(n), batch_size=BATCH, num_workers=1, capacity=4, dir=shm, shuffle=False,
        seed_global=False,
    )  # fmt: skip
    dl_it, buf_it = iter(loader), iter(buf)
    res: dict[str, list[tuple[float, float]]] = {"dl": [], "buf": []}
    for _ in range(rounds):
        for key, it in (("dl", dl_it), ("buf", buf_it)):
            gap, _ = _intervals(it, count)
            _, inside = _intervals(it, count // 2, pause=0.05)
            res[key].append((gap, inside))
    buf.close()
    del dl_it, loader
    samples = [torch.randn(3, SIZE, SIZE) for _ in range(BATCH)]
    out = torch.empty(BATCH, 3, SIZE, SIZE)
    floor = []
    for _ in range(count):
        t0 = time.perf_counter()
        torch.stack(samples, out=out)
        floor.append(time.perf_counter() - t0)

    def med(key: str, i: int) -> float:
        return statistics.median(r[i] for r in res[key])

    return [
        ("DataLoader, 1 worker", med("dl", 0), med("dl", 1)),
        ("AugmentBuffer, 1 producer", med("buf", 0), med("buf", 1)),
        ("copy floor (stack into a reused batch)", statistics.median(floor), 0.0),
    ]


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a quick run (CI)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers / producers")
    parser.add_argument("--dir", default=None, help="slot folder (default /dev/shm)")
    parser.add_argument("--json", metavar="PATH", help="also write the medians as JSON")
    args = parser.parse_args()
    out = _results.start("buffer")
    torch.set_num_threads(1)
    cache = Path(os.environ.get("TENSORBOX_CACHE") or Path.home() / ".cache" / "tensorbox")
    if args.small:
        images, lo, hi, epochs, count = 192, 200, 320, 2, 30
    else:
        images, lo, hi, epochs, count = 1200, 300, 500, 3, 40
    root = make_image_folder(
        cache / f"bench-jpeg-{images}-{lo}-{hi}", num_images=images, min_size=lo, max_size=hi
    )
    shm = args.dir  # None: AugmentBuffer's default, /dev/shm
    print(f"torch {torch.__version__}, torch.set_num_threads(1) in every process, "
          f"{os.cpu_count()} CPUs, {images} JPEGs {lo}-{hi} px, batch {BATCH}")  # fmt: skip

    rows, step_s = bench_epochs(str(root), args.workers, epochs, shm)
    print(f"\n## Epochs (training step {step_s * 1e3:.0f} ms = one batch made here)\n")
    print("| mode | first epoch s | wait s | later epochs s | wait s |")
    print("|---|---|---|---|---|")
    for name, runs in rows:
        first, later = runs[0], runs[1:] or runs
        e = statistics.median(r[0] for r in later)
        w = statistics.median(r[1] for r in later)
        print(f"| {name} | {first[0]:.2f} | {first[1]:.2f} | {e:.2f} | {w:.2f} |")
        out.setdefault("epochs_s", {})[name] = {
            "first": first[0], "first_wait": first[1], "later": e, "later_wait": w
        }  # fmt: skip

    print(f"\n## Hand-off of {BATCH}x3x{SIZE}x{SIZE} float32 batches (medians, 3x{count})\n")
    print("| path | per batch ms | beyond the copy floor ms | trainer's next() ms |")
    print("|---|---|---|---|")
    hand = bench_handoff(count, shm)
    floor = hand[2][1]
    for name, gap, inside in hand:
        print(f"| {name} | {gap * 1e3:.2f} | {(gap - floor) * 1e3:.2f} | {inside * 1e3:.3f} |")
        out.setdefault("handoff_ms", {})[name] = {"per_batch": gap * 1e3, "next": inside * 1e3}
    dl, bf = hand[0], hand[1]
    print(
        f"\nAugmentBuffer / DataLoader: {bf[1] / dl[1]:.2f} per batch, "
        f"{(bf[1] - floor) / (dl[1] - floor):.2f} beyond the copy floor, "
        f"{bf[2] / dl[2]:.3f} for the trainer's next()"
    )
    if args.json:
        out["settings"] = {"images": images, "workers": args.workers, "step_ms": step_s * 1e3}
        _results.write(args.json, out)


if __name__ == "__main__":
    main()
