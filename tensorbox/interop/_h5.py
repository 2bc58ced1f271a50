"""HDF5 through h5py: the adapter ``PersistentTensorDict(backend="h5")`` works through.

Groups are nodes, datasets arrays; non-tensor values are string (or JSON bytes) scalar
datasets marked with an attribute. ``create_dataset`` options (``compression=``...)
reach every array, nested ones included.

Links are read one by one, so one bad entry never keeps the file from opening: a soft
link that resolves nowhere, an external link to a file that cannot be opened, or an
``Empty`` dataset is listed, and reading it raises naming the file and the key. External
links (to other files) are not followed unless asked (``external_links=True``): opening
a file never opens others silently.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tensorbox.interop._adapters import (
    NON_TENSOR_ATTR,
    ROWS_ATTR,
    Adapter,
    Unreadable,
    decode_non_tensor,
)
from tensorbox.interop._extras import require

__all__ = ["H5Backend"]


class H5Backend(Adapter):
    name = "h5"
    extra = "hdf5"

    def __init__(self, external_links: bool = False) -> None:
        self.h5py = require("h5py", self.extra)
        self.external_links = external_links

    def open(self, filename: Any, mode: str, attrs: dict[str, Any] | None = None) -> Any:
        f = self.h5py.File(os.fspath(filename), mode)
        if attrs:
            f.attrs.update(attrs)
        return f

    def is_group(self, obj: Any) -> bool:
        return isinstance(obj, self.h5py.Group)

    def members(self, group: Any) -> list[tuple[str, Any]]:
        return [(name, self.member(group, name)) for name in group]

    def member(self, group: Any, name: str) -> Any:
        """The object ``name`` links to, or an :class:`Unreadable` saying why there is
        none (KeyError only when the group has no link of that name)."""
        h5py = self.h5py
        link = group.get(name, getlink=True)
        if link is None:
            raise KeyError(name)
        if type(link) is h5py.ExternalLink:
            target = f"{link.filename}:{link.path}"
            if not self.external_links:
                return Unreadable(
                    f"an external link to {target}, not followed (pass external_links=True "
                    "to follow links to other files)"
                )
        try:
            obj = group[name]
        except (KeyError, OSError, ValueError) as err:
            if type(link) is h5py.SoftLink:
                return Unreadable(f"a soft link to {link.path!r}, which resolves nowhere")
            if type(link) is h5py.ExternalLink:
                return Unreadable(f"an external link to {target}, which cannot be opened ({err})")
            return Unreadable(f"unreadable ({err})")  # pragma: no cover - a damaged file
        if isinstance(obj, h5py.Dataset) and obj.shape is None:
            return Unreadable("an HDF5 Empty dataset (no shape, no data): no tensor form")
        return obj

    def contains(self, group: Any, name: str) -> bool:
        # a link counts even when it resolves nowhere (h5py's `in` says False for those)
        return group.get(name, getlink=True) is not None

    def create_array(self, group: Any, name: str, data: np.ndarray, kwargs: dict[str, Any]) -> Any:
        # a scalar dataset takes no chunking or filter options
        return group.create_dataset(name, data=data, **(kwargs if data.ndim else {}))

    def write_non_tensor(
        self, group: Any, name: str, raw: bytes, encoding: str, rows: Any = None
    ) -> None:
        ds = group.create_dataset(name, data=raw.decode() if encoding == "utf-8" else raw)
        ds.attrs[NON_TENSOR_ATTR] = encoding
        if rows is not None:
            ds.attrs[ROWS_ATTR] = list(rows)

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

    def target(self, root: Any, filename: Any) -> Any:
        return str(root.file.filename)

    def written(self, root: Any) -> None:
        root.close()  # reopened by whoever reads it next

    def close(self, root: Any) -> None:
        root.close()

    def file_offset(self, arr: Any, root: Any) -> int | None:
        # contiguous, unfiltered, native order, and in this file (not behind an external link)
        if arr.file.filename != root.file.filename or arr.chunks is not None:
            return None
        if arr.compression is not None or not arr.dtype.isnative:
            return None
        offset = arr.id.get_offset()
        return None if offset is None else int(offset)
