"""Arrow tables, Parquet, pandas, CSV and JSON to and from containers (pyarrow is the engine).

A table's rows are the first batch dim. Each column becomes one entry:

- fixed-width numbers without nulls: a tensor that *shares* the Arrow buffer (no copy
  when the column is one chunk; a multi-chunk column is joined once);
- ``bool``, dictionary (categorical: its integer codes) and temporal columns (their
  integer representation): a tensor, copied where Arrow's layout differs;
- fixed-size lists of numbers, and lists that all have one length: a tensor with one
  more dim per list level;
- strings, binary and other Python values: non-tensor data, one value per row;
- structs: a nested container (so nested keys round-trip without a separator).

Anything else (nulls in a number column, ragged lists, decimals, maps, unions) is
refused with an error naming the column and what was expected.

``to_arrow`` is the inverse; the batch sizes of every node and the dtypes Arrow lacks
(``bfloat16``) travel in the schema metadata, so ``from_arrow(to_arrow(td))`` gives
back the same tree.

>>> import pyarrow as pa
>>> from tensorbox.interop.arrow import from_arrow, to_arrow
>>> td = from_arrow(pa.table({"obs.x": [0.0, 1.0, 2.0], "name": ["a", "b", "c"]}), separator=".")
>>> td["obs", "x"].tolist(), td[1]["name"]
([0.0, 1.0, 2.0], 'b')
>>> table = to_arrow(td)
>>> table.column_names
['obs', 'name']
>>> from_arrow(table)[2]["name"]
'c'
"""

from __future__ import annotations

import contextvars
import json
import math
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData
from tensorbox.errors import BatchSizeError, FormatError
from tensorbox.interop._columns import (
    CATEGORIES,
    COLUMNS_KEY,
    WHERE,
    arrow_type,
    check_names,
    container_of,
    info_array,
    jsonable,
    node_infos,
    parse_meta,
    place_infos,
    restore_temporal,
    split,
    temporal,
    type_json,
)
from tensorbox.interop._extras import require
from tensorbox.interop._pandas import from_pandas, to_pandas  # defined there, exported here

__all__ = ["from_arrow", "from_pandas", "to_arrow", "to_pandas"]

#: Schema metadata key holding what Arrow cannot say (batch sizes, torch dtypes).
META_KEY = b"tensorbox"

_TORCH_OF_NUMPY = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.uint16): torch.uint16,
    np.dtype(np.uint32): torch.uint32,
    np.dtype(np.uint64): torch.uint64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
}
_NUMPY_OF_TORCH = {v: k for k, v in _TORCH_OF_NUMPY.items()}
#: torch dtypes Arrow has no type for, stored as same-width integers plus a note.
_STORED_AS = {torch.bfloat16: torch.int16}

_UNSUPPORTED = (
    "expected fixed-width numbers or bool without nulls, strings/binary, dictionary "
    "(categorical), temporal, (fixed-size) lists of numbers or structs of those"
)


#: ``from_arrow(copy=False)``: view immutable (memory-mapped) buffers too.
_VIEW_IMMUTABLE: contextvars.ContextVar[bool] = contextvars.ContextVar("view", default=False)


def _pa() -> Any:
    return require("pyarrow", "arrow")


# ------------------------------------------------------------------ Arrow -> tree


def _is_tensor_collection_class(cls: Any) -> bool:
    return bool(getattr(cls, "_is_tensor_collection", False))


