"""What a table's column types need beside the tensor: column names that cannot collide,
datetimes as int64 nanoseconds, categoricals as codes, and the record of both.

A column whose tensor does not say everything (a categorical's codes, a datetime's
nanoseconds) gets a *column info* dict, kept in the container under the reserved key
``__columns__`` (one ``NonTensorData`` per node: ``{entry name: info}``), so it travels
with the container (indexing, ``memmap``/``load_memmap``) and ``to_pandas``/``to_arrow``
restore the column:

- ``{"kind": "category", "categories": [...], "ordered": bool}``: the entry holds the
  codes (``-1``: missing, as pandas);
- ``{"kind": "timestamp", "unit": "s"|"ms"|"us"|"ns", "tz": str | None}``,
  ``{"kind": "duration", "unit": ...}``, ``{"kind": "date32"|"date64"}``,
  ``{"kind": "time32"|"time64", "unit": ...}``: the entry holds int64 nanoseconds (since
  the epoch in UTC, or since midnight for times);
- ``"index": name`` (beside or without a kind): the column was the frame's index;
- ``"pandas": dtype name``: a pandas nullable column (``Int64``, ``boolean``...) without
  missing values, made that dtype again by ``to_pandas``.

>>> check_names([("a.b", "a.b"), ("a", "a")], ".", "from_pandas")
Traceback (most recent call last):
...
tensorbox.errors.KeyCollisionError: from_pandas: columns 'a' and 'a.b' would collide: with separator '.', 'a' is both a column and the parent of 'a.b'; rename one
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tensorbox._core.nontensor import NonTensorData
from tensorbox.errors import FormatError, KeyCollisionError
from tensorbox.interop._extras import require

#: The reserved entry holding each node's column infos.
COLUMNS_KEY = "__columns__"

#: Nanoseconds per unit of the Arrow / numpy temporal types.
NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_DAY_NS = 86_400 * 10**9
_INT64_MIN = np.iinfo(np.int64).min
_INT64_MAX = np.iinfo(np.int64).max

_KINDS = frozenset(("category", "timestamp", "duration", "date32", "date64", "time32", "time64"))
_RANGE = "int64 nanoseconds since 1970 (about the years 1677 to 2262)"


def check_names(names: Iterable[tuple[Any, str]], separator: str | None, where: str) -> None:
    """Refuse, before anything is built, two columns that would land on one key:
    ``names`` is ``(original name, key string)`` per column. Equal keys (duplicates, or
    names equal after ``str``: ``1`` and ``"1"``), and, with a separator, a column that
    is also the parent of another (``"a"`` and ``"a.b"``, in either order)."""
    seen: dict[tuple[str, ...], Any] = {}
    for original, name in names:
        path = tuple(name.split(separator)) if separator else (name,)
        if COLUMNS_KEY in path:
            raise ValueError(
                f"{where}: column {original!r}: {COLUMNS_KEY!r} is the key tensorbox keeps "
                "column types under (categories, datetime units); rename the column"
            )
        if path in seen:
            raise KeyCollisionError(
                f"{where}: columns {seen[path]!r} and {original!r} would both become key "
                f"{'/'.join(path)!r}; rename one (or drop the duplicate)"
            )
        seen[path] = original
    for path, original in seen.items():
        for i in range(1, len(path)):
            parent = seen.get(path[:i])
            if parent is not None:
                raise KeyCollisionError(
                    f"{where}: columns {parent!r} and {original!r} would collide: with "
                    f"separator {separator!r}, {parent!r} is both a column and the parent "
                    f"of {original!r}; rename one"
                )


#: Who reads (``from_parquet('f.parquet')``...), for the error messages of ``from_arrow``.
WHERE: contextvars.ContextVar[str | None] = contextvars.ContextVar("where", default=None)
#: ``{column: categories}`` every piece of one file shares (``ParquetRowGroups``), so a
#: category has one code in every row group and batch.
CATEGORIES: contextvars.ContextVar[dict[str, list[Any]] | None] = contextvars.ContextVar(
    "categories", default=None
)


@contextlib.contextmanager
def reading(where: str, categories: dict[str, list[Any]] | None = None) -> Iterator[None]:
    """``from_arrow``/``from_pandas`` calls inside name ``where`` in their errors and code the dictionary
    columns of ``categories`` against those categories (one file read in pieces)."""
    tokens = (WHERE.set(where), CATEGORIES.set(categories or {}))
    try:
        yield
    finally:
        CATEGORIES.reset(tokens[1])
        WHERE.reset(tokens[0])


# ------------------------------------------------------------------ datetimes


def temporal(arr: Any, label: str, where: str) -> tuple[np.ndarray, dict[str, Any]]:
    """An Arrow temporal array as int64 nanoseconds and the info that restores it.

    Nulls (``NaT``) are refused: a tensor has no NaT and tensorbox stores no sentinel.
    A value outside int64 nanoseconds is refused, naming the column."""
    pa = require("pyarrow", "arrow")
    t = arr.type
    if pa.types.is_interval(t):
        raise TypeError(
            f"{where}: column {label!r} holds intervals ({t}), which have no tensor form; "
            "split it into columns of numbers first (interval.left / interval.right, or "
            "months, days and nanoseconds)"
        )
    if arr.null_count:
        raise ValueError(
            f"{where}: column {label!r} has {arr.null_count} null/NaT value(s); a datetime "
            "tensor has no NaT (tensorbox stores no sentinel for it): fill them first "
            "(fillna / pyarrow.compute.fill_null) or drop those rows"
        )
    if pa.types.is_timestamp(t):
        unit, info = t.unit, {"kind": "timestamp", "unit": t.unit, "tz": t.tz}
    elif pa.types.is_duration(t):
        unit, info = t.unit, {"kind": "duration", "unit": t.unit}
    elif pa.types.is_date32(t):
        unit, info = "D", {"kind": "date32"}
    elif pa.types.is_date64(t):
        unit, info = "ms", {"kind": "date64"}
    elif pa.types.is_time(t):
        unit, info = t.unit, {"kind": f"time{t.bit_width}", "unit": t.unit}
    else:
        raise TypeError(f"{where}: column {label!r} has Arrow type {t}, which has no tensor form")
    raw = arr.view(pa.int64() if t.bit_width == 64 else pa.int32())
    values = np.asarray(raw.to_numpy(zero_copy_only=False), dtype=np.int64)
    factor = _DAY_NS if unit == "D" else NS_PER[unit]
    return to_ns(values, factor, label, where, lambda i: arr[i]), info


def numpy_temporal(values: np.ndarray, label: str, where: str) -> tuple[np.ndarray, dict[str, Any]]:
    """A numpy ``datetime64``/``timedelta64`` array (a naive pandas column) as int64
    nanoseconds and its info, as ``temporal`` (no detour through Arrow)."""
    unit, _ = np.datetime_data(values.dtype)
    if unit not in NS_PER:
        raise TypeError(f"{where}: column {label!r} has dtype {values.dtype}; expected s to ns")
    ints = values.view(np.int64)
    if len(ints) and ints.min() == _INT64_MIN:
        raise ValueError(
            f"{where}: column {label!r} has {int((ints == _INT64_MIN).sum())} null/NaT "
            "value(s); a datetime tensor has no NaT (tensorbox stores no sentinel for it): "
            "fill them first (fillna) or drop those rows"
        )
    kind = "timestamp" if values.dtype.kind == "M" else "duration"
    info = {"kind": kind, "unit": unit, **({"tz": None} if kind == "timestamp" else {})}
    return to_ns(ints, NS_PER[unit], label, where, lambda i: values[i]), info


def to_ns(values: np.ndarray, factor: int, label: str, where: str, show: Any) -> np.ndarray:
    """``values * factor`` (a new array), refused naming the column when one leaves int64
    (``show(i)``: value ``i`` as the user knows it)."""
    limit = _INT64_MAX // factor
    if len(values) and (values.max() > limit or values.min() < -limit):  # INT64_MIN too
        bad = np.flatnonzero((values > limit) | (values < -limit))
        raise ValueError(
            f"{where}: column {label!r} holds {show(int(bad[0]))} (and {bad.size - 1} more "
            f"value(s)) outside {_RANGE}; drop those rows or store the column as numbers"
        )
    return values * factor if factor != 1 else values.copy()


def restore_temporal(values: np.ndarray, info: dict[str, Any], key: str, where: str) -> Any:
    """The Arrow array of int64 nanoseconds ``values`` as the type ``info`` records;
    values that are not whole units of it are refused, naming the entry."""
    pa = require("pyarrow", "arrow")
    kind = info["kind"]
    values = np.asarray(values, dtype=np.int64)
    if kind == "timestamp":
        return _whole(
            pa.array(values, pa.timestamp("ns", info["tz"])),
            pa.timestamp(info["unit"], info["tz"]),
            key,
            where,
        )
    if kind == "duration":
        return _whole(pa.array(values, pa.duration("ns")), pa.duration(info["unit"]), key, where)
    if kind in ("date32", "date64"):
        factor = _DAY_NS if kind == "date32" else NS_PER["ms"]
        if (values % factor).any():
            raise ValueError(
                f"{where}: entry {key!r} was a {kind} column but holds nanoseconds that are "
                "not whole days; round them first"
            )
        scaled = values // factor
        if kind == "date32":
            return pa.array(scaled.astype(np.int32), pa.int32()).view(pa.date32())
        return pa.array(scaled, pa.int64()).view(pa.date64())
    unit = info["unit"]  # time32 / time64: since midnight
    if (values % NS_PER[unit]).any():
        raise ValueError(
            f"{where}: entry {key!r} was a {kind}[{unit}] column but holds nanoseconds that "
            f"are not whole {unit}; round them first"
        )
    scaled = values // NS_PER[unit]
    if kind == "time32":
        return pa.array(scaled.astype(np.int32), pa.int32()).view(pa.time32(unit))
    return pa.array(scaled, pa.int64()).view(pa.time64(unit))


def check_codes(codes: np.ndarray, count: int, key: str, where: str) -> int:
    """The smallest code, once every code is checked to be -1 (missing) or one of the
    ``count`` categories (a ``ValueError`` naming the entry otherwise)."""
    low, high = (int(codes.min()), int(codes.max())) if len(codes) else (0, -1)
    if low < -1 or high >= count:
        raise ValueError(
            f"{where}: entry {key!r} holds codes outside -1..{count - 1}: it has {count} "
            "recorded categories"
        )
    return low


def _whole(arr: Any, target: Any, key: str, where: str) -> Any:
    pa = require("pyarrow", "arrow")
    try:
        return arr.cast(target, safe=True)
    except pa.ArrowInvalid:
        raise ValueError(
            f"{where}: entry {key!r} was a {target} column but holds nanoseconds that are "
            f"not whole {target.unit}; round them first"
        ) from None


# ------------------------------------------------------------------ infos


def info_array(t: Tensor, rows: int, key: str, info: dict[str, Any], where: str) -> Any:
    """The Arrow array a column info restores: a dictionary array of a categorical's
    codes, a temporal array of int64 nanoseconds."""
    pa = require("pyarrow", "arrow")
    t = t.detach().cpu()
    if t.dim() != 1 or t.shape[0] != rows:
        raise ValueError(
            f"{where}: entry {key!r} of shape {list(t.shape)} was a {info['kind']} column "
            f"and should hold one value per row ({rows})"
        )
    if info["kind"] != "category":
        if t.dtype is not torch.int64:
            raise TypeError(
                f"{where}: entry {key!r} was a {info['kind']} column and should hold int64 "
                f"nanoseconds, not {t.dtype}"
            )
        return restore_temporal(t.numpy(), info, key, where)
    categories = info["categories"]
    codes = t.numpy()
    if t.dtype.is_floating_point or t.is_complex() or t.dtype is torch.bool:
        raise TypeError(f"{where}: entry {key!r} holds categorical codes of dtype {t.dtype}")
    low = check_codes(codes, len(categories), key, where)
    try:
        values = (
            restore_temporal(np.asarray(categories, np.int64), info["values"], key, where)
            if "values" in info  # datetime categories, recorded as nanoseconds
            else pa.array(categories, type=arrow_type(info["arrow"]) if "arrow" in info else None)
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise TypeError(
            f"{where}: the categories of entry {key!r} have no Arrow form ({err})"
        ) from None
    indices = pa.array(codes, mask=codes < 0) if low < 0 else pa.array(codes)
    ordered = info.get("ordered", False)
    return pa.DictionaryArray.from_arrays(indices, values, ordered=ordered, safe=False)


def split(source: dict[str, Any], separator: str | None) -> dict[str, Any]:
    """Nest flat column names ``"a.b"`` as ``a -> b`` (when a separator is given; the
    names were checked by ``check_names``: no two land on one key)."""
    if not separator:
        return source
    out: dict[str, Any] = {}
    for name, value in source.items():
        parts = name.split(separator)
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def place_infos(
    source: dict[str, Any], infos: dict[str, Any], separator: str | None
) -> dict[str, Any]:
    """Put the column infos of the top-level columns beside their entries, in the node
    each column landed in (``"a.b"`` with a separator: node ``a``, name ``b``)."""
    per_node: dict[tuple[str, ...], dict[str, Any]] = {}
    for name, info in infos.items():
        parts = tuple(name.split(separator)) if separator else (name,)
        per_node.setdefault(parts[:-1], {})[parts[-1]] = info
    for node_path, node_infos_ in per_node.items():
        node = source
        for p in node_path:
            node = node[p]
        node[COLUMNS_KEY] = NonTensorData(node_infos_)
    return source


def container_of(
    cls: Any,
    source: dict[str, Any],
    batch_size: Any,
    device: Any,
    auto_batch_size: bool,
    batch_dims: int | None,
    where: str,
) -> Any:
    """The container of type ``cls`` (TensorDict, or a tensorclass) around ``source``,
    its batch size given or found (``auto_batch_size``); ``where`` names the caller."""
    from tensorbox._core.tensordict import TensorDict
    from tensorbox._tensorclass import is_tensorclass

    if auto_batch_size and batch_size is not None:
        raise TypeError(
            f"{where}: Conflicting batch sizes: pass batch_size or auto_batch_size=True, not both"
        )
    td = TensorDict(source, batch_size=batch_size, device=device)
    if auto_batch_size:
        td.auto_batch_size_(batch_dims=batch_dims)
    if cls is not None and is_tensorclass(cls):
        # a tensorclass has no field for the column record: its entries stay the codes
        # and the int64 nanoseconds (as tensordict's), without categories and units
        return cls.from_tensordict(td.exclude(COLUMNS_KEY) if COLUMNS_KEY in td._tensordict else td)
    return td


#: ``json_label`` of a label JSON cannot hold (a ``Timestamp``...): the key's string is its name.
NO_LABEL: Any = object()


def json_label(name: Any) -> Any:
    """A pandas column or index label as JSON: a number, bool, ``None`` or string as it
    is, a tuple (a ``MultiIndex`` label) as a list; ``NO_LABEL`` for any other."""
    if isinstance(name, np.generic):
        name = name.item()
    if isinstance(name, float) and not np.isfinite(name):
        return None if np.isnan(name) else NO_LABEL  # pandas' missing label (None -> nan)
    if type(name) is int and not -(2**63) <= name < 2**63:
        return NO_LABEL  # a saved tree's JSON keeps int64
    if name is None or type(name) in (str, int, float, bool):
        return name
    if isinstance(name, tuple):
        items = [json_label(n) for n in name]
        return NO_LABEL if any(i is NO_LABEL or isinstance(i, list) for i in items) else items
    return NO_LABEL


def pandas_label(value: Any) -> Any:
    """The pandas label ``json_label`` recorded (a list: the tuple it was)."""
    return tuple(value) if isinstance(value, list) else value


def _is_label(value: Any) -> bool:
    scalar = (str, int, float, bool, type(None))
    return isinstance(value, scalar) or (
        isinstance(value, list) and all(isinstance(v, scalar) for v in value)
    )


def type_json(t: Any) -> Any:
    """The Arrow type of a column of Python values (strings, binary, lists of those) as
    JSON (``"large_string"``, ``["list", "string"]``), or ``None`` for another type: what
    ``to_arrow`` gives such a column back as, when its values cannot say (no rows, all
    null, ``large_string``)."""
    pa = require("pyarrow", "arrow")
    if pa.types.is_fixed_size_list(t):
        inner = type_json(t.value_type)
        return None if inner is None else ["fixed_size_list", t.list_size, inner]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = type_json(t.value_type)
        return (
            None
            if inner is None
            else ["large_list" if pa.types.is_large_list(t) else "list", inner]
        )
    return str(t) if str(t) in _OBJECT_TYPES else None


_OBJECT_TYPES = ("string", "large_string", "binary", "large_binary", "null")


def arrow_type(value: Any) -> Any:
    """The Arrow type ``type_json`` wrote (``None`` when ``value`` is not one)."""
    pa = require("pyarrow", "arrow")
    if isinstance(value, str):
        return pa.type_for_alias(value) if value in _OBJECT_TYPES else None
    if isinstance(value, list) and len(value) == 2 and value[0] in ("list", "large_list"):
        inner = arrow_type(value[1])
        maker = pa.list_ if value[0] == "list" else pa.large_list
        return None if inner is None else maker(inner)
    if isinstance(value, list) and len(value) == 3 and value[0] == "fixed_size_list":
        inner, size = arrow_type(value[2]), value[1]
        ok = inner is not None and type(size) is int and 0 < size < 2**31
        return pa.list_(inner, size) if ok else None
    return None


def check_info(info: Any, label: str, where: str) -> dict[str, Any]:
    """A column info, checked (a ``FormatError`` naming the column when it is not one)."""

    def bad(what: str) -> FormatError:
        return FormatError(f"{where}: the recorded type of column {label!r} {what}")

    if not isinstance(info, dict):
        raise bad(f"should be an object, got {type(info).__name__}")
    for field in ("index", "name"):  # the level's / column's pandas label
        if not _is_label(info.get(field)):
            raise bad(f"has {field} label {info[field]!r}; expected a string, a number or a list")
    if not isinstance(info.get("pandas", ""), str):
        raise bad(f"has pandas dtype {info['pandas']!r}; expected its name")
    if "arrow" in info and arrow_type(info["arrow"]) is None:
        raise bad(f"has Arrow type {info['arrow']!r}; expected strings, binary or lists")
    kind = info.get("kind")
    if kind is None:
        if not {"index", "pandas", "name", "arrow"} & set(info):
            raise bad("has neither a kind, a pandas dtype, an index name nor a name")
        return info
    if kind not in _KINDS:
        raise bad(f"has kind {kind!r}; expected one of {sorted(_KINDS)}")
    if kind == "category":
        categories = info.get("categories")
        if not isinstance(categories, list):
            raise bad("has no list of categories")
        try:
            unique = len(set(categories)) == len(categories)
        except TypeError:
            unique = False
        if not unique:
            raise bad("has categories that are repeated or not hashable (values pandas takes)")
        if not isinstance(info.get("ordered", False), bool):
            raise bad("has a non-bool 'ordered'")
        if "values" in info:  # datetime categories: int64 nanoseconds of that type
            values = check_info(info["values"], label, where)
            if values.get("kind") in (None, "category") or not all(
                type(c) is int and -(2**63) <= c < 2**63 for c in categories
            ):
                raise bad("has 'values' other than a time type of int64 nanosecond categories")
        return info
    unit = info.get("unit")
    if kind in ("timestamp", "duration", "time32", "time64") and unit not in NS_PER:
        raise bad(f"has unit {unit!r}; expected one of {sorted(NS_PER)}")
    if unit not in {"time32": ("s", "ms"), "time64": ("us", "ns")}.get(kind, (unit,)):
        raise bad(f"has unit {unit!r}, which {kind} cannot hold")
    tz = info.get("tz")
    if tz is not None and not _is_zone(tz):
        raise bad(f"has time zone {tz!r}; expected a zone name, a '+HH:MM' offset or null")
    return info


def _is_zone(tz: Any) -> bool:
    """Whether Arrow and pandas take ``tz``: an IANA name or a ``+HH:MM`` offset (a
    hostile one made Arrow ask for a zoneinfo module that is installed)."""
    import re
    import zoneinfo

    if not isinstance(tz, str):
        return False
    m = re.fullmatch(r"[+-](\d\d):(\d\d)", tz)
    if m is not None:
        return int(m.group(1)) < 24 and int(m.group(2)) < 60
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def node_infos(td: Any, where: str) -> dict[str, dict[str, Any]]:
    """The column infos a container node holds (``{}`` when it holds none), checked."""
    value = td._tensordict.get(COLUMNS_KEY)
    if value is None:
        return {}
    data = value.data if isinstance(value, NonTensorData) and not value.stacked else None
    if isinstance(value, NonTensorData) and value.stacked and value.data.size:
        # torch.stack/expand/unbind of one frame's container: every row holds one record
        first = value.data.flat[0]
        if all(v == first for v in value.data.flat):
            data = first
    if data is None and isinstance(value, NonTensorData) and value.stacked:
        # torch.cat/stack or a row write of containers from different frames: their rows
        # code categories (or datetimes) differently, and no one record fits them all
        raise FormatError(
            f"{where}: the rows of this container carry different column types in "
            f"{COLUMNS_KEY!r} (categories, datetime units or zones), as after torch.cat, "
            "torch.stack or a row write mixing containers of different frames; their codes "
            "do not share one meaning: convert each part to pandas and concat those instead"
        )
    if not isinstance(data, dict):
        raise FormatError(
            f"{where}: entry {COLUMNS_KEY!r} should hold one dict of column types (what "
            "from_pandas/from_arrow record), got something else; delete it or rename it"
        )
    return {str(k): check_info(v, str(k), where) for k, v in data.items()}


def parse_meta(raw: bytes | None, where: str) -> dict[str, Any]:
    """The ``tensorbox`` schema metadata of an Arrow table, checked: a ``FormatError``
    naming what is wrong when it is not JSON or not of the shape ``to_arrow`` writes."""
    if not raw:
        return {}
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise FormatError(f"{where}: the schema metadata 'tensorbox' is not JSON ({err})") from None
    except RecursionError:  # a hostile file nests arrays deeper than the parser goes
        raise FormatError(
            f"{where}: the schema metadata 'tensorbox' nests deeper than Python's JSON "
            "parser goes; it is not what to_arrow writes"
        ) from None
    if not isinstance(meta, dict):
        raise FormatError(
            f"{where}: the schema metadata 'tensorbox' should be a JSON object, got "
            f"{type(meta).__name__}"
        )
    if "batch_size" in meta:
        _shape(meta["batch_size"], "batch_size", where)
        if not meta["batch_size"]:  # to_arrow writes the rows first, always
            raise FormatError(f"{where}: the schema metadata's batch_size is empty")
    for field in ("nodes", "dtypes", "shapes", "columns"):
        value = meta.get(field, {})
        if not isinstance(value, dict):
            raise FormatError(
                f"{where}: the schema metadata's {field!r} should be an object, got "
                f"{type(value).__name__}"
            )
    for name, shape in meta.get("nodes", {}).items():
        _shape(shape, f"nodes[{name!r}]", where)
    for name, shape in meta.get("shapes", {}).items():
        _shape(shape, f"shapes[{name!r}]", where)
    for name, dtype in meta.get("dtypes", {}).items():
        if dtype != "bfloat16":
            raise FormatError(
                f"{where}: the schema metadata gives column {name!r} dtype {dtype!r}; "
                "expected 'bfloat16' (the only dtype Arrow lacks)"
            )
    for name, info in meta.get("columns", {}).items():
        check_info(info, name, where)
    return meta


def _shape(value: Any, what: str, where: str) -> None:
    if not isinstance(value, list) or not all(
        type(n) is int and 0 <= n < 2**63
        for n in value  # bool is no size
    ):
        raise FormatError(
            f"{where}: the schema metadata's {what} should be a list of sizes, got {value!r}"
        )


def jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def merge_records(old: Any, new: Any, keys: set[Any]) -> Any:
    """``a.update(b)``'s column record: ``a``'s for the entries ``b`` left alone, ``b``'s
    for those it set (an entry set without a record of its own loses ``a``'s, which
    described the value it replaced); ``None`` when no column keeps one."""
    plain = [
        v.data if isinstance(v, NonTensorData) and not v.stacked and isinstance(v.data, dict)
        else None
        for v in (old, new)
    ]  # fmt: skip
    if (old is not None and plain[0] is None) or (new is not None and plain[1] is None):
        return new if new is not None else old  # rows of different frames: node_infos refuses
    merged = {k: v for k, v in (plain[0] or {}).items() if k not in keys}
    merged.update({k: v for k, v in (plain[1] or {}).items() if k in keys})
    return NonTensorData(merged) if merged else None
