"""Timing the three image pipelines the same way (shared by ``benchmarks/demo.py`` and
``benchmarks/dataload.py``).

The pipelines, each given the same CPU budget of ``workers``:

- ``per-image``: a ``DataLoader`` with ``workers`` processes over the image files, doing
  what ``ImageFolder`` + the usual torchvision transforms do (``reference.py``);
- ``tutorial``: tensordict's ImageNet tutorial path (``td_tutorial.py``): ingestion by a
  per-image ``DataLoader`` with ``workers`` processes, training reads by tensordict's
  batched indexing and the tutorial's batched transforms, with ``workers`` intra-op
  threads (its loader runs in the main process, as in the tutorial);
- ``tensorbox``: ``ingest_image_folder`` with ``workers`` processes, then ``BatchLoader``
  with ``workers`` reader threads.

A rate counts whole epochs after one untimed warm-up epoch (which pays worker start-up,
page faults, first allocations), over at least ``min_seconds`` (repeating epochs when
one is shorter). Per-image ``DataLoader``s keep their workers between epochs.

>>> r = Rate(640, 0.5)
>>> round(r.per_s), f"{r}"
(1280, '1,280')
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from tensorbox.data import BatchLoader, ImageFolderData, ingest_image_folder, scan_image_folder

from . import td_tutorial
from .reference import image_folder_dataset, reference_transform

__all__ = [
    "Rate",
    "best_thread_setting",
    "compare_ingested",
    "measure",
    "per_image_loader",
    "tensorbox_loader",
    "time_ingest",
]

TRAIN_SIZE, STORE_SIZE = 224, 256


@dataclass
class Rate:
    """``images`` processed in ``seconds``."""

    images: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else float("nan")

    def __str__(self) -> str:
        return f"{self.per_s:,.0f}"


def _batch_len(batch: Any) -> int:
    if isinstance(batch, (tuple, list)):
        return len(batch[0])
    return int(batch.batch_size[0])


def measure(
    make: Callable[[], Iterable[Any]], *, min_seconds: float = 0.0, max_epochs: int = 20
) -> Rate:
    """One untimed warm-up epoch of ``make()``, then whole timed epochs until ``min_seconds``.

    Warm-up absorbs worker start-up, page faults and first allocations. Whole epochs,
    timed from ``iter()``, matter: timing from the first batch of a ``DataLoader`` would
    credit it with the batches its workers prepared before the clock started.
    """
    for _ in make():
        pass
    images, seconds = 0, 0.0
    for _ in range(max_epochs):
        start = time.perf_counter()
        for batch in make():
            images += _batch_len(batch)
        seconds += time.perf_counter() - start
        if seconds >= min_seconds:
            break
    return Rate(images, seconds)


def best_thread_setting(run: Callable[[], Rate], threads: int) -> tuple[Rate, int]:
    """Run with torch intra-op threads = 1 and = ``threads``; keep the faster (a baseline
    that leans on intra-op threads can collapse when another process takes a core, and
    one that does not gains nothing from them: either way it gets its best here)."""
    results = []
    for n in sorted({1, max(1, threads)}):
        previous = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            results.append((run(), n))
        finally:
            torch.set_num_threads(previous)
    return max(results, key=lambda r: r[0].per_s)


def per_image_loader(
    root: str | os.PathLike, kind: str, *, workers: int, batch_size: int
) -> DataLoader:
    """The torchvision-style per-image ``DataLoader`` (``kind``: "train" or "val")."""
    dataset = image_folder_dataset(
        root, reference_transform(kind, size=TRAIN_SIZE, resize=STORE_SIZE)
    )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=kind == "train",
        num_workers=workers,
        persistent_workers=workers > 0,
    )


def tensorbox_loader(
    data: Any, kind: str, *, workers: int, batch_size: int, seed: int = 0
) -> BatchLoader:
    """tensorbox's loader: crop 224 + flip + normalise at read time (train), normalise (val)."""
    train = kind == "train"
    return BatchLoader(
        data,
        batch_size,
        shuffle=train,
        seed=seed,
        crop=TRAIN_SIZE if train else None,
        flip=train,
        normalize="imagenet",
        num_threads=workers,
    )


def time_ingest(
    root: str | os.PathLike, dest: str | os.PathLike, kind: str, *, workers: int, which: str
) -> tuple[Any, Rate]:
    """Ingest ``root`` at ``dest`` with ``which`` ("tensorbox" or "tutorial"); return data, rate."""
    n = len(scan_image_folder(root))
    start = time.perf_counter()
    if which == "tutorial":
        data = td_tutorial.tutorial_ingest(
            root, dest, kind=kind, num_workers=workers, size=TRAIN_SIZE, resize=STORE_SIZE
        )
    elif kind == "train":
        data = ingest_image_folder(root, dest, STORE_SIZE, num_workers=workers)
    else:
        data = ingest_image_folder(
            root, dest, TRAIN_SIZE, shorter_side=STORE_SIZE, num_workers=workers
        )
    return data, Rate(n, time.perf_counter() - start)


@dataclass
class Agreement:
    """How an ingestion's rows compare with the tutorial's, per file type."""

    png_files: int
    png_identical: bool
    jpeg_files: int
    jpeg_identical: int
    jpeg_mean_abs: float
    jpeg_worst_mean_abs: float

    def __str__(self) -> str:
        png = f"{self.png_files} PNG {'identical' if self.png_identical else 'DIFFERENT'}"
        return (
            f"{png}; {self.jpeg_files} JPEG: {self.jpeg_identical} identical, mean |diff| "
            f"{self.jpeg_mean_abs:.2f} grey levels (worst image {self.jpeg_worst_mean_abs:.2f})"
        )


def compare_ingested(root: str | os.PathLike, ours: ImageFolderData, theirs: Any) -> Agreement:
    """Row by row comparison of two ingestions of ``root`` (same order, same geometry)."""
    paths = scan_image_folder(root).paths
    a = ours.images.numpy()
    b = np.asarray(theirs.images)
    png, png_same, jpg, jpg_same, means = 0, True, 0, 0, []
    for i, p in enumerate(paths):
        diff = np.abs(a[i].astype(np.int16) - b[i].astype(np.int16))
        if Path(p).suffix.lower() == ".png":
            png += 1
            png_same &= not diff.any()
        else:
            jpg += 1
            jpg_same += not diff.any()
            means.append(float(diff.mean()))
    return Agreement(
        png,
        png_same,
        jpg,
        jpg_same,
        float(np.mean(means)) if means else 0.0,
        max(means, default=0.0),
    )


def set_threads(n: int) -> None:
    """Pin torch's intra-op threads (a benchmark must say how many it used)."""
    torch.set_num_threads(n)
