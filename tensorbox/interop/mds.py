"""``to_mds``: a container's rows as a mosaicml-streaming (MDS) dataset.

Each row (an element of the first batch dim) is one sample; nested keys are joined
with ``.`` into column names. Column types are inferred from the first row: tensors
as ``ndarray:<dtype>`` columns, ``str`` as ``str``, ints as ``int``, floats as
``float64``, other JSON values as ``json`` (never ``pkl``: nothing is pickled).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData
from tensorbox.interop._extras import require

__all__ = ["to_mds"]


def _row_values(td: Any, i: int) -> dict[str, Any]:
    from tensorbox.interop.arrow import _raw_leaves

    out: dict[str, Any] = {}
    for path, value in _raw_leaves(td):
        key = ".".join(path)
        if isinstance(value, Tensor):
            out[key] = value[i].detach().cpu().numpy()
        elif isinstance(value, NonTensorData):
            out[key] = value.data[i] if value.stacked else value.data
            if isinstance(out[key], np.ndarray):
                out[key] = out[key].tolist()
        else:
            raise TypeError(f"to_mds: entry {key!r} of type {type(value).__name__}")
    return out


def _column(key: str, v: Any) -> str:
    if isinstance(v, np.ndarray):
        if v.dtype == np.bool_:
            raise TypeError(
                f"to_mds: entry {key!r} is bool, which MDS has no column for; "
                "cast it (td[key].to(torch.uint8))"
            )
        return f"ndarray:{v.dtype.name}"
    if isinstance(v, str):
        return "str"
    if isinstance(v, bool | int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, bytes):
        return "bytes"
    return "json"


def to_mds(
    td: Any,
    *,
    out: Any,
    columns: dict[str, str] | None = None,
    keep_local: bool = False,
    compression: str | None = None,
    hashes: list[str] | None = None,
    size_limit: int | str | None = 1 << 26,
    writer: Any = None,
    **kwargs: Any,
) -> None:
    """Write each row of ``td`` as one MDS sample (``out``: a folder, a remote URL or
    ``(local, remote)``, as ``streaming.MDSWriter`` takes)."""
    streaming = require("streaming", "mds")
    if not td.batch_dims:
        raise ValueError("to_mds: the container has no batch dim; the first one gives the rows")
    n = td.batch_size[0]
    if n == 0:
        raise ValueError("to_mds: the container has no rows to write")
    first = _row_values(td, 0)
    if columns is None:
        columns = {k: _column(k, v) for k, v in first.items()}
    if writer is None:
        writer = streaming.MDSWriter(
            out=out,
            columns=columns,
            keep_local=keep_local,
            compression=compression,
            hashes=hashes,
            size_limit=size_limit,
            **kwargs,
        )
    with writer:
        for i in range(n):
            row = first if i == 0 else _row_values(td, i)
            writer.write({k: (int(v) if columns[k] == "int" else v) for k, v in row.items()})
