"""pandas ``DataFrame`` to and from containers (re-exported by ``tensorbox.interop.arrow``).

The columns whose tensor does not say everything (categoricals, datetimes, the index)
travel with a column info (``tensorbox.interop._columns``), as Arrow's do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData
from tensorbox.errors import FormatError
from tensorbox.interop._columns import (
    COLUMNS_KEY,
    NO_LABEL,
    WHERE,
    check_codes,
    check_names,
    container_of,
    info_array,
    json_label,
    node_infos,
    numpy_temporal,
    pandas_label,
    place_infos,
    split,
    temporal,
)
from tensorbox.interop._extras import require

__all__ = ["from_pandas", "to_pandas"]

_UNSUPPORTED = "expected numbers, bool, strings, categoricals or datetimes"


def _pa() -> Any:
    return require("pyarrow", "arrow")


def _series_value(s: Any, name: str, where: str) -> tuple[Any, dict[str, Any] | None]:
    """One column as an entry, and the column info that restores its pandas type."""
    pd = require("pandas", "arrow")
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        info = {
            "kind": "category",
            "categories": dt.categories.tolist(),
            "ordered": bool(dt.ordered),
        }
        if dt.categories.dtype.kind in "mM":  # as the entries: nanoseconds and their type
            ns, values = temporal(_pa().array(dt.categories), f"{name} (its categories)", where)
            info.update(categories=ns.tolist(), values=values)
        return torch.from_numpy(s.cat.codes.to_numpy().copy()), info
    if isinstance(dt, pd.IntervalDtype | pd.PeriodDtype):
        raise TypeError(
            f"{where}: column {name!r} holds {dt} values, which have no tensor form; split "
            "it into columns of numbers first (.array.left / .array.right, or .dt.start_time)"
        )
    if isinstance(dt, np.dtype) and dt.kind in "mM":
        ns, info = numpy_temporal(s.to_numpy(), name, where)
        return torch.from_numpy(ns), info
    if isinstance(dt, pd.DatetimeTZDtype):
        ns, info = temporal(_pa().array(s, from_pandas=True), name, where)
        return torch.from_numpy(ns), info
    if isinstance(dt, np.dtype):
        if dt.kind in "biufc":
            return torch.from_numpy(np.array(s.to_numpy(), copy=True)), None
        if dt.kind == "O":
            return _objects(s, dt, name, where)
        raise TypeError(
            f"{where}: column {name!r} has dtype {dt}, which has no tensor form; {_UNSUPPORTED}"
        )
    numpy_dtype = getattr(dt, "numpy_dtype", None)
    if numpy_dtype is not None and numpy_dtype.kind in "biuf":  # nullable Int64, Float64...
        if s.isna().any():
            raise ValueError(
                f"{where}: column {name!r} has {int(s.isna().sum())} missing value(s) and a "
                "tensor has no null: fill them first (DataFrame.fillna) or drop those rows"
            )
        info = {"pandas": _dtype_name(dt, name, where)}  # to_pandas restores the dtype
        return torch.from_numpy(s.to_numpy(dtype=numpy_dtype).copy()), info
    arrow_type = getattr(dt, "pyarrow_dtype", None)
    if arrow_type is not None and _pa().types.is_temporal(arrow_type):  # pyarrow-backed
        ns, info = temporal(_pa().array(s, from_pandas=True), name, where)
        return torch.from_numpy(ns), {**info, "pandas": _dtype_name(dt, name, where)}
    # string dtypes and other extension types: the Python values, one per row
    return _objects(s, dt, name, where)


def _objects(
    s: Any, dt: Any, name: str = "", where: str = ""
) -> tuple[NonTensorData, dict[str, Any] | None]:
    """A column of Python values, one per row; its dtype recorded when pandas would not
    infer it again from those values (an object column of numbers, an empty one...).
    A missing value of a string column (``NA`` or ``NaN`` by its dtype) is ``None``,
    the null of JSON and Arrow, so the column can be saved; its dtype makes it ``NA``
    or ``NaN`` again."""
    pd = require("pandas", "arrow")
    values = s.to_numpy(dtype=object).copy()
    if not (isinstance(dt, np.dtype) and dt.kind == "O"):  # an object column's NaN is a value
        values[pd.isna(values)] = None
    inferred = pd.Series(list(values[:1000]) if len(values) else []).dtype
    # an empty column is recorded too: to_pandas of an empty list would give float64
    keep = inferred == dt and 0 < len(values) <= 1000
    if keep and dt == np.dtype(object):  # lists and dicts would read back from Arrow as
        keep = not any(isinstance(v, list | dict) for v in values)  # tensors and nodes
    info = None if keep else {"pandas": _dtype_name(dt, name, where)}
    return NonTensorData(values, stacked=True), info


def _dtype_name(dt: Any, label: str, where: str) -> str:
    """The name that gives pandas dtype ``dt`` back (a ``StringDtype`` with its storage:
    ``"string[python]"``); a ``TypeError`` naming the column for a dtype no name gives
    back (pyarrow-backed dictionaries, structs, lists, decimals)."""
    pd = require("pandas", "arrow")
    name = str(dt)
    if isinstance(dt, pd.StringDtype):
        name = f"string[{dt.storage}]" if dt.na_value is pd.NA else f"str[{dt.storage}]"
    if isinstance(dt, pd.ArrowDtype) and _dtype_of(name) != dt:
        # ArrowDtype(pa.string()) is spelled "string[pyarrow]", the StringDtype's name
        name = f"arrow:{dt.pyarrow_dtype}"
    if _dtype_of(name) != dt:
        raise TypeError(
            f"{where}: column {label!r} has pandas dtype {dt}, which tensorbox cannot "
            "record to give back; convert it first (.astype(object), .astype('category'), "
            "or a numpy dtype)"
        )
    return name


def _dtype_of(name: str) -> Any:
    """The pandas dtype a recorded name gives (``None`` for a name pandas does not know)."""
    pd = require("pandas", "arrow")
    if name in ("str[python]", "str[pyarrow]"):  # pandas spells these with no name
        return pd.StringDtype(name[4:-1], na_value=np.nan)
    if name.startswith("arrow:"):
        try:
            return pd.ArrowDtype(_pa().type_for_alias(name[6:]))
        except (ValueError, KeyError):
            return None
    try:
        return pd.api.types.pandas_dtype(name)
    except (TypeError, ValueError, ImportError, NotImplementedError):
        return None  # NotImplementedError: pandas' own for "decimal128(5, 2)[pyarrow]"


def _frame_columns(dataframe: Any, index: bool) -> list[tuple[Any, str, Any, bool]]:
    """``(original name, key, series, is an index level)`` of each column, the index
    levels first (named as ``DataFrame.reset_index`` names them) when ``index``."""
    pd = require("pandas", "arrow")
    out: list[tuple[Any, str, Any, bool]] = []
    if index:
        idx = dataframe.index
        for i, level in enumerate(idx.names):
            auto = "index" if idx.nlevels == 1 else f"level_{i}"
            key = auto if level is None else str(level)
            series = pd.Series(idx.get_level_values(i), copy=False)
            out.append((level, key, series, True))
    for i, col in enumerate(dataframe.columns.tolist()):  # Python scalars, not numpy's
        out.append((col, str(col), i, False))
    return out


def from_pandas(
    dataframe: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
    separator: str | None = None,
    dtype: torch.dtype | None = None,
    index: bool = False,
    cls: Any = None,
) -> Any:
    """A container of a pandas ``DataFrame``'s columns, one row per batch element.

    Number and bool columns become tensors (copied: pandas hands out read-only arrays),
    strings and objects non-tensor data (one value per row). A categorical becomes its
    integer codes (``-1``: missing, as pandas), a datetime (any unit, any zone) or
    timedelta int64 nanoseconds (since the epoch in UTC); the categories, unit and zone
    are recorded beside the entries (under the key ``"__columns__"``) and ``to_pandas``/
    ``to_arrow`` restore the column. ``NaT``, a datetime outside int64 nanoseconds, and
    interval or period columns are refused, naming the column.

    The index is dropped, as tensordict does, unless ``index=True``: then each level is
    an entry (named as ``DataFrame.reset_index`` names it) and ``to_pandas`` makes it the
    index again. Two columns that would land on one key (duplicate names, ``1`` and
    ``"1"``, ``"a"`` and ``"a.b"`` with ``separator="."``) are refused, naming both.
    ``separator`` nests ``"obs.x"`` as ``obs/x``; ``dtype`` casts every number column
    (not codes, not datetimes).

    >>> import pandas as pd
    >>> from tensorbox.interop.arrow import from_pandas, to_pandas
    >>> td = from_pandas(pd.DataFrame({"a": [1, 2, 3], "name": ["x", "y", "z"]}))
    >>> td.batch_size, td["a"].dtype, td[2]["name"]
    (torch.Size([3]), torch.int64, 'z')
    >>> df = pd.DataFrame({"kind": pd.Categorical(["b", "a", "b"])})
    >>> td = from_pandas(df)
    >>> td["kind"].tolist(), to_pandas(td)["kind"].tolist()
    ([1, 0, 1], ['b', 'a', 'b'])
    """
    pd = require("pandas", "arrow")
    where = WHERE.get() or "from_pandas"
    if not isinstance(dataframe, pd.DataFrame):
        raise TypeError(f"{where}: expected a pandas DataFrame, got {type(dataframe).__name__}")
    columns = _frame_columns(dataframe, index)
    check_names(((key if o is None else o, key) for o, key, _, _ in columns), separator, where)
    source: dict[str, Any] = {}
    infos: dict[str, Any] = {}
    for original, key, series, is_index in columns:
        if not is_index:
            series = dataframe.iloc[:, series]
        value, info = _series_value(series, key, where)
        if dtype is not None and "kind" not in (info or {}) and _is_number(value):
            value, info = value.to(dtype), None  # cast: no longer the nullable dtype
        label = json_label(original)
        if is_index:  # the level's name, None when it had none
            info = {**(info or {}), "index": key if label is NO_LABEL else label}
        elif label is NO_LABEL or (
            isinstance(original, tuple) and not isinstance(dataframe.columns, pd.MultiIndex)
        ):  # a tuple outside a MultiIndex would come back as one
            raise TypeError(
                f"{where}: column {original!r} has a label of type {type(original).__name__}, "
                "which tensorbox cannot record to give back (labels are kept as JSON: "
                "strings, numbers, bools, tuples of those); rename the columns first "
                "(df.columns = df.columns.astype(str))"
            )
        elif not isinstance(original, str):
            info = {**(info or {}), "name": label}  # 1, not "1"; ("a", "b"), not a string
        if info is not None:
            infos[key] = info
        source[key] = value
    if batch_size is None and not auto_batch_size:
        batch_size = [len(dataframe)]
    source = place_infos(split(source, separator), infos, separator)
    return container_of(cls, source, batch_size, device, auto_batch_size, batch_dims, where)


def _is_number(value: Any) -> bool:
    return isinstance(value, Tensor) and value.dtype is not torch.bool


def _columns(
    td: Any,
    prefix: tuple[str, ...],
    separator: str | None,
    where: str,
    out: dict[str, Any],
    index: list[tuple[str, Any]],
    labels: dict[str, Any],
) -> dict[str, Any]:
    """One 1-D column per leaf (numpy arrays, lists, or the pandas values a column info
    restores); the columns that were an index go into ``index``."""
    pd = require("pandas", "arrow")
    rows = td.batch_size[0] if td.batch_dims else 1
    infos = node_infos(td, where)
    for name, value in td._tensordict.items():
        if name == COLUMNS_KEY:
            continue
        path = (*prefix, name)
        if getattr(type(value), "_is_tensor_collection", False):
            if separator is None:
                raise ValueError(
                    f"{where}: entry {path!r} is nested; pass separator='.' (or another) "
                    "to join nested keys into column names"
                )
            _columns(value, path, separator, where, out, index, labels)
            continue
        col = separator.join(path) if separator is not None else name
        info = infos.get(name, {})
        if col in out:  # "a.b" beside a -> b (separator "."), or a label recorded for another
            raise ValueError(
                f"{where}: two entries would both be column {col!r} (a key holding the "
                "separator beside a nested one, or the label recorded for another entry); "
                "rename one"
            )
        if isinstance(value, NonTensorData):
            out[col] = value.tolist() if value.stacked else [value.data] * rows
        elif not isinstance(value, Tensor):
            raise TypeError(f"{where}: entry {col!r} of type {type(value).__name__}")
        elif value.dim() != 1:
            raise ValueError(
                f"{where}: Cannot convert tensor {col!r} of shape {list(value.shape)} "
                "to a column: expected one dim (the rows); flatten or split it first"
            )
        elif info.get("kind") == "category":
            codes = value.detach().cpu().numpy()
            if value.dtype.is_floating_point or value.dtype is torch.bool:
                raise TypeError(f"{where}: entry {col!r} holds categorical codes of {value.dtype}")
            check_codes(codes, len(info["categories"]), col, where)
            try:
                categories = (
                    pd.Index(info_array(value[:0], 0, col, info, where).dictionary.to_pandas())
                    if "values" in info  # datetime categories, from their nanoseconds
                    else pd.Index(info["categories"])
                )
                out[col] = pd.Categorical.from_codes(
                    codes,
                    categories=categories,
                    ordered=info.get("ordered", False),
                )
            except ValueError as err:  # categories pandas refuses (NaN among them...)
                raise ValueError(f"{where}: entry {col!r}: {err}") from None
        elif "kind" in info:  # Arrow's cast checks the units and is the fastest here
            out[col] = _temporal_column(info_array(value, rows, col, info, where), info, col, where)
            info = {k: v for k, v in info.items() if k != "pandas"}  # restored there
        else:
            value = value.detach().cpu()
            out[col] = (value.float() if value.dtype is torch.bfloat16 else value).numpy()
        if "pandas" in info:
            out[col] = _as_pandas_dtype(out[col], value, info["pandas"], col, where)
        if "name" in info:  # the frame's own label: 1, ("a", "b")
            labels[col] = pandas_label(info["name"])
        if "index" in info:
            index.append((col, pandas_label(info["index"])))
    return out


def _temporal_column(arr: Any, info: dict[str, Any], col: str, where: str) -> Any:
    """The pandas values of a temporal column: pyarrow-backed when its recorded pandas
    dtype is (``timestamp[ms][pyarrow]``...), numpy's otherwise."""
    pd = require("pandas", "arrow")
    if "pandas" in info:
        dtype = _dtype_of(info["pandas"])
        if not isinstance(dtype, pd.ArrowDtype) or dtype.pyarrow_dtype != arr.type:
            raise FormatError(
                f"{where}: the recorded pandas dtype of column {col!r} is "
                f"{info['pandas']!r}, which does not fit its {arr.type} values"
            )
        return pd.Series(pd.arrays.ArrowExtensionArray(arr), copy=False)
    try:
        return arr.to_pandas()
    except _pa().ArrowInvalid as err:  # a time of day pandas' datetime.time cannot hold
        raise ValueError(
            f"{where}: entry {col!r} ({arr.type}) has no pandas form ({err}); round it to "
            "microseconds first, or read it with to_arrow"
        ) from None