def _frombuffer(buf: Any, dtype: torch.dtype, count: int, offset: int) -> Tensor:
    """A tensor over ``count`` items of Arrow buffer ``buf`` (no copy; a copy of an
    immutable buffer unless ``from_arrow(copy=False)`` asked for views of everything)."""
    if count == 0:
        return torch.empty(0, dtype=dtype)
    if buf.is_mutable:
        return torch.frombuffer(buf, dtype=dtype, count=count, offset=offset)
    if _VIEW_IMMUTABLE.get() is not True:
        raw = np.frombuffer(buf, dtype=_NUMPY_OF_TORCH[dtype], count=count, offset=offset)
        return torch.from_numpy(raw.copy())
    # copy=False: an immutable Arrow buffer (a memory-mapped file, as Hugging Face
    # datasets use) is read-only memory, viewed all the same (the caller's contract: no
    # write into it: torch has no read-only tensors and the write would crash).
    view = np.frombuffer(buf, dtype=_NUMPY_OF_TORCH[dtype], count=count, offset=offset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(view)


def _primitive(arr: Any, name: str, where: str) -> Tensor:
    """One Arrow array of fixed-width numbers as a tensor, sharing its buffer."""
    pa = _pa()
    if arr.null_count:
        raise ValueError(
            f"{where}: column {name!r} has {arr.null_count} null value(s) and a tensor "
            "has no null: fill them first (pyarrow.compute.fill_null / DataFrame.fillna) "
            "or drop those rows"
        )
    t = arr.type
    if pa.types.is_boolean(t):  # Arrow packs bools in bits: one copy
        return torch.from_numpy(arr.to_numpy(zero_copy_only=False).copy())
    if pa.types.is_dictionary(t) or pa.types.is_temporal(t):
        # a top-level one is a column of its own (_node); inside lists its categories or
        # unit would have nowhere to go
        raise TypeError(
            f"{where}: column {name!r} holds lists of {t} values, which have no tensor form "
            "(their categories or unit would be lost); decode them into numbers first"
        )
    try:
        np_dtype = np.dtype(t.to_pandas_dtype())
        dtype = _TORCH_OF_NUMPY[np_dtype]
    except (NotImplementedError, KeyError, TypeError):
        raise TypeError(
            f"{where}: column {name!r} has Arrow type {t}, which has no tensor form; {_UNSUPPORTED}"
        ) from None
    return _frombuffer(arr.buffers()[1], dtype, len(arr), arr.offset * np_dtype.itemsize)


def _one_chunk(col: Any) -> Any:
    pa = _pa()
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks == 1:
            return col.chunk(0)
        if col.num_chunks == 0:
            return pa.array([], type=col.type)
        return pa.concat_arrays(col.chunks)  # one copy: a tensor needs one buffer
    return col


def _list_values(arr: Any, name: str, where: str, ragged: str) -> Tensor:
    """A column of lists: one tensor with one more dim per list level."""
    pa = _pa()
    n = len(arr)
    if arr.null_count:
        raise ValueError(
            f"{where}: column {name!r} has {arr.null_count} null list(s); fill them first "
            "(pyarrow.compute.fill_null) or drop those rows"
        )
    if pa.types.is_fixed_size_list(arr.type):
        width = arr.type.list_size
        values = arr.flatten()
    else:
        lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
        width = int(lengths[0]) if n else 0
        if n and (lengths != width).any():
            if ragged == "jagged":
                inner = _column_tensor(arr.flatten(), name, where, ragged)
                offsets = torch.zeros(n + 1, dtype=torch.int64)
                offsets[1:] = torch.from_numpy(np.cumsum(lengths, dtype=np.int64))
                return torch.nested.nested_tensor_from_jagged(inner, offsets)
            raise ValueError(
                f"{where}: column {name!r} holds lists of different lengths "
                f"({int(lengths.min())} to {int(lengths.max())}); pad them to one length, "
                "or pass ragged='jagged' to read the column as a jagged tensor"
            )
        values = arr.flatten()
    inner = _column_tensor(values, name, where, ragged)
    return inner.reshape(n, width, *inner.shape[1:])


def _column_tensor(arr: Any, name: str, where: str, ragged: str) -> Tensor:
    pa = _pa()
    t = arr.type
    if isinstance(t, pa.FixedShapeTensorType):  # what tensordict's to_arrow writes
        flat = _list_values(arr.storage, name, where, ragged)
        return flat.reshape(len(arr), *t.shape)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _list_values(arr, name, where, ragged)
    return _primitive(arr, name, where)


def _is_object_type(t: Any) -> bool:
    """Columns kept as Python values (one per row): strings, binary, and lists of those."""
    pa = _pa()
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_null(t)
    ):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _is_object_type(t.value_type)
    return False


