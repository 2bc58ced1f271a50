"""Jagged leaves on disk: a values file and an offsets file (the ``jagged`` entry kind).

The entry is specified in :mod:`tensorbox._storage.format.spec` ("Jagged entries") and
parsed with the other entries (:mod:`tensorbox._storage.format.parse`). This module
checks the offsets' contents
(:func:`check_offsets`), plans the two files of a save (:func:`entry_json`), and maps
them back as a jagged nested tensor (:func:`map_jagged`, :func:`build`). An append
(:mod:`tensorbox._storage.extend`) treats the two files as two dense leaves: values after the
committed values, offsets continuing the committed ones, then a commit of the new
``batch_size`` and ``length`` in ``meta.json``.

>>> import os, tempfile, torch
>>> from tensorbox._storage.filewrite import write_file
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

from typing import Any

import torch
from torch import Tensor

from tensorbox._core.encoding import dtype_name
from tensorbox._core.jagged import from_parts, parts
from tensorbox._storage.format.names import encode_key
from tensorbox._storage.format.spec import SUFFIX
from tensorbox._storage.memmap_tensor import map_file
from tensorbox.errors import FormatError

__all__ = ["build", "check_offsets", "entry_json", "file_names", "map_jagged"]

#: Offsets checked per step at load: bounded memory whatever the row count.
_CHECK_ROWS = 1 << 20


def file_names(key: str) -> tuple[str, str]:
    """The values and offsets file names of key ``key`` (encoded as other leaves)."""
    base = encode_key(key)
    return f"{base}.values{SUFFIX}", f"{base}.offsets{SUFFIX}"


def entry_json(key: str, t: Tensor) -> dict[str, Any]:
    """The ``meta.json`` entry of jagged ``t`` under ``key`` (ids are the saver's)."""
    values, offsets = parts(t)
    vfile, ofile = file_names(key)
    return {
        "kind": "jagged",
        "dtype": dtype_name(values.dtype, f"key {key!r}"),
        "shape": [int(t.shape[0]), None, *(int(d) for d in values.shape[1:])],
        "length": int(values.shape[0]),
        "values": {"file": vfile},
        "offsets": {"file": ofile, "dtype": "int32" if offsets.dtype is torch.int32 else "int64"},
    }


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
