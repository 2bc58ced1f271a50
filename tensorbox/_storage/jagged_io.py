"""Jagged leaves on disk: a values file and an offsets file (the ``jagged`` entry kind).

The entry is specified in :mod:`tensorbox._storage.format.spec` ("Jagged entries"). This module
parses and checks it (:func:`parse_entry`), checks the offsets' contents
(:func:`check_offsets`), plans the two files of a save (:func:`entry_json`), and maps
them back as a jagged nested tensor (:func:`map_jagged`, :func:`build`). An append
(:mod:`tensorbox._storage.extend`) treats the two files as two dense leaves: values after the
committed values, offsets continuing the committed ones, then a commit of the new
``batch_size`` and ``length`` in ``meta.json``.

>>> import os, tempfile, torch
>>> from tensorbox._storage.memmap_tensor import write_file
>>> d = tempfile.mkdtemp()
>>> nt = torch.nested.nested_tensor([torch.ones(2), torch.zeros(0)], layout=torch.jagged)
>>> e = entry_json("x", nt)
>>> e["shape"], e["length"], e["values"]["file"], e["offsets"]["dtype"]
([2, None], 2, 'x.values.memmap', 'int64')
>>> _ = write_file(os.path.join(d, e["values"]["file"]), nt.values())
>>> _ = write_file(os.path.join(d, e["offsets"]["file"]), nt.offsets())
>>> back = map_jagged(os.path.join(d, "x.values.memmap"), os.path.join(d, "x.offsets.memmap"),
...                   torch.float32, (), 2, 2, torch.int64)
>>> [r.tolist() for r in back.unbind()]
[[1.0, 1.0], []]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import torch
from torch import Tensor

from tensorbox._core.jagged import from_parts, parts
from tensorbox._core.schema import _short_repr
from tensorbox._storage import checksum as _checksum
from tensorbox._storage.format import spec as fmt
from tensorbox._storage.memmap_tensor import map_file
from tensorbox.errors import FormatError

__all__ = [
    "OFFSET_DTYPES",
    "JaggedEntry",
    "build",
    "check_offsets",
    "entry_json",
    "file_ids",
    "file_names",
    "map_jagged",
    "parse_entry",
    "parse_parts",
    "verify",
]

#: Offsets dtypes the format allows (as ``meta.json`` names them).
OFFSET_DTYPES = {"int64": torch.int64, "int32": torch.int32}
_FIELDS = frozenset(("kind", "dtype", "shape", "length", "values", "offsets"))
_VALUES_FIELDS = frozenset(("file", "id"))
_OFFSETS_FIELDS = frozenset(("file", "dtype", "id"))
T = TypeVar("T")
#: Offsets checked per step at load: bounded memory whatever the row count.
_CHECK_ROWS = 1 << 20


class JaggedEntry(NamedTuple):
    """A checked ``jagged`` entry: its two files as tensor entries (shapes ``[length,
    *feature]`` and ``[rows + 1]``), their contents not read yet."""

    values: fmt.TensorEntry
    offsets: fmt.TensorEntry


def file_ids(entries: Any) -> dict[str, str]:
    """``{file name: id}`` of every file an ``entries`` object of ``meta.json`` names:
    tensor entries' files and both files of jagged entries (unchecked JSON: odd
    entries are skipped)."""
    ids: dict[str, str] = {}
    for e in entries.values() if type(entries) is dict else ():
        if type(e) is not dict:
            continue
        for f in (e, e.get("values"), e.get("offsets")) if e.get("kind") == "jagged" else (e,):
            if type(f) is dict and type(f.get("file")) is str and type(f.get("id")) is str:
                ids[f["file"]] = f["id"]
    return ids


def file_names(key: str) -> tuple[str, str]:
    """The values and offsets file names of key ``key`` (encoded as other leaves)."""
    base = fmt.encode_key(key)
    return f"{base}.values{fmt.SUFFIX}", f"{base}.offsets{fmt.SUFFIX}"


def entry_json(key: str, t: Tensor) -> dict[str, Any]:
    """The ``meta.json`` entry of jagged ``t`` under ``key`` (ids are the saver's)."""
    values, offsets = parts(t)
    vfile, ofile = file_names(key)
    return {
        "kind": "jagged",
        "dtype": fmt.dtype_name(values.dtype, f"key {key!r}"),
        "shape": [int(t.shape[0]), None, *(int(d) for d in values.shape[1:])],
        "length": int(values.shape[0]),
        "values": {"file": vfile},
        "offsets": {"file": ofile, "dtype": "int32" if offsets.dtype is torch.int32 else "int64"},
    }


def _sub(e: Any, name: str, fields: frozenset[str], where: str) -> dict[str, Any]:
    sub = e.get(name)
    if type(sub) is not dict or not fields <= sub.keys() <= fields | {"sha256"}:
        raise FormatError(
            f"{where}: {name!r} is {_short_repr(sub)}; expected an object with "
            f"{sorted(fields)!r} and maybe 'sha256'"
        )
    gen, sha = sub["id"], sub.get("sha256")
    if type(gen) is not str or fmt._HEX32(gen) is None:
        raise FormatError(f"{where}: {name} 'id' is {_short_repr(gen)}, expected 32 hex digits")
    if sha is not None and (type(sha) is not str or fmt._HEX64(sha) is None):
        raise FormatError(f"{where}: {name} 'sha256' is {_short_repr(sha)}, expected 64 hex digits")
    return sub


def parse_entry(
    directory: str, root_real: str, e: dict[str, Any], batch: tuple[int, ...], where: str
) -> JaggedEntry:
    """A ``jagged`` entry of ``meta.json``, its fields and file sizes checked (contents
    are checked when mapped, by :func:`check_offsets`)."""

    def tensor(file: Any, dtype: Any, shape: list[Any], gen: str, sha: Any) -> fmt.TensorEntry:
        entry = fmt.tensor_entry(directory, root_real, file, dtype, shape, (), where)
        return entry._replace(gen=gen, sha256=sha)

    return JaggedEntry(*parse_parts(e, batch, where, tensor))


def parse_parts(
    e: dict[str, Any],
    batch: tuple[int, ...],
    where: str,
    tensor: Callable[[Any, Any, list[Any], str, str | None], T],
) -> tuple[T, T]:
    """The values and offsets entries of the ``jagged`` entry ``e``, its fields checked;
    ``tensor(file, dtype, shape, id, sha256)`` makes (and size-checks) the entry of each
    file: a folder's file, or an archive's entry."""
    if e.keys() != _FIELDS:
        raise FormatError(
            f"{where} has fields {sorted(e)!r}; a 'jagged' entry has {sorted(_FIELDS)!r}"
        )
    shape = e["shape"]
    if type(shape) is not list or len(shape) < 2 or shape[1] is not None:
        raise FormatError(
            f"{where}: shape {_short_repr(shape)} is not [rows, null, *feature] (null marks "
            "the ragged dim)"
        )
    rows = fmt.check_shape(shape[:1], where, "'shape'")[0]
    feature = fmt.check_shape(shape[2:], where, "'shape'")
    if batch != (rows,):
        raise FormatError(
            f"{where}: a jagged entry of {rows} rows needs batch_size [{rows}], the node's is "
            f"{list(batch)}"
        )
    length = e["length"]
    if type(length) is not int or length < 0:
        raise FormatError(f"{where}: 'length' is {_short_repr(length)}, expected an int >= 0")
    v = _sub(e, "values", _VALUES_FIELDS, where)
    o = _sub(e, "offsets", _OFFSETS_FIELDS, where)
    odt = o["dtype"]
    if type(odt) is not str or odt not in OFFSET_DTYPES:
        raise FormatError(
            f"{where}: offsets dtype {_short_repr(odt)} is not one of {sorted(OFFSET_DTYPES)}"
        )
    if odt == "int32" and length > 2**31 - 1:
        raise FormatError(f"{where}: 'length' {length} does not fit int32 offsets")
    return (
        tensor(v["file"], e["dtype"], [length, *feature], v["id"], v.get("sha256")),
        tensor(o["file"], odt, [rows + 1], o["id"], o.get("sha256")),
    )


def check_offsets(offsets: Tensor, length: int, path: str) -> tuple[int, int] | None:
    """FormatError naming ``path`` unless ``offsets`` starts at 0, never decreases and
    ends at ``length`` (the values' row count). Reads the offsets in bounded steps;
    returns the shortest and longest row lengths (None for no rows)."""
    n = offsets.shape[0]
    if n == 0:
        raise FormatError(f"{path}: no offsets; a jagged leaf of B rows has B + 1 offsets")
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0:
        raise FormatError(
            f"{path}: the offsets start at {first}, expected 0: the file is damaged or "
            "belongs to another tree"
        )
    if last != length:
        raise FormatError(
            f"{path}: the offsets end at {last}, but the values hold {length} rows "
            "(meta.json 'length'): the file is damaged or belongs to another tree"
        )
    shortest, longest = None, 0
    for start in range(0, n - 1, _CHECK_ROWS):
        stop = min(start + _CHECK_ROWS, n - 1)
        lengths = offsets[start + 1 : stop + 1] - offsets[start:stop]
        low = int(lengths.min())
        longest = max(longest, int(lengths.max()))
        shortest = low if shortest is None else min(shortest, low)
        if low < 0:
            row = start + int((lengths < 0).nonzero()[0, 0])
            raise FormatError(
                f"{path}: the offsets decrease at row {row} ({int(offsets[row])} then "
                f"{int(offsets[row + 1])}); offsets never decrease: the file is damaged"
            )
    return None if shortest is None else (shortest, longest)


def build(values: Tensor, offsets: Tensor, e: Any) -> Tensor:
    """The jagged tensor of mapped ``values`` and ``offsets``, offsets checked first
    (``e``: the :class:`JaggedEntry`, or an archive's, naming the offsets' file)."""
    return from_parts(values, offsets, check_offsets(offsets, e.values.shape[0], e.offsets.path))


def map_jagged(
    values_path: str,
    offsets_path: str,
    dtype: torch.dtype,
    feature: tuple[int, ...],
    rows: int,
    length: int,
    offsets_dtype: torch.dtype = torch.int64,
    mode: str = "r+",
) -> Tensor:
    """Map a jagged leaf's two files (checked) as a jagged nested tensor, no data read
    but the offsets' check."""
    values = map_file(values_path, dtype, (length, *feature), mode)
    offsets = map_file(offsets_path, offsets_dtype, (rows + 1,), mode)
    return from_parts(values, offsets, check_offsets(offsets, length, offsets_path))


def verify(e: JaggedEntry) -> None:
    """Read both files (checking recorded checksums) and check the offsets' contents."""
    for f in e:
        _checksum.check_file(f.path, f.nbytes, f.sha256)
    offsets = map_file(e.offsets.path, e.offsets.dtype, e.offsets.shape, "r", e.offsets.nbytes)
    check_offsets(offsets, e.values.shape[0], e.offsets.path)
