"""Tutorial: batched image loading from a memory-mapped tensorclass.

The story of tensordict's "Batched data loading with tensorclasses" (ImageNet), told
with tensorbox: pay for decoding and resizing once, at ingestion, into a memory-mapped
tensorclass; then read whole batches from it and apply the random transforms to the
batch, on the device, instead of decoding and transforming image by image. Run it::

    python tutorials/imagenet.py                 # the demo's 1,500 synthetic images
    python tutorials/imagenet.py --small         # a tiny folder (CI: well under a minute)
    python tutorials/imagenet.py --root DIR      # your folder: DIR/train, DIR/val

Every step checks what it claims (``assert``), so the tutorial is also a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The per-image baseline (torchvision's ImageFolder + transforms, or their Pillow
# equivalents when torchvision is not installed) lives with the benchmarks.
from benchmarks.harness.reference import ImageFolderDataset, reference_transform
from tensorbox.data import (
    BatchLoader,
    Compose,
    ImageFolderData,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    ingest_image_folder,
    make_image_folder,
    scan_image_folder,
)
from tensorbox.errors import IncompleteTreeError


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def rate(loader, limit: int | None = None) -> float:
    """Images per second over one pass, up to ``limit`` batches (a rough figure: see
    ``python benchmarks/demo.py`` and ``benchmarks/dataload.py`` for careful ones)."""
    n, t0 = 0, time.perf_counter()
    for i, batch in enumerate(loader):
        n += len(batch[0]) if isinstance(batch, (list, tuple)) else batch.batch_size[0]
        if limit is not None and i + 1 >= limit:
            break
    return n / (time.perf_counter() - t0)


def folders(args: argparse.Namespace) -> tuple[Path, Path]:
    if args.root:
        return Path(args.root) / "train", Path(args.root) / "val"
    cache = Path(os.environ.get("TENSORBOX_CACHE") or os.path.join(".cache", "tensorbox-demo"))
    if args.small:  # tiny images, few of them: seconds to make
        base = cache / "tutorial-small"
        kw = {"num_classes": 4, "min_size": 48, "max_size": 96}
        return (
            make_image_folder(base / "train", num_images=128, seed=0, **kw),
            make_image_folder(base / "val", num_images=64, seed=1, **kw),
        )
    base = cache / "synthetic-1200-300-300-700"  # the demo's folder, shared
    return (
        make_image_folder(base / "train", num_images=1200, seed=0),
        make_image_folder(base / "val", num_images=300, seed=1),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--root")
    args = ap.parse_args()
    store, crop = (64, 56) if args.small else (256, 224)
    workers = min(2, os.cpu_count() or 1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)

    step("1. The data: an image folder, root/<class>/<image>")
    train_root, val_root = folders(args)
    index = scan_image_folder(train_root)
    print(f"{len(index)} training images in {len(index.classes)} classes under {train_root}")

    step("2. The per-image way: ImageFolder + per-image transforms in DataLoader workers")
    per_image = DataLoader(
        ImageFolderDataset(train_root, reference_transform("train", size=crop, resize=store)),
        batch_size=32,
        shuffle=True,
        num_workers=workers,
    )
    images, _ = next(iter(per_image))
    assert images.shape == (32, 3, crop, crop) and images.dtype == torch.float32
    slow = rate(per_image, limit=8)
    print(f"per-image DataLoader ({workers} workers): {slow:,.0f} images/s")

    step("3. Ingest once: decode + resize into a memory-mapped tensorclass")
    out = Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    train = ingest_image_folder(train_root, out / "train", store, num_workers=workers)
    # Validation: the deterministic part of its transform (Resize + CenterCrop) is done
    # here, once; reading it later is a plain copy plus normalisation.
    val = ingest_image_folder(val_root, out / "val", crop, shorter_side=store, num_workers=workers)
    print(f"ingested {len(train) + len(val)} images in {time.perf_counter() - t0:.1f} s")
    print(train)
    assert train.images.dtype == torch.uint8 and train.images.shape[1:] == (3, store, store)
    assert train.targets.tolist() == index.targets and train.classes == index.classes
    print("on disk:", sorted(p.name for p in (out / "train").iterdir()))
    # Loading is lazy (nothing is read until used) and never unpickles anything.
    again = ImageFolderData.load_memmap(out / "train")
    assert torch.equal(again[3].images, train[3].images)
    # Until ingestion finishes, the destination is an incomplete tree, never a dataset.
    (out / "partial").mkdir()
    try:
        ImageFolderData.load_memmap(out / "partial")
    except (IncompleteTreeError, FileNotFoundError) as err:
        print("an unfinished tree is refused:", type(err).__name__)
    else:
        raise AssertionError("an empty folder loaded as a dataset")

    step("4. The tensorclass is a map-style dataset: DataLoader without a collate_fn")
    plain = DataLoader(train, batch_size=32, shuffle=True)
    batch = next(iter(plain))
    assert type(batch) is ImageFolderData and batch.images.shape == (32, 3, store, store)
    print("a DataLoader batch:", type(batch).__name__, tuple(batch.images.shape))

    step("5. Batched random transforms, on the device, reproducible with a generator")
    augment = Compose(RandomResizedCrop(crop), RandomHorizontalFlip(), Normalize.imagenet()).to(
        device
    )
    x = batch.images.to(device)
    g = torch.Generator().manual_seed(0)
    y = augment(x, generator=g)
    assert y.shape == (32, 3, crop, crop) and y.dtype == torch.float32
    assert torch.equal(y, augment(x, generator=torch.Generator().manual_seed(0)))
    print("one call transforms the whole batch:", tuple(y.shape), y.dtype, "on", y.device)

    step("6. BatchLoader: crop at read time, fused normalisation, reader threads")

    def make() -> BatchLoader:
        return BatchLoader(
            train,
            64,
            crop=crop,
            flip=True,
            normalize="imagenet",
            device=device,
            seed=0,
            num_threads=workers,
        )

    loader = make()
    first = next(iter(loader))
    assert first.images.shape == (64, 3, crop, crop) and first.images.dtype == torch.float32
    fast = rate(loader)
    print(
        f"BatchLoader ({workers} threads): {fast:,.0f} images/s, {fast / slow:.0f}x the per-image DataLoader"
    )
    val_loader = BatchLoader(
        val, 64, shuffle=False, normalize="imagenet", device=device, num_threads=workers
    )
    print(f"validation: {rate(val_loader):,.0f} images/s")

    step("7. A few training steps, and resuming mid-epoch with the same batches")
    model = nn.Sequential(
        nn.Conv2d(3, 8, 5, stride=4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, len(train.classes)),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    # Epoch 0, start to end. Batches you keep are never overwritten by later ones.
    uninterrupted = [b.targets for b in make()]
    loader = make()
    for i, b in enumerate(loader):
        loss = nn.functional.cross_entropy(model(b.images), b.targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i == 1:
            state = loader.state_dict()  # save this with the model's checkpoint
            break
    resumed = make()  # what a restarted job builds
    resumed.load_state_dict(state)
    rest = [b.targets for b in resumed]
    assert len(rest) == len(uninterrupted) - 2
    assert all(torch.equal(a, e) for a, e in zip(rest, uninterrupted[2:]))
    print(
        f"loss {loss.item():.3f}; resumed at epoch {state['epoch']}, batch {state['batch']}: same batches"
    )
    print("\ndone")


if __name__ == "__main__":
    main()
