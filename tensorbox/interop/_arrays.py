"""Reading and writing the arrays and trees of a ``PersistentTensorDict`` through a
``Adapter`` (indices in numpy's terms, partial reads, whole-tree writes, atomic saves).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.encoding import stacked_array
from tensorbox._core.nontensor import NonTensorData
from tensorbox._core.tree import keys_list
from tensorbox._storage.atomic import replace_folder, replacing
from tensorbox.errors import TensorDictKeyError
from tensorbox.interop._adapters import BATCH_ATTR, Adapter, encode_non_tensor

__all__ = [
    "as_tensor",
    "atomic_path",
    "infer_batch_size",
    "is_basic",
    "is_key",
    "key_path",
    "leaf_keys",
    "np_index",
    "numpy_of",
    "read",
    "read_non_tensor",
    "tree_attrs",
    "write",
    "write_non_tensor",
    "write_tree",
]


def key_path(key: Any) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return key
    raise TensorDictKeyError(f"key {key!r}: expected a string or a tuple of strings")


def is_key(key: Any) -> bool:
    return isinstance(key, str) or (
        isinstance(key, tuple) and bool(key) and all(isinstance(k, str) for k in key)
    )


def np_index(index: Any) -> Any:
    """A torch/list/range index in numpy's terms (same semantics for these cases)."""
    if isinstance(index, tuple):
        return tuple(np_index(i) for i in index)
    if isinstance(index, Tensor):
        return index.cpu().numpy()
    if isinstance(index, range | list):
        return np.asarray(index)
    return index


def is_basic(index: Any) -> bool:
    """An index every array library reads natively (ints, slices, ``...``, ``None``)."""
    parts = index if isinstance(index, tuple) else (index,)
    return all(
        isinstance(p, int | slice | type(Ellipsis) | np.integer) and not isinstance(p, bool)
        for p in parts
    )


def as_tensor(x: Any) -> Tensor:
    arr = np.asarray(x)
    if not arr.dtype.isnative:  # a big-endian array: torch takes the machine's order only
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not arr.flags.writeable or not arr.flags.c_contiguous:
        arr = np.array(arr, copy=True)
    return torch.from_numpy(arr)


def numpy_of(value: Tensor, key: str, backend: str) -> np.ndarray:
    t = value.detach().cpu()
    if t.dtype is torch.bfloat16:
        raise TypeError(
            f"entry {key!r}: {backend} has no bfloat16 dtype; cast it first "
            "(td.float()) or save with memmap()"
        )
    return t.contiguous().numpy()


def infer_batch_size(shapes: list[tuple[int, ...]], parent: tuple[int, ...]) -> list[int]:
    """The longest leading shape all ``shapes`` share (at least the parent's)."""
    if not shapes:
        return list(parent)
    out: list[int] = []
    for dims in zip(*shapes):
        if len(set(dims)) != 1:
            break
        out.append(dims[0])
    return out


def leaf_keys(value: Any) -> list[Any]:
    if not getattr(type(value), "_is_tensor_collection", False) and hasattr(value, "file"):
        return list(value.keys(True, True))  # a PersistentTensorDict
    return keys_list(value, True, True)  # non-tensor values too


def read(backend: Adapter, arr: Any, index: Any) -> np.ndarray:
    idx = np_index(index)
    if is_basic(idx):
        return backend.read(arr, idx)
    if (
        isinstance(idx, np.ndarray)
        and idx.ndim == 1
        and idx.dtype.kind in "iu"
        and len(idx)
        and len(idx) * 4 < (arr.shape[0] if arr.ndim else 1)
    ):
        # A few rows of many: read only those (sorted, as HDF5 needs), then reorder.
        n = arr.shape[0]
        rows = np.where(idx < 0, idx + n, idx) if (idx < 0).any() else idx
        if len(rows) == 1 or bool((rows[1:] > rows[:-1]).all()):  # sorted already
            return backend.read_rows(arr, rows)
        uniq, inverse = np.unique(rows, return_inverse=True)
        return backend.read_rows(arr, uniq)[inverse]
    out: np.ndarray = backend.read_all(arr)[idx]
    return out


def write(backend: Adapter, arr: Any, index: Any, value: np.ndarray) -> None:
    idx = np_index(index)
    if is_basic(idx):
        backend.write(arr, idx, value)
        return
    data = backend.read_all(arr).copy()
    data[idx] = value
    backend.write(arr, ..., data)


def tree_attrs(td: Any) -> dict[str, Any]:
    """The attributes a node is created with (its batch size)."""
    return {BATCH_ATTR: list(td.batch_size)}


def write_tree(
    backend: Adapter, group: Any, td: Any, path: tuple[str, ...], kwargs: dict[str, Any]
) -> None:
    for name, value in td._tensordict.items():
        key = ".".join((*path, name))
        if isinstance(value, Tensor):
            backend.create_array(group, name, numpy_of(value, key, backend.name), kwargs)
        elif isinstance(value, NonTensorData):
            write_non_tensor(backend, group, name, value, key)
        elif getattr(type(value), "_is_tensor_collection", False):
            child = backend.create_group(group, name, tree_attrs(value))
            write_tree(backend, child, value, (*path, name), kwargs)
        else:
            raise TypeError(f"entry {key!r} of type {type(value).__name__} cannot be stored")


def _shared(data: Any) -> tuple[bool, Any]:
    """``(True, v)`` when every element of the object array ``data`` is ``v`` (same type,
    ``==`` says True); ``(False, None)`` otherwise, or when there is no element."""
    flat = data.reshape(-1)
    if flat.size == 0:
        return False, None
    first = flat[0]
    for x in flat[1:]:
        try:
            if type(x) is not type(first) or (x == first) is not True:
                return False, None
        except Exception:  # a value whose == raises or is ambiguous: keep the rows
            return False, None
    return True, first


def write_non_tensor(backend: Adapter, group: Any, name: str, value: Any, key: str) -> None:
    """A non-tensor entry: one value, or one per batch element (a stack: its rows' shape
    is recorded, so that each row reads back as its own value). Rows that all hold the
    same value are written once, as tensordict writes an expanded value: reading gives
    that value for every row either way."""
    same, one = _shared(value.data) if value.stacked else (False, None)
    if same:
        raw, encoding = encode_non_tensor(one, key)
        backend.write_non_tensor(group, name, raw, encoding)
    elif value.stacked:
        raw, encoding = encode_non_tensor(value.data.tolist(), key, force_json=True)
        backend.write_non_tensor(group, name, raw, encoding, rows=value.data.shape)
    else:
        raw, encoding = encode_non_tensor(value.data, key)
        backend.write_non_tensor(group, name, raw, encoding)


def read_non_tensor(backend: Adapter, obj: Any, key: str, where: str, batch: Any) -> Any:
    """The ``NonTensorData`` of a non-tensor entry (per-row values as a stack)."""
    value = backend.read_non_tensor(obj, key, where)
    rows = backend.rows(obj)
    if rows is None:
        return NonTensorData(value, batch_size=batch)
    return NonTensorData(stacked_array(value, rows, f"{where}: entry {key!r}"), stacked=True)


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary name beside ``path``, renamed onto it once the write succeeded (a
    folder, as a zarr store is, replaces the old one only then)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with replacing(path, rename=replace_folder) as tmp:
        yield tmp