def _as_pandas_dtype(column: Any, value: Any, name: str, col: str, where: str) -> Any:
    """``column`` as the recorded pandas dtype ``name``, once checked to fit the entry: a
    tensor may only become the nullable dtype of its own kind (``Int64`` for integers...),
    Python values only a dtype that holds them as they are (object, strings), so a record
    from a hostile file cannot recast the values."""
    pd = require("pandas", "arrow")
    dtype = _dtype_of(name)
    if isinstance(value, Tensor):
        kind = getattr(getattr(dtype, "numpy_dtype", None), "kind", None)
        fits = kind is not None and kind == np.asarray(column).dtype.kind
    else:
        types = _pa().types
        holds_values = (
            types.is_string,
            types.is_large_string,
            types.is_binary,
            types.is_large_binary,
        )
        fits = dtype is not None and (
            dtype == np.dtype(object)
            or isinstance(dtype, pd.StringDtype)
            or (
                isinstance(dtype, pd.ArrowDtype)
                and any(check(dtype.pyarrow_dtype) for check in holds_values)
            )
        )
    if not fits:
        raise FormatError(
            f"{where}: the recorded pandas dtype of column {col!r} is {name!r}, which does "
            f"not fit its values ({getattr(value, 'dtype', type(value).__name__)}); expected "
            "the nullable dtype of the same kind (Int64, Float32, boolean...), or for "
            "Python values object or a string dtype"
        )
    return pd.Series(column, dtype=dtype, copy=False)


