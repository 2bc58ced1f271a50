"""The per-image pipeline that tensorbox's loader is measured against.

This is what ``torchvision.datasets.ImageFolder`` with the usual ImageNet transforms
does, one image at a time in ``DataLoader`` workers:

- train: ``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``, ``ToTensor()``, ``Normalize``;
- val: ``Resize(256)``, ``CenterCrop(224)``, ``ToTensor()``, ``Normalize``;
- ingest (the tensordict tutorial's): ``Resize((256, 256))``, ``PILToTensor()``;
- val_ingest: ``Resize(256)``, ``CenterCrop(224)``, ``PILToTensor()``.

When torchvision imports, ``reference_transform`` returns torchvision's own transforms
and ``image_folder_dataset`` its ``ImageFolder``; otherwise the Pillow-based equivalents
below, which do the same operations in the same order (same PIL filters, same crop-box
sampling, same float conversion), so the timing and the pixels are what torchvision
would give.

>>> import tempfile, pathlib
>>> from tensorbox.data import make_image_folder
>>> root = make_image_folder(tempfile.mkdtemp(), num_images=4, num_classes=2,
...                          min_size=40, max_size=60, num_workers=0)
>>> ds = ImageFolderDataset(root, reference_transform("val", size=16, resize=20))
>>> image, target = ds[3]
>>> tuple(image.shape), image.dtype, target
((3, 16, 16), torch.float32, 1)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from tensorbox.data import scan_image_folder
from tensorbox.data.transforms import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageFolderDataset",
    "image_folder_dataset",
    "reference_transform",
    "sample_resized_crop_box",
    "torchvision_available",
]


def pil_loader(path: str) -> Image.Image:
    """Open and decode fully to RGB (torchvision's ``default_loader`` with Pillow)."""
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


class ImageFolderDataset(torch.utils.data.Dataset):
    """``root/<class>/<image>`` as ``(transform(image), class_id)`` pairs, one file per item."""

    def __init__(self, root: str | os.PathLike, transform: Callable | None = None) -> None:
        index = scan_image_folder(root)
        self.classes = index.classes
        self.samples = list(zip(index.paths, index.targets))
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        path, target = self.samples[i]
        img = pil_loader(path)
        return (self.transform(img) if self.transform else img), target


def torchvision_available() -> bool:
    """True when torchvision imports (then its own dataset and transforms are used)."""
    try:
        import torchvision  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


def image_folder_dataset(root: str | os.PathLike, transform: Callable | None = None) -> Any:
    """torchvision's ``ImageFolder`` when it imports, else :class:`ImageFolderDataset`."""
    if torchvision_available():
        from torchvision.datasets import ImageFolder  # type: ignore[import-not-found]

        return ImageFolder(str(root), transform=transform)
    return ImageFolderDataset(root, transform)


def sample_resized_crop_box(
    height: int,
    width: int,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    generator: torch.Generator | None = None,
) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params``: ``(top, left, h, w)`` of one box.

    Up to 10 tries of (area fraction uniform in ``scale``, log-uniform aspect ratio),
    keeping the first box that fits; else the centre crop with the ratio clamped.
    """
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=generator).item()
        aspect = math.exp(torch.empty(1).uniform_(log_lo, log_hi, generator=generator).item())
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, (1,), generator=generator).item())
            left = int(torch.randint(0, width - w + 1, (1,), generator=generator).item())
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


class _RandomResizedCrop:
    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, img: Image.Image) -> Image.Image:
        top, left, h, w = sample_resized_crop_box(img.height, img.width)
        box = (left, top, left + w, top + h)
        return img.crop(box).resize((self.size, self.size), Image.Resampling.BILINEAR)


class _RandomHorizontalFlip:
    def __call__(self, img: Image.Image) -> Image.Image:
        if torch.rand(1).item() < 0.5:
            return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return img


class _Resize:
    """``Resize(int)`` (shorter side, torchvision rounding) or ``Resize((h, w))`` (squash)."""

    def __init__(self, size: int | tuple[int, int]) -> None:
        self.size = size

    def __call__(self, img: Image.Image) -> Image.Image:
        if isinstance(self.size, int):
            w, h = img.size
            short, long = (w, h) if w <= h else (h, w)
            new_long = int(self.size * long / short)
            new = (self.size, new_long) if w <= h else (new_long, self.size)
        else:
            new = (self.size[1], self.size[0])
        return img.resize(new, Image.Resampling.BILINEAR)


class _CenterCrop:
    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, img: Image.Image) -> Image.Image:
        top = round((img.height - self.size) / 2.0)
        left = round((img.width - self.size) / 2.0)
        return img.crop((left, top, left + self.size, top + self.size))


class _PILToTensor:
    def __call__(self, img: Image.Image) -> torch.Tensor:
        # Like torchvision: a permuted view of the HWC array (collate makes it contiguous).
        arr = torch.from_numpy(np.array(img, np.uint8, copy=True))
        return arr.view(img.height, img.width, -1).permute(2, 0, 1)


class _ToTensor:
    def __call__(self, img: Image.Image) -> torch.Tensor:
        return _PILToTensor()(img).contiguous().to(torch.float32).div(255)


class _Normalize:
    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone().sub_(self.mean).div_(self.std)


class _Compose:
    def __init__(self, steps: list[Callable]) -> None:
        self.steps = steps

    def __call__(self, x: Any) -> Any:
        for step in self.steps:
            x = step(x)
        return x


def reference_transform(kind: str, *, size: int = 224, resize: int = 256) -> Callable:
    """The per-image transform for ``kind`` (see the module docstring for the four kinds).

    torchvision's when it imports, else the Pillow equivalents of this module.
    """
    try:
        from torchvision import transforms as tv  # type: ignore[import-not-found]
    except ImportError:
        tv = None
    if kind == "train":
        if tv is not None:
            steps = [tv.RandomResizedCrop(size), tv.RandomHorizontalFlip(), tv.ToTensor()]
            return tv.Compose([*steps, tv.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
        steps = [_RandomResizedCrop(size), _RandomHorizontalFlip(), _ToTensor()]
        return _Compose([*steps, _Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    if kind == "val":
        if tv is not None:
            steps = [tv.Resize(resize), tv.CenterCrop(size), tv.ToTensor()]
            return tv.Compose([*steps, tv.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
        steps = [_Resize(resize), _CenterCrop(size), _ToTensor()]
        return _Compose([*steps, _Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    if kind == "ingest":
        if tv is not None:
            return tv.Compose([tv.Resize((resize, resize)), tv.PILToTensor()])
        return _Compose([_Resize((resize, resize)), _PILToTensor()])
    if kind == "val_ingest":
        if tv is not None:
            return tv.Compose([tv.Resize(resize), tv.CenterCrop(size), tv.PILToTensor()])
        return _Compose([_Resize(resize), _CenterCrop(size), _PILToTensor()])
    raise ValueError(f"kind must be 'train', 'val', 'ingest' or 'val_ingest', got {kind!r}")
