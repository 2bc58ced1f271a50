"""Tutorial: train on JPEGs with fresh random augmentation every epoch, made ahead of time.

Augmentation is random, so it has to be redone every epoch, and decoding plus cropping
JPEGs is often slower than the training step. An ``AugmentBuffer`` runs producer
processes that decode and augment samples and write finished batches into slots in
shared memory (``/dev/shm``); the training loop reads them without copies and, as long
as the producers keep up, without waiting.

The flow, step by step:

1. a folder of JPEGs (synthetic here, cached under ``$TENSORBOX_CACHE``);
2. a dataset and a per-sample augmentation, defined at module level: producers are
   separate processes, so both are sent to them by pickling;
3. the buffer: how many producers, how much memory, which seed;
4. the training loop: batches arrive as views of their slots; ``stats()`` tells whether
   the producers keep up;
5. checkpoint and resume: ``state_dict()`` / ``load_state_dict()`` continue at the same
   (epoch, batch) with exactly the same augmented batches;
6. cleanup: leaving the ``with`` block stops the producers and deletes the slot files.

Run ``python tutorials/augment_buffer.py --small`` (under a minute, what CI runs) or
without ``--small`` for a larger run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorbox.buffer import AugmentBuffer
from tensorbox.data import make_image_folder, scan_image_folder
from tensorbox.data.transforms import Normalize, RandomHorizontalFlip, RandomResizedCrop

# --------------------------------------------------------------------------- step 2
# Module level, so that producer processes can import them (the script is imported
# again in each producer, which is why everything that runs is under __main__ below).


class JpegFolder:
    """``dataset[i]`` -> ``{"image": uint8 [3, H, W], "label": int}``, decoded on demand."""

    def __init__(self, root: str | Path) -> None:
        index = scan_image_folder(root)
        self.paths, self.targets, self.classes = index.paths, index.targets, index.classes

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict[str, Any]:
        with Image.open(self.paths[i]) as img:
            pixels = np.array(img.convert("RGB"))  # a writable HWC copy
        return {"image": torch.from_numpy(pixels).permute(2, 0, 1), "label": self.targets[i]}


class TrainAugment:
    """Random resized crop, horizontal flip, ImageNet normalisation; one image at a time.

    ``generator`` is seeded per sample by the buffer from (seed, epoch, index): draw
    every random number from it and the batches are reproducible, whatever the number
    of producers. ``out`` is the slot row the result will be stored in: normalising
    straight into it saves a copy (it is None once, when the buffer learns the layout).
    """

    def __init__(self, size: int) -> None:
        self.crop = RandomResizedCrop(size, scale=(0.25, 1.0))
        self.flip = RandomHorizontalFlip()
        self.normalize = Normalize.imagenet()

    def __call__(self, sample: dict[str, Any], generator: torch.Generator, out: Any = None):
        x = sample["image"].unsqueeze(0)  # the transforms work on batches: a batch of one
        x = self.flip(self.crop(x, generator), generator)
        dest = None if out is None else out["image"].unsqueeze(0)
        return {"image": self.normalize(x, out=dest)[0], "label": sample["label"]}


def make_model(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    )


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description="AugmentBuffer tutorial")
    parser.add_argument("--small", action="store_true", help="tiny data, under a minute")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the producers get the other cores
    if args.small:
        images, lo, hi, crop, batch_size, epochs = 96, 64, 128, 48, 16, 2
    else:
        images, lo, hi, crop, batch_size, epochs = 1200, 300, 500, 112, 32, 3

    # Step 1: the images. make_image_folder caches: a second run finds them.
    cache = Path(os.environ.get("TENSORBOX_CACHE") or Path.home() / ".cache" / "tensorbox")
    root = make_image_folder(
        cache / f"tutorial-jpeg-{images}-{lo}-{hi}", num_images=images, num_classes=4,
        min_size=lo, max_size=hi,
    )  # fmt: skip
    dataset = JpegFolder(root)
    print(f"{len(dataset)} images in {len(dataset.classes)} classes under {root}")

    # Step 3: the buffer. Capacity in bytes (or `capacity=` in batches); the slots are
    # allocated now, so a buffer too big for /dev/shm fails here with a clear message.
    # The first sample is made here to learn the layout of a slot.
    buf = AugmentBuffer(
        dataset, TrainAugment(crop), batch_size=batch_size, num_workers=2,
        capacity_bytes="64MiB", seed=1234, num_epochs=epochs + 1,
    )  # fmt: skip
    print(f"{buf.capacity} slots of {buf.stats().slot_bytes / 2**20:.1f} MiB in {buf.dir}")
    model = make_model(len(dataset.classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    # Step 4: train. `with` guarantees cleanup, even on an exception or Ctrl-C.
    with buf:
        buf.start()  # producers start filling the buffer while we do other work
        checkpoint = None
        for epoch in range(epochs):
            t0 = time.perf_counter()
            for batch in buf:  # the rest of the current epoch, in a fixed order
                loss = nn.functional.cross_entropy(model(batch["image"]), batch["label"])
                opt.zero_grad()
                loss.backward()
                opt.step()
                if epoch == epochs - 1 and buf.batch == 2:  # mid-epoch checkpoint
                    checkpoint = {"model": model.state_dict(), "data": buf.state_dict()}
            s = buf.stats()
            print(
                f"epoch {epoch}: {time.perf_counter() - t0:.2f} s, loss {loss.item():.3f}, "
                f"waited {s.wait_s:.2f} s for batches in total ({s.first_wait_s:.2f} s at "
                f"start-up), producers {s.producer_rate:.1f} batches/s"
            )
        print(s)
        # The next epoch is already being made: the producers never stop at boundaries.
        reference = [b["image"].clone() for b in buf]  # epoch `epochs`, kept for step 5
        folder = buf.dir

    # Step 6: the producers are stopped and the slot folder is gone.
    assert folder is not None and not os.path.exists(folder)
    print("cleanup: slot folder removed")

    # Step 5: resume from the mid-epoch checkpoint in a new buffer, with ONE producer:
    # the same batches come back, because every random draw depends only on
    # (seed, epoch, sample index).
    assert checkpoint is not None
    model.load_state_dict(checkpoint["model"])
    with AugmentBuffer(
        dataset, TrainAugment(crop), batch_size=batch_size, num_workers=1,
        capacity_bytes="64MiB", seed=1234, num_epochs=epochs + 1,
    ) as again:  # fmt: skip
        again.load_state_dict(checkpoint["data"])
        print(f"resumed at epoch {again.epoch} batch {again.batch}")
        for _ in again:  # finish the interrupted epoch
            pass
        replay = [b["image"].clone() for b in again]
    same = len(replay) == len(reference) and all(map(torch.equal, replay, reference))
    print(f"resumed run reproduces the original batches: {same}")
    assert same


if __name__ == "__main__":
    main()
