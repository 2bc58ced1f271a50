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

from typing import TYPE_CHECKING

from tensorbox import _face

# The public names, each listed once (``tensorbox/_face.py``).
if TYPE_CHECKING:
    from tensorbox.data import transforms as transforms
    from tensorbox.data._dataset import ImageFolderData as ImageFolderData
    from tensorbox.data._folder import FolderIndex as FolderIndex
    from tensorbox.data._folder import scan_image_folder as scan_image_folder
    from tensorbox.data._ingest import ImageReadError as ImageReadError
    from tensorbox.data._ingest import ingest_image_folder as ingest_image_folder
    from tensorbox.data._loader import BatchLoader as BatchLoader
    from tensorbox.data._synth import make_image_folder as make_image_folder
    from tensorbox.data.transforms import BatchTransform as BatchTransform
    from tensorbox.data.transforms import CenterCrop as CenterCrop
    from tensorbox.data.transforms import ColorJitter as ColorJitter
    from tensorbox.data.transforms import Compose as Compose
    from tensorbox.data.transforms import Normalize as Normalize
    from tensorbox.data.transforms import RandomCrop as RandomCrop
    from tensorbox.data.transforms import RandomHorizontalFlip as RandomHorizontalFlip
    from tensorbox.data.transforms import RandomResizedCrop as RandomResizedCrop


def _need_pillow(name: str, err: ImportError) -> ImportError:
    return ImportError(
        f"tensorbox.data.{name} needs Pillow ({err}); install it with "
        "`pip install tensorbox[images]` or `pip install pillow`"
    )


# Ingestion and the synthetic folder need Pillow, an optional dependency: they load on
# first use, so that the loader and the transforms work without it.
__getattr__, __dir__, __all__ = _face.attach(
    __name__, __file__, lazy=("tensorbox.data._ingest", "tensorbox.data._synth"), hint=_need_pillow
)
