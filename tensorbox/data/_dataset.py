"""``ImageFolderData``: the tensorclass an ingested image folder is stored as.

``images`` is uint8 ``[N, 3, H, W]``, ``targets`` int64 ``[N]`` (class ids, in the order
of ``classes``), ``classes`` the class names (a plain list, stored in ``meta.json``).
Being a tensorclass, it is a map-style dataset as it stands (``len``, ``__getitem__``,
``__getitems__``), memory-mapped or not, and a ``BatchLoader`` source.

>>> import torch
>>> data = ImageFolderData(images=torch.zeros(4, 3, 8, 8, dtype=torch.uint8),
...                        targets=torch.tensor([0, 1, 1, 0]), classes=["cat", "dog"],
...                        batch_size=[4])
>>> data[1:3].targets.tolist(), data.classes
([1, 1], ['cat', 'dog'])
"""

from __future__ import annotations

from typing import Any

import torch

from tensorbox import TensorClass

__all__ = ["ImageFolderData"]


class ImageFolderData(TensorClass):
    """Images and class ids of an image folder (see the module docstring).

    >>> import torch; from tensorbox import ImageFolderData
    >>> data = ImageFolderData(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.tensor([0, 1]),
    ...                        ["cat", "dog"], batch_size=[2])
    >>> data[1].targets.item(), data.classes
    (1, ['cat', 'dog'])
    """

    images: torch.Tensor
    targets: torch.Tensor
    classes: list[Any]