def _objects(arr: Any, shape: tuple[int, ...]) -> NonTensorData:
    values = arr.to_pylist()
    out = np.empty(len(values), dtype=object)
    out[:] = [None] * len(values)
    for i, v in enumerate(values):
        out[i] = v
    if len(shape) > 1 and all(isinstance(v, list) for v in values):
        out = np.array(values, dtype=object).reshape(shape)
    return NonTensorData(out, stacked=True)


def _node(
    arrays: Mapping[str, Any],
    path: tuple[str, ...],
    meta: dict[str, Any],
    where: str,
    dtype: torch.dtype | None,
    ragged: str,
    rows: int,
) -> dict[str, Any]:
    """The entries of one node (its column infos under ``COLUMNS_KEY``, a plain dict)."""
    pa = _pa()
    node_bs = _rows_first(meta.get("nodes", {}).get("/".join(path), [rows]), rows)
    out: dict[str, Any] = {}
    infos: dict[str, Any] = {}
    for name, col in arrays.items():
        key_path = (*path, name)
        label = ".".join(key_path)
        arr = _one_chunk(col)
        t = arr.type
        recorded = meta.get("columns", {}).get(label)
        if recorded is not None and recorded.get("kind") not in _kinds_of(t):
            raise FormatError(
                f"{where}: the schema metadata records column {label!r} as "
                f"{recorded['kind']}, but its Arrow type is {t}"
            )
        kept_as_values = (  # a pandas object column: its lists, dicts or numbers stay values
            recorded is not None
            and recorded.get("pandas") == "object"
            and not (pa.types.is_dictionary(t) or pa.types.is_temporal(t))
        )
        if pa.types.is_struct(t) and not kept_as_values:
            if arr.null_count:
                raise ValueError(
                    f"{where}: column {label!r} has {arr.null_count} null struct(s); "
                    "fill them first or drop those rows"
                )
            names = [t.field(i).name for i in range(t.num_fields)]
            check_names(((f"{label}.{n}", n) for n in names), None, where)
            children = {n: arr.field(i) for i, n in enumerate(names)}
            out[name] = _node(children, key_path, meta, where, dtype, ragged, rows)
            continue
        tensor: Tensor | NonTensorData
        if _is_object_type(t) or kept_as_values:
            tensor = _objects(arr, node_bs)
            if t != pa.string() or arr.null_count == len(arr):  # what values cannot say
                kept = type_json(t)
                if kept is not None:
                    infos[name] = {"arrow": kept}
        elif pa.types.is_temporal(t):
            ns, infos[name] = temporal(arr, label, where)
            tensor = torch.from_numpy(ns)
            if recorded is not None and "kind" in recorded:
                infos[name] = _written_as(infos[name], recorded, label, where)
        elif pa.types.is_dictionary(t):
            tensor, infos[name] = _categorical(arr, label, recorded, where)
        else:
            values = _trusted(_column_tensor(arr, label, where, ragged), label, meta, t, where)
            if dtype is not None and values.dtype is not torch.bool and not values.is_nested:
                values = values.to(dtype)
            tensor = values
        for field in ("index", "pandas", "name"):  # what only the metadata says
            if recorded is not None and field in recorded:
                infos[name] = {**infos.get(name, {}), field: recorded[field]}
        out[name] = tensor
    if infos:
        out[COLUMNS_KEY] = infos
    return _Nested(out, node_bs) if path else out


def _kinds_of(t: Any) -> tuple[str | None, ...]:
    """The recorded kinds a column of Arrow type ``t`` may carry: Parquet keeps a
    dictionary of numbers as plain values (re-encoded by the reader), and stores
    ``timestamp[s]`` as ``[ms]``, ``date64`` as ``date32``, ``time32[s]`` as ``[ms]``."""
    pa = _pa()
    if pa.types.is_dictionary(t):
        return (None, "category")
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return (None, "timestamp" if pa.types.is_timestamp(t) else "duration")
    if pa.types.is_date(t):
        return (None, "date32", "date64")
    if pa.types.is_time(t):
        return (None, "time32", "time64")
    return (None,)


