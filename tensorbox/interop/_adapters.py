"""What ``PersistentTensorDict`` needs from a hierarchical array library: HDF5 (h5py) or
zarr v3. One small adapter per library; the container is written once over them.

A reader gives, per node (group): its recorded batch size, and its entries, each an
array (dtype, shape, a way to read all or part of it), a non-tensor value, or a child
node. That is the shape the storage seam of ``tensorbox._storage`` takes, so these
adapters can become stores of it.

>>> sorted(BACKENDS)
['h5', 'zarr']
>>> backend_for("hdf4")
Traceback (most recent call last):
ValueError: backend='hdf4'; expected 'h5' or 'zarr'

"""

from __future__ import annotations

import contextlib
import json
from importlib import import_module
from typing import Any

import numpy as np

from tensorbox.errors import FormatError

__all__ = [
    "BACKENDS",
    "BATCH_ATTR",
    "NON_TENSOR_ATTR",
    "ROWS_ATTR",
    "Adapter",
    "Unreadable",
    "backend_for",
    "recorded_batch",
    "tensor_dtype",
]

#: Group attribute holding the node's batch size.
BATCH_ATTR = "tensorbox_batch_size"
#: Attribute marking a non-tensor entry; the same name tensordict uses on zarr stores, so
#: that either library recognises the other's non-tensor entries (the value says how the
#: bytes are encoded: "utf-8" text or "json"; tensordict's pickles are refused).
NON_TENSOR_ATTR = "__tensordict_non_tensor__"
#: Attribute of a non-tensor entry holding one value per batch element (per-row text): the
#: shape of the rows; the entry's JSON is then nested lists of exactly that shape.
ROWS_ATTR = "tensorbox_rows"

#: The numpy kinds torch has a dtype for, with the item sizes it takes (no long double,
#: no complex256): anything else (text, bytes, compound, datetime, references, opaque)
#: has no tensor form.
_TENSOR_KINDS = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}


def recorded_batch(value: Any, where: str) -> tuple[int, ...]:
    """The batch size a group's ``tensorbox_batch_size`` attribute records, checked: a
    list of non-negative integers (a ``FormatError`` naming the group otherwise: ``2.7``
    is not truncated to 2, nor ``"abc"`` read letter by letter).

    >>> recorded_batch(np.array([4, 2]), "f.h5:/"), recorded_batch([], "f.h5:/")
    ((4, 2), ())
    >>> recorded_batch(np.array([2.7]), "f.h5:/g")
    Traceback (most recent call last):
    tensorbox.errors.FormatError: f.h5:/g: attribute 'tensorbox_batch_size' is array([2.7]); expected a list of sizes (non-negative integers)
    """
    items = value.tolist() if isinstance(value, np.ndarray) and value.ndim == 1 else value
    if not isinstance(items, list | tuple) or not all(
        isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_) and x >= 0
        for x in items
    ):
        raise FormatError(
            f"{where}: attribute {BATCH_ATTR!r} is {value!r}; expected a list of sizes "
            "(non-negative integers)"
        )
    return tuple(int(x) for x in items)


def tensor_dtype(dtype: Any, key: str, where: str) -> np.dtype[Any]:
    """The native dtype an array of ``dtype`` reads as (a big-endian array is converted
    to the machine's byte order as it is read); TypeError naming the entry when the
    array has no tensor form.

    >>> tensor_dtype(np.dtype(">f4"), "x", "f.h5:/"), tensor_dtype(np.dtype("u2"), "y", "")
    (dtype('float32'), dtype('uint16'))
    >>> tensor_dtype(np.dtype([("a", "i4")]), "rec", "f.h5:/g")
    Traceback (most recent call last):
    TypeError: f.h5:/g: entry 'rec' has dtype [('a', '<i4')] (a compound record), which has no tensor form; read it with the file's own library (ptd.file)
    """
    dt: np.dtype[Any] = np.dtype(dtype)
    if dt.fields is None and dt.itemsize in _TENSOR_KINDS.get(dt.kind, ()):
        native: np.dtype[Any] = dt if dt.isnative else dt.newbyteorder("=")
        return native
    kind = {
        "V": "a compound record" if dt.fields else "opaque bytes",
        "S": "bytes",
        "U": "text",
        "T": "text",
        "O": "text, bytes or references (variable length objects)",
        "M": "datetime",
        "m": "timedelta",
        "f": "long double",
        "c": "long double complex",
    }.get(dt.kind, "not numeric")
    raise TypeError(
        f"{where}: entry {key!r} has dtype {dt} ({kind}), which has no tensor form; read it "
        "with the file's own library (ptd.file)"
    )


class Unreadable:
    """An entry that a group names but that cannot be read: a dangling soft link, an
    external link (not followed, or to a file that cannot be opened), an HDF5 ``Empty``
    dataset. The tree still opens and lists it; reading it raises :meth:`error`."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def error(self, key: str, where: str) -> Exception:
        from tensorbox.errors import FormatError

        return FormatError(f"{where}: entry {key!r} is {self.reason}")


def encode_non_tensor(value: Any, key: str, force_json: bool = False) -> tuple[bytes, str]:
    """The bytes of a non-tensor value and their encoding (never pickle); ``force_json``:
    JSON even for text (per-row values are nested lists)."""
    if isinstance(value, str) and not force_json:
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


class Adapter:
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

    def write_non_tensor(
        self, group: Any, name: str, raw: bytes, encoding: str, rows: Any = None
    ) -> None:
        """Write a non-tensor entry; ``rows``: the shape of its per-row values."""
        raise NotImplementedError

    def read_non_tensor(self, obj: Any, key: str, where: str) -> Any:
        raise NotImplementedError

    def is_non_tensor(self, obj: Any) -> bool:
        return type(obj) is not Unreadable and NON_TENSOR_ATTR in obj.attrs

    def rows(self, obj: Any) -> tuple[int, ...] | None:
        """The shape of a non-tensor entry's per-row values (None: one value)."""
        rows = obj.attrs.get(ROWS_ATTR)
        return None if rows is None else tuple(int(r) for r in rows)

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

    def written(self, root: Any) -> None:
        """Called after a whole tree was written at ``root`` (before it is reopened)."""
        self.structure_changed(root)

    def close(self, root: Any) -> None:
        """Close the file or store ``root`` was opened from."""
        with contextlib.suppress(AttributeError):
            root.store.close()

    def target(self, root: Any, filename: Any) -> Any:
        """What reopens ``root`` in another process (``filename``: what it was opened from)."""
        return filename

    def read_rows(self, arr: Any, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (strictly increasing) of ``arr``, read natively."""
        return np.asarray(arr[rows])

    def file_offset(self, arr: Any, root: Any) -> int | None:
        """Where ``arr``'s bytes lie, whole and in native order, in the file ``root`` was
        opened from (so they can be mapped); None when they cannot be mapped."""
        return None


#: The module of this package holding each backend (imported on first use).
BACKENDS = {"h5": ("_h5", "H5Backend"), "zarr": ("_zarr", "ZarrBackend")}


def backend_for(name: str, **options: Any) -> Adapter:
    """The adapter for ``name`` ("h5" or "zarr"); its library is imported now.
    ``options``: the adapter's own (h5: ``external_links``)."""
    if name not in BACKENDS:
        raise ValueError(f"backend={name!r}; expected 'h5' or 'zarr'")
    module, cls = BACKENDS[name]
    adapter: Adapter = getattr(import_module(f"tensorbox.interop.{module}"), cls)(**options)
    return adapter
