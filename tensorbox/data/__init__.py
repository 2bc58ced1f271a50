"""Datasets and loaders for image training: ingestion, batched transforms, a fast loader.

- A ``TensorDict`` or tensorclass (memory-mapped or not) is a map-style dataset for
  torch's ``DataLoader`` as it stands: one batched fetch per batch, batches of your class.
- ``ingest_image_folder(root, dest, 256)`` turns ``root/<class>/<image>`` into a
  memory-mapped ``ImageFolderData`` (uint8 ``images``, int64 ``targets``, ``classes``),
  decoding in parallel processes straight into the files; resumable; bad files are
  reported by path (needs Pillow: ``pip install tensorbox[images]``).
- ``transforms``: ``nn.Module``s acting on whole batches on any device, reproducible
  with a ``torch.Generator``: ``Normalize``, ``RandomCrop``, ``CenterCrop``,
  ``RandomHorizontalFlip``, ``RandomResizedCrop``, ``ColorJitter``, ``Compose``.
- ``BatchLoader``: batches of a memory-mapped dataset, read by background threads into
  recycled buffers, cropped/flipped/normalised while read, resumable mid-epoch; under
  ``torch.distributed`` each rank reads its own share (``tensorbox.data.sharding``).
- ``make_image_folder(root, ...)``: a deterministic synthetic ``root/<class>/<image>``
  folder of photo-like JPEGs (and a few PNGs), for examples, tests and benchmarks.

>>> import torch
>>> from tensorbox.data import BatchLoader, ImageFolderData
>>> data = ImageFolderData(images=torch.zeros(10, 3, 8, 8, dtype=torch.uint8),
...                        targets=torch.arange(10), classes=["a"], batch_size=[10])
>>> batch = next(iter(BatchLoader(data, batch_size=4, crop=6, normalize="imagenet", seed=0)))
>>> type(batch).__name__, tuple(batch.images.shape), batch.images.dtype
('ImageFolderData', (4, 3, 6, 6), torch.float32)

See ``docs/data.md`` for a walk-through, and ``make demo`` (``benchmarks/demo.py`` in a
checkout) for the numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorbox.data import transforms
from tensorbox.data._dataset import ImageFolderData
from tensorbox.data._folder import FolderIndex, scan_image_folder
from tensorbox.data._loader import BatchLoader
from tensorbox.data.transforms import (
    BatchTransform,
    CenterCrop,
    ColorJitter,
    Compose,
    Normalize,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
)

if TYPE_CHECKING:
    from tensorbox.data._ingest import ImageReadError, ingest_image_folder
    from tensorbox.data._synth import make_image_folder

__all__ = [
    "BatchLoader",
    "BatchTransform",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "FolderIndex",
    "ImageFolderData",
    "ImageReadError",
    "Normalize",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "ingest_image_folder",
    "make_image_folder",
    "scan_image_folder",
    "transforms",
]

# These need Pillow, an optional dependency: imported on first use, so that the loader
# and the transforms work without it.
_NEED_PILLOW = {
    "ImageReadError": "_ingest",
    "ingest_image_folder": "_ingest",
    "make_image_folder": "_synth",
}


def __getattr__(name: str) -> Any:
    module = _NEED_PILLOW.get(name)
    if module is None:
        raise AttributeError(f"module 'tensorbox.data' has no attribute {name!r}")
    try:
        from importlib import import_module

        value = getattr(import_module(f"{__name__}.{module}"), name)
    except ImportError as err:
        raise ImportError(
            f"tensorbox.data.{name} needs Pillow ({err}); install it with "
            "`pip install tensorbox[images]` or `pip install pillow`"
        ) from err
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