def _written_as(
    info: dict[str, Any], recorded: dict[str, Any], label: str, where: str
) -> dict[str, Any]:
    """The info of a temporal column as ``to_arrow`` recorded it (its unit, which a
    Parquet file may have widened), once the recorded zone is checked to be the column's;
    ``to_arrow``/``to_pandas`` refuse values that are not whole units of it."""
    if recorded.get("tz") != info.get("tz"):
        raise FormatError(
            f"{where}: the schema metadata records column {label!r} in time zone "
            f"{recorded.get('tz')!r}, but its Arrow type has {info.get('tz')!r}"
        )
    return {k: v for k, v in recorded.items() if k not in ("index", "pandas", "name")}


def _rows_first(shape: list[int], rows: int) -> tuple[int, ...]:
    """A recorded batch size with this table's rows first: a row group or a batch of
    a file holds fewer rows than the file ``to_arrow`` recorded it for."""
    return (rows, *shape[1:]) if shape else tuple(shape)


def _trusted(tensor: Tensor, label: str, meta: dict[str, Any], t: Any, where: str) -> Tensor:
    """The column's tensor as the schema metadata describes it (bfloat16 kept as int16,
    trailing dims), once the metadata is checked against what the column holds."""
    stored = meta.get("dtypes", {}).get(label)
    if stored is not None:
        if tensor.dtype is not _STORED_AS[torch.bfloat16]:
            raise FormatError(
                f"{where}: the schema metadata says column {label!r} holds {stored} (stored "
                f"as int16), but its Arrow type is {t}"
            )
        tensor = tensor.view(torch.bfloat16)
    shape = meta.get("shapes", {}).get(label)
    if shape:  # its rows are those of this table (a row group of the file, a batch)
        shape = [tensor.shape[0], *shape[1:]]
    if shape is not None and list(tensor.shape) != shape:
        if not shape or math.prod(shape) != tensor.numel():
            raise FormatError(
                f"{where}: the schema metadata gives column {label!r} shape {shape}, but "
                f"it holds {list(tensor.shape)} values"
            )
        tensor = tensor.reshape(shape)
    return tensor


def _categorical(
    arr: Any, label: str, recorded: dict[str, Any] | None, where: str
) -> tuple[Tensor, dict[str, Any]]:
    """A dictionary column as its codes (``-1``: null) and its categories. The codes are
    those of the categories the file recorded or every piece of it shares, when known, so
    that one category has one code in every row group and batch."""
    pa = _pa()
    pc = require("pyarrow.compute", "arrow")
    dictionary = arr.dictionary
    target = (CATEGORIES.get() or {}).get(label)
    values_info = None  # the temporal type of recorded categories held as nanoseconds
    if target is None and recorded is not None:
        target = recorded.get("categories")
        values_info = recorded.get("values")
    if target is None and (dictionary.null_count or len(dictionary.unique()) < len(dictionary)):
        # a null value in the dictionary is a null (Arrow's reading); a repeated one is one
        # category: pandas takes neither as categories
        target = dictionary.drop_null().unique().to_pylist()
    indices = pc.fill_null(arr.indices, 0) if arr.null_count else arr.indices
    idx = np.array(indices.to_numpy(zero_copy_only=False))  # a copy: the codes are ours
    if target is not None:
        value_set = _value_set(target, values_info, dictionary.type, label, where)
        transpose = pc.index_in(dictionary, value_set=value_set)
        strays = pc.and_(transpose.is_null(), dictionary.is_valid())
        if pc.any(strays).as_py():
            stray = dictionary.filter(strays)[0]
            raise FormatError(
                f"{where}: column {label!r} holds {stray}, which is not among its recorded "
                f"categories ({len(target)} of them)"
            )
        if len(transpose):  # a null value of the dictionary: code -1
            idx = np.asarray(pc.fill_null(transpose, -1).to_numpy(zero_copy_only=False))[idx]
        categories = list(target)
    else:
        value_set, categories = dictionary, dictionary.to_pylist()
    index_dtype = np.dtype(arr.type.index_type.to_pandas_dtype())
    code_dtype = index_dtype if index_dtype.kind == "i" else np.dtype(np.int64)
    if len(categories) > np.iinfo(code_dtype).max:  # a file's union outgrew the index type
        code_dtype = np.dtype(np.int64)
    codes = idx.astype(code_dtype, copy=False)
    if arr.null_count:
        codes[np.asarray(arr.is_null().to_numpy(zero_copy_only=False))] = -1
    info = {"kind": "category", "categories": categories, "ordered": bool(arr.type.ordered)}
    if not categories and type_json(dictionary.type) is not None:  # what no value says
        info["arrow"] = type_json(dictionary.type)
    if values_info is not None:  # recorded as nanoseconds (Parquet: durations as int64)
        info["values"] = values_info
    elif pa.types.is_temporal(dictionary.type):  # datetimes as nanoseconds, as the entries
        ns, values = temporal(value_set, f"{label} (its categories)", where)
        info.update(categories=ns.tolist(), values=values)
    return torch.from_numpy(codes), info


