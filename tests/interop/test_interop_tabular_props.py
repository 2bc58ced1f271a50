"""Property tests of the tabular bridges, pandas and pyarrow as the oracles (issue 31).

Hypothesis draws pandas frames and Arrow tables (numbers and bools, nullable types,
categoricals, datetimes of every unit with and without a zone, durations, dates, structs,
fixed-size lists, odd and colliding column names). Each goes through ``from_*`` and
``to_*`` and comes back equal by ``pandas.testing`` / ``pyarrow`` equality, or is refused
with the documented error. The ``slow`` variants (``-m slow``) try 2,000 of each.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")

from tensorbox import TensorDict  # noqa: E402
from tensorbox.errors import KeyCollisionError  # noqa: E402
from tensorbox.interop.arrow import from_arrow, to_arrow  # noqa: E402

UNITS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
ZONES = [None, "UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]
NUMBERS = ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float32", "float64"]
NULLABLE = ["Int8", "Int64", "UInt16", "Float32", "Float64", "boolean"]
INT64_MAX = 2**63 - 1

NAMES = st.one_of(
    st.text(alphabet="ab.1_é ", max_size=4),
    st.integers(0, 2),  # 1 and "1" collide after str
    st.sampled_from([None, True, 0.5, 1.0]),  # labels that come back as they were
    st.tuples(st.sampled_from("ab"), st.integers(0, 1)),  # a MultiIndex's, when all are
)
STRINGS = ["str", "string[python]", "string[pyarrow]", "object"]


def _collides(keys: list[str], separator: str | None) -> bool:
    paths = [tuple(k.split(separator)) if separator else (k,) for k in keys]
    if len(set(paths)) < len(paths) or any("__columns__" in p for p in paths):
        return True
    whole = set(paths)
    return any(p[:i] in whole for p in paths for i in range(1, len(p)))


def _temporal_values(draw, n: int, unit: str) -> tuple[list[int | None], set[str]]:
    """Values in ``unit``; some beyond int64 nanoseconds, some NaT; and what that refuses."""
    limit = INT64_MAX // UNITS[unit]
    near = st.integers(-limit, limit)
    beyond = st.integers(limit + 1, min(limit * 4, INT64_MAX)).map(lambda v: v * (-1) ** (v % 2))
    pick = (
        st.one_of(near, near, near, beyond, st.none())
        if unit != "ns"
        else st.one_of(st.integers(-INT64_MAX, INT64_MAX), st.none())
    )
    values = draw(st.lists(pick, min_size=n, max_size=n))
    refusals = set()
    if any(v is None for v in values):
        refusals.add("null/NaT")
    if any(v is not None and abs(v) > limit for v in values):
        refusals.add("outside int64 nanoseconds")
    return values, refusals


def _categories(draw) -> list:
    kind = draw(st.sampled_from(["text", "int", "datetime"]))
    if kind == "text":
        return draw(st.lists(st.text(max_size=3), min_size=1, max_size=4, unique=True))
    if kind == "int":
        return draw(st.lists(st.integers(-5, 5), min_size=1, max_size=4, unique=True))
    days = draw(st.lists(st.integers(-3000, 3000), min_size=1, max_size=4, unique=True))
    index = pd.to_datetime(days, unit="D").as_unit(draw(st.sampled_from(list(UNITS))))
    tz = draw(st.sampled_from(ZONES))
    return index if tz is None else index.tz_localize(tz)


def _index(draw, n: int):
    """``(index, its entries' keys)`` for ``from_pandas(index=True)``, or ``(None, [])``."""
    kind = draw(st.sampled_from([None, "range", "named", "multi"]))
    if kind is None:
        return None, []
    if kind == "range":
        return pd.RangeIndex(3, 3 + 2 * n, 2), ["index"]
    if kind == "named":
        name = draw(st.sampled_from(["id", "a", 0]))
        return pd.Index(draw(st.lists(st.integers(), min_size=n, max_size=n)), name=name), [
            str(name)
        ]
    level = draw(st.sampled_from(["k", None]))
    tuples = [(i, draw(st.text(alphabet="xy", max_size=2))) for i in range(n)]
    index = pd.MultiIndex.from_tuples(tuples, names=[level, None]) if n else None
    return index, ([str(level) if level else "level_0", "level_1"] if n else [])


@st.composite
def frames(draw):
    """A DataFrame, the refusals it earns (by message), and the separator to use."""
    n = draw(st.integers(0, 5))
    names = draw(st.lists(NAMES, min_size=1, max_size=5))
    separator = draw(st.sampled_from([None, "."]))
    series, refusals = [], set()
    for _ in names:
        kind = draw(st.sampled_from(["number", "nullable", "category", "datetime", "string"]))
        if kind == "number":
            dtype = draw(st.sampled_from([*NUMBERS, "bool"]))
            raw = draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n))
            values = np.array(raw, dtype=np.uint64).view(np.int64).astype(dtype, copy=False)
            if dtype.startswith("float"):
                floats = st.floats(width=32 if dtype == "float32" else 64)
                values = np.array(draw(st.lists(floats, min_size=n, max_size=n)), dtype=dtype)
            series.append(pd.Series(values))
        elif kind == "nullable":
            dtype = draw(st.sampled_from(NULLABLE))
            item = st.booleans() if dtype == "boolean" else st.integers(0, 100)
            values = draw(st.lists(st.one_of(item, st.none()), min_size=n, max_size=n))
            if None in values:
                refusals.add("missing value")
            series.append(pd.Series(pd.array(values, dtype=dtype)))
        elif kind == "category":
            cats = _categories(draw)
            codes = draw(st.lists(st.integers(-1, len(cats) - 1), min_size=n, max_size=n))
            ordered = draw(st.booleans())
            cat = pd.Categorical.from_codes(codes, categories=cats, ordered=ordered)
            series.append(pd.Series(cat))
        elif kind == "datetime":
            unit = draw(st.sampled_from(list(UNITS)))
            values, why = _temporal_values(draw, n, unit)
            nat = np.datetime64("NaT", unit)
            arr = np.array(
                [nat if v is None else np.datetime64(v, unit) for v in values],
                dtype=f"datetime64[{unit}]",
            )
            s = pd.Series(arr)
            if draw(st.booleans()):  # a timedelta column
                deltas = [np.timedelta64("NaT" if v is None else v, unit) for v in values]
                s = pd.Series(np.array(deltas, dtype=f"timedelta64[{unit}]"))
            else:
                tz = draw(st.sampled_from(ZONES))
                if tz is not None:
                    try:
                        s = s.dt.tz_localize("UTC").dt.tz_convert(tz)
                    except (OverflowError, ValueError, pd.errors.OutOfBoundsDatetime):
                        assume(False)
                if draw(st.booleans()):  # pyarrow-backed: timestamp[unit, tz][pyarrow]
                    s = s.astype(pd.ArrowDtype(pa.timestamp(unit, tz)))
            refusals |= why
            series.append(s)
        else:
            values = draw(
                st.lists(st.one_of(st.text(max_size=3), st.none()), min_size=n, max_size=n)
            )
            series.append(pd.Series(values, dtype=draw(st.sampled_from(STRINGS))))
    df = pd.DataFrame({i: s for i, s in enumerate(series)})
    df.columns = names
    index, index_keys = _index(draw, n)
    if index is not None:
        df.index = index
    keys = index_keys + [str(c) for c in df.columns.tolist()]  # pandas: None -> nan
    collide = _collides(keys, separator)
    if not isinstance(df.columns, pd.MultiIndex) and any(isinstance(c, tuple) for c in names):
        refusals.add("cannot record")  # a tuple label outside a MultiIndex
    return df, refusals, collide, separator, index is not None