def to_pandas(td: Any, *, separator: str | None = None) -> Any:
    """A pandas ``DataFrame`` with one column per leaf (1-D tensors or non-tensor data).

    Nested keys need ``separator`` to name their columns; a tensor with trailing dims is
    refused (a column holds one value per row). The columns ``from_pandas``/
    ``from_arrow`` recorded come back as they were: categoricals from their codes,
    datetimes in their unit and zone, and the entries that were the index as the index.

    >>> import torch; from tensorbox import TensorDict
    >>> df = to_pandas(TensorDict({"a": torch.arange(2), "n": {"b": torch.ones(2)}}, [2]),
    ...                separator=".")
    >>> list(df.columns)
    ['a', 'n.b']
    """
    return frame_of(td, separator)[0]


def frame_of(td: Any, separator: str | None = None) -> tuple[Any, bool]:
    """``to_pandas(td)``, and whether entries of ``td`` became its index (``to_csv``
    writes the index then, so no entry is left out of the file)."""
    pd = require("pandas", "arrow")
    index: list[tuple[Any, Any]] = []
    labels: dict[str, Any] = {}
    columns = _columns(td, (), separator, "to_pandas", {}, index, labels)
    # rows without columns (``pd.DataFrame(index=range(3))``) keep their count
    rows = None if columns or not td.batch_dims else pd.RangeIndex(td.batch_size[0])
    frame = pd.DataFrame(columns, index=rows)
    if index:
        frame = frame.set_index([col for col, _ in index])
        frame.index.names = [name for _, name in index]
    if labels or index:  # the labels' own Index (int64, a MultiIndex...)
        names = [labels.get(col, col) for col in frame.columns]
        seen: dict[tuple[str, str], str] = {}
        for col, name in zip(frame.columns, names, strict=True):
            other = seen.setdefault((type(name).__name__, repr(name)), col)
            if other != col:
                raise FormatError(
                    f"to_pandas: entries {other!r} and {col!r} would both be column "
                    f"{name!r} (a label recorded for one of them); rename one"
                )
        frame.columns = pd.Index(names, tupleize_cols=True)
    return frame, bool(index)