def _value_set(
    target: list[Any], values_info: dict[str, Any] | None, t: Any, label: str, where: str
) -> Any:
    """The categories ``target`` as an Arrow array of the dictionary's type ``t``: those
    of a temporal column are recorded as nanoseconds of the type ``values_info`` names."""
    pa = _pa()
    if pa.types.is_temporal(t) and values_info is None and any(type(v) is int for v in target):
        raise FormatError(
            f"{where}: the categories recorded for column {label!r} are numbers, but not "
            f"the type of time they count; its dictionary holds {t}"
        )
    if values_info is not None and not (
        pa.types.is_temporal(t) or (t == pa.int64() and values_info["kind"] == "duration")
    ):  # Parquet keeps durations as int64; any other type is not what the record says
        raise FormatError(
            f"{where}: the categories recorded for column {label!r} are {values_info['kind']} "
            f"values, but its dictionary holds {t}"
        )
    try:
        if values_info is None:
            return pa.array(target, type=t)
        ns = np.asarray(target, dtype=np.int64)
        return restore_temporal(ns, values_info, label, where).cast(t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError) as err:
        raise FormatError(
            f"{where}: the categories recorded for column {label!r} are not {t} values ({err})"
        ) from None


class _Nested(dict):  # type: ignore[type-arg]
    """A nested node's entries plus its batch size (turned into a TensorDict at the end)."""

    def __init__(self, entries: dict[str, Any], batch_size: tuple[int, ...]) -> None:
        super().__init__(entries)
        self.batch_size = batch_size


