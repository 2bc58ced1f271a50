"""What ``PersistentTensorDict`` needs from a hierarchical array library: HDF5 (h5py) or
zarr v3. One small adapter per library; the container is written once over them.

A reader gives, per node (group): its recorded batch size, and its entries, each an
array (dtype, shape, a way to read all or part of it), a non-tensor value, or a child
node. That is the shape the storage seam of ``tensorbox._storage`` takes, so these
adapters can become stores of it.

>>> sorted(BACKENDS)
['h5', 'zarr']
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import numpy as np

from tensorbox.interop._extras import require

__all__ = ["BACKENDS", "BATCH_ATTR", "NON_TENSOR_ATTR", "Backend", "H5Backend", "ZarrBackend"]

#: Group attribute holding the node's batch size.
BATCH_ATTR = "tensorbox_batch_size"
#: Attribute marking a non-tensor entry; the same name tensordict uses on zarr stores, so
#: that either library recognises the other's non-tensor entries (the value says how the
#: bytes are encoded: "utf-8" text or "json"; tensordict's pickles are refused).
NON_TENSOR_ATTR = "__tensordict_non_tensor__"


def encode_non_tensor(value: Any, key: str) -> tuple[bytes, str]:
    """The bytes of a non-tensor value and their encoding (never pickle)."""
    if isinstance(value, str):
        return value.encode(), "utf-8"
    if isinstance(value, np.ndarray):
        value = value.tolist()
    try:
        return json.dumps(value).encode(), "json"
    except (TypeError, ValueError):
        raise TypeError(
            f"entry {key!r}: a non-tensor value of type {type(value).__name__} cannot be "
            "stored: expected str or JSON data (numbers, bool, None, lists, dicts); "
            "tensorbox never pickles"
        ) from None


def decode_non_tensor(raw: bytes, encoding: Any, key: str, where: str) -> Any:
    if encoding == "utf-8":
        return raw.decode()
    if encoding == "json":
        return json.loads(raw)
    raise ValueError(
        f"{where}: entry {key!r} is a non-tensor value encoded as {encoding!r}; expected "
        "'utf-8' or 'json' (a pickled value, as tensordict writes for arbitrary objects, is "
        "never unpickled)"
    )


class Backend:
    """The operations ``PersistentTensorDict`` uses; ``group`` and ``array`` are the
    library's own objects."""

    name = ""
    extra = ""

    def is_group(self, obj: Any) -> bool:
        raise NotImplementedError

    def members(self, group: Any) -> list[tuple[str, Any]]:
        raise NotImplementedError

    def member(self, group: Any, name: str) -> Any:
        return group[name]

    def contains(self, group: Any, name: str) -> bool:
        return name in group

    def create_group(self, group: Any, name: str, attrs: dict[str, Any] | None = None) -> Any:
        g = group.create_group(name)
        if attrs:
            g.attrs.update(attrs)
        return g

    def create_array(self, group: Any, name: str, data: np.ndarray, kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def write_non_tensor(self, group: Any, name: str, raw: bytes, encoding: str) -> None:
        raise NotImplementedError

    def read_non_tensor(self, obj: Any, key: str, where: str) -> Any:
        raise NotImplementedError

    def is_non_tensor(self, obj: Any) -> bool:
        return NON_TENSOR_ATTR in obj.attrs

    def delete(self, group: Any, name: str) -> None:
        del group[name]

    def move(self, group: Any, src: str, dst: str) -> None:
        raise NotImplementedError

    def read(self, arr: Any, index: Any) -> np.ndarray:
        return np.asarray(arr[index])

    def read_all(self, arr: Any) -> np.ndarray:
        return np.asarray(arr[()] if arr.ndim == 0 else arr[...])

    def write(self, arr: Any, index: Any, value: np.ndarray) -> None:
        arr[index] = value

    def structure_changed(self, root: Any) -> None:
        """Called after keys were added, removed or renamed."""


class H5Backend(Backend):
    name = "h5"
    extra = "hdf5"

    def __init__(self) -> None:
        self.h5py = require("h5py", self.extra)

    def open(self, filename: Any, mode: str, attrs: dict[str, Any] | None = None) -> Any:
        f = self.h5py.File(os.fspath(filename), mode)
        if attrs:
            f.attrs.update(attrs)
        return f

    def is_group(self, obj: Any) -> bool:
        return isinstance(obj, self.h5py.Group)

    def members(self, group: Any) -> list[tuple[str, Any]]:
        return list(group.items())

    def create_array(self, group: Any, name: str, data: np.ndarray, kwargs: dict[str, Any]) -> Any:
        # a scalar dataset takes no chunking or filter options
        return group.create_dataset(name, data=data, **(kwargs if data.ndim else {}))

    def write_non_tensor(self, group: Any, name: str, raw: bytes, encoding: str) -> None:
        ds = group.create_dataset(name, data=raw.decode() if encoding == "utf-8" else raw)
        ds.attrs[NON_TENSOR_ATTR] = encoding

    def read_non_tensor(self, obj: Any, key: str, where: str) -> Any:
        encoding = obj.attrs[NON_TENSOR_ATTR]
        raw = obj[()]
        if encoding == "utf-8":
            return raw  # h5py reads text as bytes (tensordict's h5 behaviour too)
        if isinstance(raw, np.ndarray):
            raw = raw.tobytes()
        return decode_non_tensor(bytes(raw), encoding, key, where)

    def move(self, group: Any, src: str, dst: str) -> None:
        group.move(src, dst)

    def filename(self, root: Any) -> str:
        return str(root.file.filename)


class ZarrBackend(Backend):
    name = "zarr"
    extra = "zarr"

    def __init__(self) -> None:
        self.zarr = require("zarr", self.extra)
        if int(self.zarr.__version__.split(".")[0]) < 3:
            raise ImportError(
                f"zarr {self.zarr.__version__} is installed and tensorbox needs zarr>=3: "
                "pip install 'tensorbox[zarr]'"
            )

    def open(self, filename: Any, mode: str, attrs: dict[str, Any] | None = None) -> Any:
        target = os.fspath(filename) if isinstance(filename, str | os.PathLike) else filename
        # Writers read the real metadata (the consolidated copy is rewritten after each
        # structural change); readers take the consolidated copy: one read for the tree.
        # Attributes are given at creation: a zip store cannot rewrite a member.
        return self.zarr.open_group(
            store=target,
            mode=mode,
            use_consolidated=None if mode == "r" else False,
            **({"attributes": attrs} if attrs else {}),
        )

    def create_group(self, group: Any, name: str, attrs: dict[str, Any] | None = None) -> Any:
        return group.create_group(name, attributes=attrs or {})

    def is_group(self, obj: Any) -> bool:
        return isinstance(obj, self.zarr.Group)

    def members(self, group: Any) -> list[tuple[str, Any]]:
        return sorted(group.members(), key=lambda kv: kv[0])

    def create_array(self, group: Any, name: str, data: np.ndarray, kwargs: dict[str, Any]) -> Any:
        kw = dict(kwargs)
        chunks = kw.pop("chunks", None)
        shape = data.shape
        if chunks is None:
            chunks = tuple(max(1, s) for s in shape)  # one chunk: a whole-leaf read is one read
        else:
            chunks = tuple(chunks)[: len(shape)]
            chunks = chunks + tuple(max(1, s) for s in shape[len(chunks) :])
        kw.setdefault("compressors", None)
        arr = group.create_array(name, shape=shape, dtype=data.dtype, chunks=chunks, **kw)
        if data.size:
            arr[...] = data
        return arr

    def write_non_tensor(self, group: Any, name: str, raw: bytes, encoding: str) -> None:
        data = np.frombuffer(raw, dtype=np.uint8)
        arr = group.create_array(
            name, shape=data.shape, dtype=np.uint8, chunks=(max(1, data.size),), compressors=None
        )
        if data.size:
            arr[...] = data
        arr.attrs[NON_TENSOR_ATTR] = encoding

    def read_non_tensor(self, obj: Any, key: str, where: str) -> Any:
        raw = np.asarray(obj[...]).tobytes()
        return decode_non_tensor(raw, obj.attrs[NON_TENSOR_ATTR], key, where)

    def move(self, group: Any, src: str, dst: str) -> None:
        _zarr_move(self, group, src, dst)

    def read(self, arr: Any, index: Any) -> np.ndarray:
        return np.asarray(arr[index])

    def structure_changed(self, root: Any) -> None:
        # The consolidated copy of the tree's metadata is rewritten after every structural
        # change, so that readers (which take it) never see a stale tree. zarr warns
        # that consolidation is not part of the v3 spec yet: known, and chosen.
        if isinstance(root.store, self.zarr.storage.ZipStore):
            return  # a zip member cannot be rewritten; readers list the zip instead
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.zarr.consolidate_metadata(root.store, path=root.path or None)


def _zarr_move(backend: ZarrBackend, group: Any, src: str, dst: str) -> None:
    """Rename a member of a zarr group: copied under the new name, then deleted."""
    obj = group[src]
    _zarr_copy(backend, obj, group, dst)
    del group[src]


def _zarr_copy(backend: ZarrBackend, obj: Any, parent: Any, name: str) -> None:
    if backend.is_group(obj):
        g = parent.create_group(name)
        g.attrs.update(dict(obj.attrs))
        for child_name, child in obj.members():
            _zarr_copy(backend, child, g, child_name)
        return
    arr = parent.create_array(
        name,
        shape=obj.shape,
        dtype=obj.dtype,
        chunks=obj.chunks,
        compressors=obj.compressors or None,
    )
    if obj.size:
        arr[...] = obj[...]
    arr.attrs.update(dict(obj.attrs))


BACKENDS: dict[str, type[Backend]] = {"h5": H5Backend, "zarr": ZarrBackend}
