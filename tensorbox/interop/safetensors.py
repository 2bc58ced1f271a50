"""``.safetensors`` files: read by mapping the file once (every tensor a zero-copy view),
written by tensorbox itself (``safetensors`` is only the tests' oracle), both ways through
the storage seam.

Reading goes through the storage seam: the file is a read-only store
(:mod:`~tensorbox.interop._safetensors_layout`) whose header, checked like ``meta.json``
(:mod:`~tensorbox.interop._safetensors_format`), describes the nodes; the loader that
reads saved trees builds the container, so ``load_memmap``, ``show`` and ``verify`` take
a ``.safetensors`` file too. Keys are split on ``.`` into nested keys, so a Hugging Face
checkpoint reads as the module tree it came from.

The mapping is private (copy-on-write): writing into a loaded tensor changes this
process's copy only, never the file.

>>> import os, tempfile, torch; from tensorbox import TensorDict
>>> with tempfile.TemporaryDirectory() as d:
...     f = os.path.join(d, "w.safetensors")
...     to_safetensors(TensorDict({"layer": {"weight": torch.ones(2, 2)}}), f)
...     td = from_safetensors(f)
...     td["layer", "weight"].sum().item(), list(td.keys(True, True))
(4.0, [('layer', 'weight')])
"""

from __future__ import annotations

from typing import Any

import torch

from tensorbox.interop._safetensors_format import read_header

__all__ = ["from_safetensors", "read_header", "to_safetensors"]


def from_safetensors(
    path: Any,
    *,
    keys: Any = None,
    prefix: str | None = None,
    batch_size: Any = None,
    device: Any = None,
    nested: bool = True,
    cls: Any = None,
) -> Any:
    """The tensors of a ``.safetensors`` file as a container, ``.`` keys nested.

    The file is mapped once and each tensor is a view of the mapping: nothing is read
    until a tensor is used, so loading one layer of a large checkpoint reads that layer.
    The file is read by the same loader as saved trees.

    Args:
        path: the file.
        keys: load only these (dotted) keys.
        prefix: load only the keys under this dotted prefix (``"encoder.layer.0"``),
            with the prefix removed.
        batch_size: default ``[]``.
        device: copy the tensors there.
        nested: ``False`` keeps the dotted names as flat keys.
        cls: the container class (TensorDict or a tensorclass).
    """
    from tensorbox._storage.api import load_from
    from tensorbox.interop._safetensors_layout import SafetensorsStore

    store = SafetensorsStore(path, keys=keys, prefix=prefix, nested=nested)
    dev = None if device is None else torch.device(device)
    td = load_from(store, "", cls, dev, lock=False)
    if batch_size is not None:
        td.batch_size = batch_size
    return td


def to_safetensors(td: Any, path: Any, *, metadata: dict[str, str] | None = None) -> None:
    """Write the tensor leaves of ``td`` as a ``.safetensors`` file, nested keys joined by
    ``.``. Non-tensor entries are refused (the format holds tensors only).

    A save through the storage seam: the one saver walks ``td`` and the file's own
    writer writes it under a temporary name, renamed into place once complete.
    ``metadata``: the header's ``__metadata__`` strings.
    """
    from tensorbox._storage.save import Saver
    from tensorbox.interop._safetensors_layout import SafetensorsStore

    store = SafetensorsStore(path, mode="w")
    Saver(store, "copy", True, False, metadata=metadata).run(td, 0)