def _copied(source: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = _Nested({}, source.batch_size) if isinstance(source, _Nested) else {}
    for k, v in source.items():
        if isinstance(v, dict):
            out[k] = _copied(v)
        elif isinstance(v, Tensor):
            out[k] = v.clone()
        else:
            out[k] = v
    return out


def _build(source: dict[str, Any]) -> dict[str, Any]:
    from tensorbox._core.tensordict import TensorDict

    out: dict[str, Any] = {}
    for k, v in source.items():
        if k == COLUMNS_KEY:
            out[k] = NonTensorData(v)
        elif isinstance(v, _Nested):
            out[k] = TensorDict(_build(v), batch_size=v.batch_size)
        else:
            out[k] = v
    return out


def from_arrow(
    table: Any,
    *,
    batch_size: Any = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    separator: str | None = None,
    dtype: torch.dtype | None = None,
    ragged: str = "error",
    copy: bool | None = None,
    cls: Any = None,
) -> Any:
    """A container of the columns of an Arrow ``Table`` or ``RecordBatch``, one row per
    batch element. Fixed-width number columns without nulls are not copied: their tensors
    view the Arrow buffers (as tensordict's ``copy=None``: the mutable ones; an immutable
    buffer, such as a memory-mapped file's, is copied unless ``copy=False``).

    Args:
        table: a ``pyarrow.Table`` or ``RecordBatch`` (a Hugging Face dataset's
            ``.data.table`` is one).
        batch_size: default ``[num_rows]`` (or what ``to_arrow`` recorded).
        auto_batch_size: infer the batch size from the leaves instead.
        batch_dims: with ``auto_batch_size``, at most this many dims.
        device: move every tensor there.
        separator: split column names on it into nested keys (``"obs.x"`` -> ``obs/x``).
        dtype: cast every number column to this dtype (bools are left alone).
        ragged: ``"error"`` (default) refuses list columns of different lengths;
            ``"jagged"`` reads them as jagged (nested) tensors.
        copy: ``None`` (default) views mutable buffers and copies immutable ones;
            ``True`` copies every column; ``False`` views every column it can, memory-
            mapped ones included: a write into such a view then crashes the process
            (torch has no read-only tensors), so only read them.
        cls: the container class to build (TensorDict, or a tensorclass).

    >>> import pyarrow as pa
    >>> td = from_arrow(pa.table({"obs.x": [1.0, 2.0], "label": ["cat", "dog"]}), separator=".")
    >>> td["obs", "x"].tolist(), td[0]["label"]
    ([1.0, 2.0], 'cat')
    """
    pa = _pa()
    if ragged not in ("error", "jagged"):
        raise ValueError(f"from_arrow: ragged={ragged!r}; expected 'error' or 'jagged'")
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise TypeError(
            f"from_arrow: expected a pyarrow.Table or RecordBatch, got {type(table).__name__}"
        )
    where = WHERE.get() or "from_arrow"
    meta = parse_meta((table.schema.metadata or {}).get(META_KEY), where)
    check_names(((n, n) for n in table.column_names), separator, where)
    rows = table.num_rows
    if not table.num_columns and meta.get("batch_size"):  # Parquet keeps no rows without columns
        rows = meta["batch_size"][0]
    columns = dict(zip(table.column_names, table.columns))
    token = _VIEW_IMMUTABLE.set(copy is False)
    try:
        source = _node(columns, (), meta, where, dtype, ragged, rows)
    finally:
        _VIEW_IMMUTABLE.reset(token)
    infos = source.pop(COLUMNS_KEY, {})
    if copy:
        source = _copied(source)
    recorded = batch_size is None and not auto_batch_size and "batch_size" in meta
    if batch_size is None and not auto_batch_size:
        batch_size = _rows_first(meta.get("batch_size", [rows]), rows)
    source = place_infos(split(_build(source), separator), infos, separator)
    try:
        return container_of(cls, source, batch_size, device, auto_batch_size, batch_dims, where)
    except BatchSizeError as err:
        if not recorded:
            raise
        raise FormatError(
            f"{where}: the schema metadata's batch_size {meta['batch_size']} does not fit "
            f"the columns ({err})"
        ) from None


# ------------------------------------------------------------------ tree -> Arrow


def _tensor_array(t: Tensor, rows: int, key: str, meta: dict[str, Any]) -> Any:
    pa = _pa()
    t = t.detach()
    if t.is_nested:
        raise TypeError(f"to_arrow: entry {key!r} is a jagged tensor; pad it first")
    t = t.cpu()
    if t.dtype in _STORED_AS:
        meta.setdefault("dtypes", {})[key] = str(t.dtype).removeprefix("torch.")
        t = t.view(_STORED_AS[t.dtype])
    if t.dtype not in _NUMPY_OF_TORCH or t.is_complex():
        raise TypeError(
            f"to_arrow: entry {key!r} has dtype {t.dtype}, which Arrow cannot hold; expected "
            "bool, integers, float16/32/64 or bfloat16"
        )
    if t.dim() == 0 or t.shape[0] != rows:
        raise ValueError(
            f"to_arrow: entry {key!r} of shape {list(t.shape)} does not have {rows} rows"
        )
    if 0 in t.shape[1:]:  # pyarrow cannot build a fixed-size list of size 0 (it crashes)
        raise ValueError(
            f"to_arrow: entry {key!r} of shape {list(t.shape)} has an empty trailing dim, "
            "which Arrow's fixed-size lists cannot hold; drop the entry or that dim first"
        )
    if t.dim() > 2:
        meta.setdefault("shapes", {})[key] = list(t.shape)
    values = pa.array(t.contiguous().reshape(-1).numpy())
    for width in reversed(t.shape[1:]):
        values = pa.FixedSizeListArray.from_arrays(values, int(width))
    return values


def _object_array(value: NonTensorData, rows: int, key: str, t: Any = None) -> Any:
    """A column of Python values, of Arrow type ``t`` (what ``from_arrow`` recorded)
    or the one Arrow infers."""
    pa = _pa()
    data = value.data.tolist() if value.stacked else [value.data] * rows
    if value.stacked and value.data.ndim == 0:
        data = [data] * rows
    try:
        return pa.array(data, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
        raise TypeError(
            f"to_arrow: non-tensor entry {key!r} ({type(value.data).__name__}) has no Arrow "
            f"form; expected str, bytes, numbers, bool, None or lists of them ({err})"
        ) from None


def _recorded(info: dict[str, Any]) -> dict[str, Any]:
    """What of a column info goes into the schema metadata (the Arrow type says the
    rest): the index name, the pandas dtype, and a categorical's categories, as Parquet
    keeps only those a row group uses, in its own order."""
    out: dict[str, Any] = {k: info[k] for k in ("index", "pandas", "name") if k in info}
    if info.get("kind") != "category" or jsonable(info["categories"]):
        out.update(info)  # a unit Parquet widens (``s`` to ``ms``), categories, ordered
    return out


def _arrays(
    td: Any,
    rows: int,
    prefix: tuple[str, ...],
    meta: dict[str, Any],
    separator: str | None,
    out: dict[str, Any],
) -> dict[str, Any]:
    pa = _pa()
    infos = node_infos(td, "to_arrow")
    for name, value in td._tensordict.items():
        if name == COLUMNS_KEY:
            continue
        path = (*prefix, name)
        key = separator.join(path) if separator is not None else ".".join(path)
        info = infos.get(name)
        if info is not None and _recorded(info):
            meta.setdefault("columns", {})[key] = _recorded(info)
        if isinstance(value, Tensor) and info is not None and "kind" in info:
            arr = info_array(value, rows, key, info, "to_arrow")
        elif isinstance(value, Tensor):
            arr = _tensor_array(value, rows, key, meta)
        elif isinstance(value, NonTensorData):
            kept = None if info is None or "arrow" not in info else arrow_type(info["arrow"])
            arr = _object_array(value, rows, key, kept)
        elif getattr(type(value), "_is_tensor_collection", False):
            meta.setdefault("nodes", {})["/".join(path)] = list(value.batch_size)
            if separator is not None:
                _arrays(value, rows, path, meta, separator, out)
                continue
            children = _arrays(value, rows, path, meta, None, {})
            arr = (
                pa.StructArray.from_arrays(list(children.values()), names=list(children))
                if children
                else pa.array([{}] * rows, type=pa.struct([]))
            )
            out[name] = arr
            continue
        else:
            raise TypeError(f"to_arrow: entry {key!r} of type {type(value).__name__}")
        out[key if separator is not None else name] = arr
    return out


def to_arrow(td: Any, *, separator: str | None = None) -> Any:
    """The container as a ``pyarrow.Table``, one row per element of the first batch dim.

    Number tensors are handed to Arrow without a copy where their memory allows it
    (contiguous, on the CPU). Trailing dims become fixed-size list columns, nested
    containers struct columns (or flat ``"a.b"`` columns with ``separator="."``),
    non-tensor entries columns of Python values. Batch sizes and ``bfloat16`` are
    recorded in the schema metadata for ``from_arrow``.

    >>> import torch; from tensorbox import TensorDict
    >>> t = to_arrow(TensorDict({"a": torch.zeros(2, 3), "b": {"c": torch.ones(2)}}, [2]))
    >>> [str(f.type) for f in t.schema]
    ['fixed_size_list<item: float>[3]', 'struct<c: float>']
    """
    pa = _pa()
    bs = list(td.batch_size)
    if not bs:
        raise ValueError(
            "to_arrow: the container has no batch dim, and the first batch dim gives the "
            "rows; add one (td.unsqueeze(0)) first"
        )
    meta: dict[str, Any] = {"batch_size": bs}
    arrays = _arrays(td, bs[0], (), meta, separator, {})
    table = (
        pa.table(arrays)
        if arrays
        else pa.table({"__rows__": pa.nulls(bs[0])}).select([])  # rows, no columns
    )
    return table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})


def _raw_leaves(td: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``(path, stored value)`` of every leaf, in insertion order."""
    for name, value in td._tensordict.items():
        path = (*prefix, name)
        if isinstance(value, Tensor | NonTensorData) or not getattr(
            type(value), "_is_tensor_collection", False
        ):
            yield path, value
        else:
            yield from _raw_leaves(value, path)