@given(frames())
@settings(max_examples=60)
def test_pandas_frames_round_trip_or_are_refused(case):
    _frame_round_trip(case)


@pytest.mark.slow
@given(frames())
@settings(max_examples=2000)
def test_pandas_frames_round_trip_many(case):
    _frame_round_trip(case)


def _frame_round_trip(case):
    df, refusals, collide, separator, index = case
    if collide:
        with pytest.raises(KeyCollisionError, match="would"):
            TensorDict.from_pandas(df, separator=separator, index=index)
        return
    if refusals:
        with pytest.raises((ValueError, TypeError), match="|".join(map(re.escape, refusals))):
            TensorDict.from_pandas(df, separator=separator, index=index)
        return
    td = TensorDict.from_pandas(df, separator=separator, index=index)
    for i, name in enumerate(df.columns):
        s = df.iloc[:, i]
        key = tuple(str(name).split(separator)) if separator else str(name)
        if isinstance(s.dtype, pd.DatetimeTZDtype) or s.dtype.kind in "mM":
            # the oracle: pandas' own nanoseconds since the epoch, in UTC
            zoned = s.dt.tz is not None if s.dtype.kind == "M" else False
            utc = s.dt.tz_convert("UTC").dt.tz_localize(None) if zoned else s
            scalar = pd.Timedelta if s.dtype.kind == "m" else pd.Timestamp
            assert td[key].tolist() == [scalar(v).as_unit("ns").value for v in utc]
    back = td.to_pandas(separator=separator)
    pd.testing.assert_frame_equal(back, df)  # the labels too: 1 stays 1


