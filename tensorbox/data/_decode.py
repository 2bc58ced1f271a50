"""Decode one image file to a fixed-size uint8 ``[3, H, W]`` array (the ingestion worker's job).

Two geometries, matching the torchvision transforms people use before saving a dataset:

- ``ResizeSpec((H, W))``: squash to ``H x W`` (``transforms.Resize((H, W))``, the
  tensordict ImageNet tutorial's ingestion);
- ``ResizeSpec((H, W), shorter_side=S)``: resize so the shorter side is ``S``, keeping the
  aspect ratio, then take the centre ``H x W`` (``Resize(S)`` + ``CenterCrop((H, W))``,
  the usual validation transform).

Resizing is Pillow's bilinear filter (antialiased when shrinking), exactly what
torchvision does on a PIL image, so a PNG gives byte-identical rows. A JPEG much larger
than its target is decoded at reduced scale (``Image.draft``: libjpeg scales the DCT by
1/2, 1/4 or 1/8 while decoding, never below the target size), which skips most of the
decoding work and changes pixels by about JPEG's own decoding tolerance (see
``tests/data/test_data_ingest.py`` for the measured bound).

>>> import tempfile, os
>>> from PIL import Image
>>> path = os.path.join(tempfile.mkdtemp(), "a.png")
>>> Image.new("RGB", (40, 30), (10, 20, 30)).save(path)
>>> row = decode_image(path, ResizeSpec((16, 16), shorter_side=20))
>>> row.shape, row.dtype, row[:, 0, 0].tolist()
((3, 16, 16), dtype('uint8'), [10, 20, 30])
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from PIL import Image

__all__ = ["ResizeSpec", "decode_image", "decode_into", "pil_geometry"]


@dataclass(frozen=True)
class ResizeSpec:
    """Output ``size=(H, W)``; ``shorter_side=None`` squashes, an int resizes then centre-crops."""

    size: tuple[int, int]
    shorter_side: int | None = None
    draft: bool = True

    def __post_init__(self) -> None:
        h, w = self.size
        if h < 1 or w < 1:
            raise ValueError(f"size must be positive (H, W), got {self.size!r}")
        if self.shorter_side is not None and self.shorter_side < max(h, w):
            raise ValueError(
                f"shorter_side={self.shorter_side!r} is smaller than the crop size {self.size!r}; "
                "the centre crop would not fit. Use shorter_side >= max(size)"
            )


def _resized_size(width: int, height: int, spec: ResizeSpec) -> tuple[int, int]:
    """(width, height) after the resize step, with torchvision's rounding for ``Resize(int)``."""
    if spec.shorter_side is None:
        return spec.size[1], spec.size[0]
    s = spec.shorter_side
    if width <= height:
        return s, int(s * height / width)
    return int(s * width / height), s


def pil_geometry(img: Image.Image, spec: ResizeSpec) -> Image.Image:
    """Resize (and centre-crop) a decoded PIL image as ``spec`` says; returns a PIL image."""
    new_w, new_h = _resized_size(img.width, img.height, spec)
    if img.size != (new_w, new_h):
        img = img.resize((new_w, new_h), Image.Resampling.BILINEAR)
    h, w = spec.size
    if (new_h, new_w) != (h, w):
        # torchvision's centre crop: offsets rounded half to even, as Python's round().
        top = round((new_h - h) / 2.0)
        left = round((new_w - w) / 2.0)
        img = img.crop((left, top, left + w, top + h))
    return img


def _open_rgb(path: str | os.PathLike[str], spec: ResizeSpec) -> Image.Image:
    with Image.open(path) as img:
        if spec.draft and img.format == "JPEG":
            new_w, new_h = _resized_size(img.width, img.height, spec)
            # draft() only ever reduces by a power of two that keeps both sides >= the
            # request, so the later bilinear resize still shrinks (never enlarges).
            img.draft("RGB", (new_w, new_h))
        # load() forces the full decode; a truncated or corrupt file raises here.
        img.load()
        return img if img.mode == "RGB" else img.convert("RGB")


def decode_image(path: str | os.PathLike[str], spec: ResizeSpec) -> np.ndarray:
    """Decode ``path`` to a new ``[3, H, W]`` uint8 array."""
    out = np.empty((3, *spec.size), np.uint8)
    decode_into(path, spec, out)
    return out


def decode_into(path: str | os.PathLike[str], spec: ResizeSpec, out: np.ndarray) -> None:
    """Decode ``path`` into ``out`` (a ``[3, H, W]`` uint8 view, e.g. a memmap row).

    Raises whatever Pillow raises for an unreadable file (``OSError``,
    ``PIL.UnidentifiedImageError``, ``ValueError``...); the caller reports it by path.
    """
    img = pil_geometry(_open_rgb(path, spec), spec)
    # HWC -> CHW in one numpy copy straight into the destination row.
    np.copyto(out, np.asarray(img).transpose(2, 0, 1))
