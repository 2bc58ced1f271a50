"""tensordict's ``make_memmap`` family: one new memory-mapped entry added to a
memory-mapped container, even while it is locked.

On a tree-backed container (``memmap(path)``, ``load_memmap(path)``) the entry is set
through the write-through gates, so it is committed to the tree at once and mapped
back from its new file (``make_memmap``'s, and ``make_memmap_from_tensor(...,
copy_data=False)``'s, a sparse file of zeros, as ``memmap_like``'s): the returned tensor *is* the container's leaf, and writes into
it reach the file. On a container memory-mapped without a path (``memmap()``) the entry
is a tensor in anonymous shared memory. Anything else refuses the call: there is no
storage the entry could be made in.

>>> import tempfile, torch
>>> from tensorbox import TensorDict
>>> with tempfile.TemporaryDirectory() as d:
...     td = TensorDict(a=torch.zeros(3), batch_size=[3]).memmap(d)
...     x = td.make_memmap(("nested", "b"), (3, 4))
...     _ = x.fill_(1.0)                            # into the file
...     td.is_locked, TensorDict.load_memmap(d)["nested", "b"].sum().item()
(True, 12.0)
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

from tensorbox._core.backing import TREES
from tensorbox._core.nestedkey import format_key, unravel_key
from tensorbox._storage.format.names import encode_key
from tensorbox._storage.format.spec import SUFFIX
from tensorbox._storage.memmap_args import shape_from
from tensorbox._storage.memmap_tensor import MemoryMappedTensor, _on_storage, shared_copy

__all__ = ["make_from_storage", "make_from_tensor", "make_new"]


def _backed(node: Any) -> bool:
    return bool(TREES) and id(node) in TREES


def _check(node: Any, method: str, key: Any) -> tuple[str, ...]:
    path = unravel_key(key)
    if not _backed(node) and not node.is_memmap():
        raise RuntimeError(
            f"{method}({format_key(path)}): this {type(node).__name__} is not memory-mapped; "
            "call memmap_(path) (or load_memmap(path)) first, the new entry is made in that "
            "tree"
        )
    if not _backed(node):  # mapping a read-only tree (an archive, a URL, mode="r")
        from tensorbox._storage.extend import _refuse_read_only

        _refuse_read_only(node, method, "add entries")
    if node.get(path, None) is not None:
        raise RuntimeError(
            f"{method}: key {format_key(path)} already exists within the target tensordict; "
            "write into it in place (set_, td[key][...] = ...) or pick a new key"
        )
    return path


def _add(node: Any, path: tuple[str, ...], value: Tensor) -> Tensor:
    """Set ``value`` at ``path`` with the lock lifted (committed when tree-backed)."""
    if not _backed(node):
        value = value if isinstance(value, MemoryMappedTensor) else shared_copy(value)
    locked = node.is_locked
    if locked:
        node.unlock_()
    try:
        node.set(path, value)
    finally:
        if locked:
            node.lock_()
    out: Tensor = node.get(path)
    return out


def make_from_tensor(node: Any, key: Any, tensor: Tensor, copy_data: bool) -> Tensor:
    """``node.make_memmap_from_tensor(key, tensor)``: a memory-mapped copy at ``key``."""
    path = _check(node, "make_memmap_from_tensor", key)
    if not isinstance(tensor, Tensor):
        raise TypeError(
            f"make_memmap_from_tensor({format_key(path)}): expected a tensor, got "
            f"{type(tensor).__name__}"
        )
    value = tensor.detach()
    if not copy_data:
        value = torch.zeros((), dtype=value.dtype).expand(value.shape)
    elif isinstance(value, MemoryMappedTensor) or value.device.type != "cpu":
        value = value.cpu().as_subclass(Tensor)  # never the same storage (tensordict's rule)
    if isinstance(value, MemoryMappedTensor) or value.untyped_storage().filename is not None:
        value = value.clone()
    return _add(node, path, value)


def make_new(node: Any, key: Any, shape: Any, dtype: torch.dtype | None) -> Tensor:
    """``node.make_memmap(key, shape, dtype=)``: a new zero-filled entry at ``key``."""
    path = _check(node, "make_memmap", key)
    shp = shape_from("make_memmap", (shape,))
    value = torch.zeros((), dtype=dtype or torch.get_default_dtype()).expand(shp)
    return _add(node, path, value)


def make_from_storage(
    node: Any, key: Any, storage: Any, shape: Any, dtype: torch.dtype | None
) -> Tensor:
    """``node.make_memmap_from_storage(key, storage, shape, dtype=)``.

    On a tree-backed container the storage's bytes become the entry's file; a storage
    mapping a file other than that entry's would leave the data in two places, and one
    without a file (shared memory) would not be the saved entry: both are refused.
    """
    path = _check(node, "make_memmap_from_storage", key)
    shp = shape_from("make_memmap_from_storage", (shape,))
    dt = dtype or torch.get_default_dtype()
    if not isinstance(storage, torch.UntypedStorage):
        storage = storage.untyped_storage()
    if storage.device.type != "cpu":
        raise RuntimeError(
            f"make_memmap_from_storage({format_key(path)}): the storage is on "
            f"{storage.device}; a memory-mapped entry needs one in physical memory (CPU)"
        )
    name = storage.filename or getattr(storage, "_tbx_ro", None)
    if _backed(node):
        want = _entry_file(node, path)
        if name is None:
            raise RuntimeError(
                f"make_memmap_from_storage({format_key(path)}): the storage has no file, so "
                f"it cannot be the saved entry (which will be {want!r}); use "
                "make_memmap_from_tensor to copy its data into the tree"
            )
        if os.path.realpath(name) != os.path.realpath(want):
            raise RuntimeError(
                f"make_memmap_from_storage({format_key(path)}): Providing a storage with an "
                f"associated filename ({name!r}) that is not the file of the new entry "
                f"({want!r}) is not allowed; use make_memmap_from_tensor to copy its data"
            )
    value = _on_storage(storage, dt, shp)
    return _add(node, path, value)


def _entry_file(node: Any, path: tuple[str, ...]) -> str:
    """The local file a new tensor entry at ``path`` of ``node`` gets in its tree; a
    store that keeps no files refuses (the storage could not become the entry)."""
    rec = TREES[id(node)]
    parts = [encode_key(k, node=True) for k in path[:-1]]
    parts.append(encode_key(path[-1]) + SUFFIX)
    rel = "/".join([rec.rel, *parts] if rec.rel else parts)
    file: str | None = rec.store.entry_file(rel)
    if file is None:
        raise RuntimeError(
            f"make_memmap_from_storage({format_key(path)}): the tree at {rec.store.name!r} "
            "keeps no files, so no storage can become its entry; use make_memmap_from_tensor "
            "to copy its data into the tree"
        )
    return file