# ------------------------------------------------------------------ Arrow tables


def _array(draw, n: int) -> tuple[object, set[str]]:
    kind = draw(
        st.sampled_from(
            [
                "number",
                "bool",
                "nullable",
                "timestamp",
                "duration",
                "date",
                "time",
                "dict",
                "struct",
                "fixed",
                "strings",
            ]
        )
    )
    if kind == "number":
        t = draw(
            st.sampled_from(
                [
                    pa.int8(),
                    pa.int32(),
                    pa.int64(),
                    pa.uint16(),
                    pa.uint64(),
                    pa.float32(),
                    pa.float64(),
                ]
            )
        )
        size = n * np.dtype(t.to_pandas_dtype()).itemsize
        bits = np.array(draw(st.lists(st.integers(0, 255), min_size=size, max_size=size)), np.uint8)
        values = bits.view(t.to_pandas_dtype())
        return pa.array(values, t), set()
    if kind == "bool":
        return pa.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))), set()
    if kind == "nullable":
        values = draw(st.lists(st.one_of(st.integers(-5, 5), st.none()), min_size=n, max_size=n))
        return pa.array(values, pa.int64()), {"null value"} if None in values else set()
    if kind in ("timestamp", "duration"):
        unit = draw(st.sampled_from(list(UNITS)))
        values, why = _temporal_values(draw, n, unit)
        t = (
            pa.timestamp(unit, draw(st.sampled_from([*ZONES, "+05:30"])))
            if kind == "timestamp"
            else pa.duration(unit)
        )
        return pa.array(values, t), why
    if kind == "date":
        values = draw(st.lists(st.integers(-106_000, 106_000), min_size=n, max_size=n))
        if draw(st.booleans()):
            return pa.array([v * 86_400_000 for v in values], pa.date64()), set()
        return pa.array(values, pa.date32()), set()
    if kind == "time":
        unit = draw(st.sampled_from(["s", "ms", "us", "ns"]))
        day = 86_400 * 10**9 // UNITS[unit]
        values = draw(st.lists(st.integers(0, day - 1), min_size=n, max_size=n))
        t = pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
        return pa.array(values, t), set()
    if kind == "strings":  # lists of strings: a Python value per row
        item = st.lists(st.one_of(st.text(max_size=2), st.none()), max_size=3)
        return pa.array(draw(st.lists(item, min_size=n, max_size=n)), pa.list_(pa.string())), set()
    if kind == "dict":
        cats = draw(
            st.one_of(
                st.lists(st.text(max_size=2), min_size=1, max_size=4, unique=True),
                st.lists(st.integers(-9, 9), min_size=1, max_size=4, unique=True),
            )
        )
        codes = draw(
            st.lists(st.one_of(st.integers(0, len(cats) - 1), st.none()), min_size=n, max_size=n)
        )
        index = draw(st.sampled_from([pa.int8(), pa.int16(), pa.int32()]))
        values = pa.array(cats)
        if isinstance(cats[0], int) and draw(st.booleans()):  # a dictionary of timestamps
            values = pa.array(cats, pa.timestamp(draw(st.sampled_from(list(UNITS))), "UTC"))
        arr = pa.DictionaryArray.from_arrays(
            pa.array(codes, index), values, ordered=draw(st.booleans())
        )
        return arr, set()
    if kind == "struct":
        a, why_a = _array(draw, n)
        b, why_b = _array(draw, n)
        return pa.StructArray.from_arrays([a, b], names=["a", "b.c"]), why_a | why_b
    width = draw(st.integers(1, 3))
    flat = pa.array(
        draw(st.lists(st.integers(-9, 9), min_size=n * width, max_size=n * width)), pa.int32()
    )
    return pa.FixedSizeListArray.from_arrays(flat, width), set()


