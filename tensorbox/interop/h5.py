"""HDF5 through h5py: the adapter ``PersistentTensorDict(backend="h5")`` works through.

Groups are nodes, datasets arrays; non-tensor values are string (or JSON bytes) scalar
datasets marked with an attribute. ``create_dataset`` options (``compression=``...)
reach every array, nested ones included.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tensorbox.interop._backends import NON_TENSOR_ATTR, Backend, decode_non_tensor
from tensorbox.interop._extras import require

__all__ = ["H5Backend"]


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
