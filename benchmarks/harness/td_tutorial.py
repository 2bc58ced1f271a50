"""The tensordict ImageNet tutorial's pipeline, rebuilt on tensordict's own API for comparison.

tensordict's tutorial ("Batched data loading with tensorclasses") does, per dataset:

1. ingestion: ``ImageFolder`` with ``Resize((256, 256))`` + ``PILToTensor()`` (train) or
   ``Resize(256)`` + ``CenterCrop(224)`` + ``PILToTensor()`` (val), read through a
   ``DataLoader(batch_size=64, num_workers=W)``, each batch written into a memory-mapped
   tensorclass with ``data[i : i + b] = ImageNetData(images=..., targets=...)``;
2. training reads: ``DataLoader(data, batch_size=B, collate_fn=Collate(transform))``, the
   tensorclass's ``__getitems__`` fetching whole batches, then the tutorial's batched
   transforms: ``(x - 255 mean) / (255 std)`` on the whole 256x256 float batch, a
   per-sample random 224 crop by two ``gather`` calls, and a per-sample flip as
   ``x.masked_fill(m, 0) + x.masked_fill(~m, 0).flip(-1)``.

Three deliberate differences from the tutorial's text, each making the baseline
*faster* or fairer: the tree is preallocated on disk with tensordict's
``memmap_like`` (the tutorial's ``MemoryMappedTensor.empty`` without a file name lives
in anonymous memory and is gone at exit, which is not a dataset); the val set is stored
as uint8 ``PILToTensor`` output and normalised when read (the tutorial stores
normalised floats into a uint8 tensor, which truncates them); batches are shuffled,
as in training (the tutorial reads in file order).

Requires ``tensordict``; ``available()`` says whether it imports.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from .reference import IMAGENET_MEAN, IMAGENET_STD, image_folder_dataset, reference_transform

__all__ = ["available", "tutorial_ingest", "tutorial_loader"]

try:
    from tensordict import tensorclass as _td_tensorclass
except ImportError:  # the comparison is optional
    _td_tensorclass = None


def available() -> bool:
    """True when tensordict imports (the tutorial path can run)."""
    return _td_tensorclass is not None


if _td_tensorclass is not None:

    @_td_tensorclass
    class TutorialImageData:
        """The tutorial's ``ImageNetData``: images and targets."""

        images: torch.Tensor
        targets: torch.Tensor


class _InvAffine(nn.Module):
    """The tutorial's normalisation: ``(x - loc) / scale`` on the whole float batch."""

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.loc, self.scale = loc, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.loc) / self.scale


class _GatherCrop(nn.Module):
    """The tutorial's random crop: per-sample offsets, rows then columns by ``gather``."""

    def __init__(self, h: int, w: int) -> None:
        super().__init__()
        self.h, self.w = h, w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead, c, hh, ww = x.shape[:-3], x.shape[-3], x.shape[-2], x.shape[-1]
        dev = x.device
        rows = torch.randint(hh - self.h, (*lead, 1), device=dev) + torch.arange(self.h, device=dev)
        rows = rows[..., None, :, None].expand(*lead, c, self.h, ww)
        cols = torch.randint(ww - self.w, (*lead, 1), device=dev) + torch.arange(self.w, device=dev)
        cols = cols[..., None, None, :].expand(*lead, c, self.h, self.w)
        return x.gather(-2, rows).gather(-1, cols)


class _MaskedFlip(nn.Module):
    """The tutorial's flip: a Bernoulli mask per sample, two masked fills and a flip."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(*x.shape[:-3], 1, 1, 1, dtype=torch.bool, device=x.device)
        mask = mask.bernoulli_().expand_as(x)
        return x.masked_fill(mask, 0.0) + x.masked_fill(~mask, 0.0).flip(-1)


class _Collate(nn.Module):
    """The tutorial's ``collate_fn``: pin, move, then transform the images."""

    def __init__(self, transform: nn.Module | None, device: torch.device) -> None:
        super().__init__()
        self.transform = transform
        self.device = device

    def __call__(self, batch: Any) -> Any:
        out = batch.pin_memory() if self.device.type == "cuda" else batch
        out = out.to(self.device)
        if self.transform is not None:
            out.images = self.transform(out.images)
        return out


def _normalize(device: torch.device) -> nn.Module:
    mean = torch.tensor(IMAGENET_MEAN, device=device).view(3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD, device=device).view(3, 1, 1) * 255
    return _InvAffine(mean, std)


def tutorial_ingest(
    root: str | os.PathLike,
    prefix: str | os.PathLike,
    *,
    kind: str = "train",
    num_workers: int = 2,
    batch_size: int = 64,
    size: int = 224,
    resize: int = 256,
) -> Any:
    """Step 1 of the tutorial: ingest ``root`` into a memory-mapped ``TutorialImageData``."""
    if not available():
        raise ImportError("the tensordict tutorial path needs tensordict: pip install tensordict")
    ingest_kind = "ingest" if kind == "train" else "val_ingest"
    dataset = image_folder_dataset(root, reference_transform(ingest_kind, size=size, resize=resize))
    n = len(dataset)
    shape = (resize, resize) if kind == "train" else (size, size)
    proto = TutorialImageData(
        images=torch.empty((), dtype=torch.uint8).expand(n, 3, *shape),
        targets=torch.empty((), dtype=torch.int64).expand(n),
        batch_size=[n],
    )
    data = proto.memmap_like(str(prefix))
    i = 0
    for images, targets in DataLoader(dataset, batch_size=batch_size, num_workers=num_workers):
        b = images.shape[0]
        data[i : i + b] = TutorialImageData(images=images, targets=targets, batch_size=[b])
        i += b
    return data


def tutorial_loader(
    data: Any,
    *,
    kind: str = "train",
    batch_size: int = 64,
    num_workers: int = 0,
    crop: int = 224,
    device: str | torch.device = "cpu",
) -> DataLoader:
    """Step 2: the tutorial's batched ``DataLoader`` over the ingested tensorclass.

    ``kind="train"``: normalise, random crop, flip (the tutorial's order); ``"val"``:
    normalise only (images were centre-cropped at ingestion).
    """
    dev = torch.device(device)
    if kind == "train":
        transform: nn.Module = nn.Sequential(
            _normalize(dev), _GatherCrop(crop, crop), _MaskedFlip()
        )
    else:
        transform = _normalize(dev)
    return DataLoader(
        data,
        batch_size=batch_size,
        shuffle=kind == "train",
        num_workers=num_workers,
        collate_fn=_Collate(transform, dev),
    )