def _nan_free(value):
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, list):
        return [_nan_free(v) for v in value]
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    return value


@st.composite
def tables(draw):
    n = draw(st.integers(0, 4))
    names = draw(st.lists(st.text(alphabet="ab.é", max_size=3), min_size=1, max_size=4))
    arrays, refusals = [], set()
    for _ in names:
        if n and draw(st.integers(0, 5)) == 0:  # lists of one length: a dim, fixed-size back
            width = draw(st.integers(1, 3))  # width 0: refused by to_arrow (a unit test)
            items = st.lists(st.integers(-9, 9), min_size=width, max_size=width)
            arr, why = (
                pa.array(draw(st.lists(items, min_size=n, max_size=n)), pa.list_(pa.int64())),
                set(),
            )
        else:
            arr, why = _array(draw, n)
        arrays.append(arr)
        refusals |= why
    return pa.Table.from_arrays(arrays, names=names), refusals, _collides(names, None)


@given(tables())
@settings(max_examples=60)
def test_arrow_tables_round_trip_or_are_refused(case):
    _table_round_trip(case)


@pytest.mark.slow
@given(tables())
@settings(max_examples=2000)
def test_arrow_tables_round_trip_many(case):
    _table_round_trip(case)


def _table_round_trip(case):
    table, refusals, collide = case
    if collide:
        with pytest.raises(KeyCollisionError, match="would both become key"):
            from_arrow(table)
        return
    if refusals:
        with pytest.raises((ValueError, TypeError), match="|".join(map(re.escape, refusals))):
            from_arrow(table)
        return
    td = from_arrow(table)
    back = to_arrow(td)
    for theirs, ours in zip(table.schema, back.schema, strict=True):
        if pa.types.is_list(theirs.type) and not pa.types.is_string(theirs.type.value_type):
            assert pa.types.is_fixed_size_list(ours.type)
            assert ours.type.value_type == theirs.type.value_type
        else:
            assert ours == theirs
    assert _nan_free(back.to_pylist()) == _nan_free(table.to_pylist())  # NaN == NaN here


# ------------------------------------------------------------------ CSV and JSON: pandas' readers


def _values(entry):
    values = entry.tolist() if hasattr(entry, "tolist") else list(entry)
    return [None if isinstance(v, float) and v != v else v for v in values]


@st.composite
def records(draw):
    n = draw(st.integers(1, 5))
    kinds = draw(st.lists(st.sampled_from(["int", "float", "bool", "str"]), min_size=1, max_size=4))
    item = {
        "int": st.integers(-(2**53), 2**53),
        "float": st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False),
        "bool": st.booleans(),
        "str": st.text(alphabet="xyzé ,", min_size=1, max_size=4),  # nothing pandas coerces
    }
    cols = {f"c{i}": draw(st.lists(item[k], min_size=n, max_size=n)) for i, k in enumerate(kinds)}
    return [{k: v[r] for k, v in cols.items()} for r in range(n)]


@given(records())
def test_csv_values_are_those_of_pandas_read_csv(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    td = TensorDict.from_csv(path)
    frame = pd.read_csv(path)
    assert list(td.keys()) == list(frame.columns)
    for col in frame.columns:
        assert _values(td[col]) == _values(frame[col].to_numpy()), col


@given(records())
def test_json_values_are_those_of_pandas_read_json(tmp_path_factory, rows):
    import orjson

    path = tmp_path_factory.mktemp("json") / "t.json"
    path.write_bytes(orjson.dumps(rows))
    td = TensorDict.from_json(path)
    frame = pd.read_json(path, precise_float=True)  # pandas' default parser rounds floats
    assert list(td.keys()) == list(frame.columns)
    for col in frame.columns:
        # pandas reads 1.0 as int64 1: equal values, pandas' dtype or ours
        assert _values(td[col]) == _values(frame[col].to_numpy()), col
