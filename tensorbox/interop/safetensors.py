"""``.safetensors`` files: read by mapping the file once (every tensor a zero-copy view),
written by tensorbox itself (``safetensors`` is only the tests' oracle).

Reading goes through the storage seam: the file is a read-only store
(:mod:`~tensorbox.interop._safetensors_store`) whose header, checked like ``meta.json``
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

import json
import os
import struct
from typing import Any

import torch
from torch import Tensor

from tensorbox.errors import KeyCollisionError
from tensorbox.interop._safetensors_format import CODES, nest, read_header

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
    The file is read as a store on the storage seam
    (:class:`~tensorbox.interop._safetensors_store.SafetensorsStore`), by the loader that
    reads saved trees.

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
    from tensorbox.interop._safetensors_store import SafetensorsStore

    store = SafetensorsStore(path, keys=keys, prefix=prefix, nested=nested)
    dev = None if device is None else torch.device(device)
    td = load_from(store, "", cls, dev, lock=False)
    if batch_size is not None:
        td.batch_size = batch_size
    return td


def to_safetensors(td: Any, path: Any, *, metadata: dict[str, str] | None = None) -> None:
    """Write the tensor leaves of ``td`` as a ``.safetensors`` file, nested keys joined by
    ``.``. Non-tensor entries are refused (the format holds tensors only). Written under
    a temporary name and renamed into place."""
    from tensorbox.interop.arrow import _raw_leaves
    from tensorbox.interop.files import _atomic

    name = os.fspath(path)
    tensors: list[tuple[str, Tensor]] = []
    seen: set[str] = set()
    for key_path, value in _raw_leaves(td):
        key = ".".join(key_path)
        if not isinstance(value, Tensor):
            raise TypeError(
                f"to_safetensors({name!r}): entry {key!r} is a {type(value).__name__}; the "
                "format holds tensors only (drop it: td.exclude(...))"
            )
        if value.dtype not in CODES:
            raise TypeError(f"to_safetensors({name!r}): entry {key!r} has dtype {value.dtype}")
        if value.is_nested or value.layout is not torch.strided:
            raise TypeError(f"to_safetensors({name!r}): entry {key!r} is not a dense tensor")
        if key in seen:
            raise KeyCollisionError(
                f"to_safetensors({name!r}): two entries are both named {key!r} once their "
                "keys are joined with '.'; rename one"
            )
        seen.add(key)
        tensors.append((key, value.detach().cpu().contiguous()))
    nest([k for k, _ in tensors], f"to_safetensors({name!r})")
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for key, t in tensors:
        nbytes = t.numel() * t.element_size()
        header[key] = {
            "dtype": CODES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    with _atomic(name, ".safetensors") as target, open(target, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, t in tensors:
            if t.numel():
                f.write(t.reshape(-1).view(torch.uint8).numpy().data)  # no copy
