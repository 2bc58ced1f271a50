"""The tabular bridges give back exactly what went in, or raise naming the column (issue 31).

One test per broken promise, on real pandas / pyarrow objects: datetimes as int64
nanoseconds (any unit, any zone, NaT refused), categories recorded and restored (also
across memmap and Parquet row groups), two columns on one key refused, schema metadata
checked against the column, the index kept on request.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from tensorbox import FormatError, TensorDict  # noqa: E402
from tensorbox.interop import ParquetRowGroups  # noqa: E402
from tensorbox.interop.arrow import META_KEY, from_arrow, to_arrow  # noqa: E402

NS = 10**9


# ------------------------------------------------------------------ 1: datetimes


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_a_datetime_column_is_int64_nanoseconds_whatever_its_unit(unit):
    times = pd.to_datetime(["1970-01-01 00:00:01", "2024-02-29 12:00:00"]).as_unit(unit)
    td = TensorDict.from_pandas(pd.DataFrame({"t": times}))
    assert td["t"].dtype == torch.int64
    assert td["t"].tolist() == [NS, times[1].value]  # Timestamp.value: ns since the epoch
    back = td.to_pandas()
    assert back["t"].dtype == f"datetime64[{unit}]"
    pd.testing.assert_frame_equal(back, pd.DataFrame({"t": times}))


def test_a_zoned_datetime_is_utc_nanoseconds_and_its_zone_comes_back():
    times = pd.date_range("2024-03-30", periods=3, freq="D", tz="Europe/Paris")
    df = pd.DataFrame({"t": times})
    td = TensorDict.from_pandas(df)
    assert td["t"].dtype == torch.int64
    assert td["t"].tolist() == [t.value for t in times]  # UTC instants
    pd.testing.assert_frame_equal(td.to_pandas(), df)
    assert to_arrow(td).schema.field("t").type == pa.timestamp("us", "Europe/Paris")


def test_nat_is_refused_naming_the_column():
    df = pd.DataFrame({"ok": [1, 2], "when": pd.to_datetime(["2024-01-01", None])})
    with pytest.raises(ValueError, match=r"column 'when' has 1 null/NaT value\(s\).*fill"):
        TensorDict.from_pandas(df)
    table = pa.table({"when": pa.array([0, None], pa.timestamp("ms"))})
    with pytest.raises(ValueError, match=r"column 'when' has 1 null/NaT"):
        from_arrow(table)


def test_a_datetime_outside_int64_nanoseconds_is_refused_naming_the_column():
    table = pa.table({"far": pa.array([0, 10**11], pa.timestamp("s"))})  # year 5138
    with pytest.raises(ValueError, match=r"column 'far' holds 5138-.* outside int64 nano"):
        from_arrow(table)
    df = pd.DataFrame({"far": pd.Series([np.datetime64("3000-01-01", "s")])})
    with pytest.raises(ValueError, match=r"column 'far' holds 3000-01-01.* outside int64"):
        TensorDict.from_pandas(df)


def test_interval_columns_are_refused_naming_the_column():
    df = pd.DataFrame({"span": pd.interval_range(0, 3)})
    with pytest.raises(TypeError, match=r"column 'span' holds interval\[int64, right\]"):
        TensorDict.from_pandas(df)
    iv = pa.array([pa.scalar((1, 2, 3), pa.month_day_nano_interval())])
    with pytest.raises(TypeError, match=r"column 'iv' holds intervals"):
        from_arrow(pa.table({"iv": iv}))


def test_arrow_temporal_types_round_trip():
    table = pa.table(
        {
            "ts": pa.array([0, 5], pa.timestamp("ms", "Asia/Kolkata")),
            "dur": pa.array([1, -2], pa.duration("s")),
            "day": pa.array([0, 19000], pa.date32()),
            "ms": pa.array([86_400_000, 0], pa.date64()),
            "clock": pa.array([1, 2], pa.time32("s")),
            "fine": pa.array([3, 4], pa.time64("ns")),
        }
    )
    td = from_arrow(table)
    assert td["ts"].tolist() == [0, 5_000_000] and td["day"].tolist() == [0, 19000 * 86400 * NS]
    assert td["clock"].tolist() == [NS, 2 * NS]
    assert to_arrow(td).replace_schema_metadata(None).equals(table)


def test_a_datetime_entry_that_lost_its_whole_units_is_refused():
    td = TensorDict.from_pandas(pd.DataFrame({"t": pd.to_datetime(["2024-01-01"]).as_unit("s")}))
    td["t"] += 1  # one nanosecond: no longer whole seconds
    with pytest.raises(ValueError, match=r"entry 't' was a timestamp\[s\] column .* not whole s"):
        td.to_pandas()


def test_an_empty_trailing_dim_is_refused_not_a_crash():
    td = from_arrow(pa.table({"seq": pa.array([[], []], pa.list_(pa.int64()))}))
    assert td["seq"].shape == (2, 0)
    with pytest.raises(ValueError, match=r"entry 'seq' of shape \[2, 0\] has an empty trailing"):
        to_arrow(td)


# ------------------------------------------------------------------ categoricals


def test_categories_are_recorded_and_restored_also_across_memmap(tmp_path):
    kind = pd.Categorical(["b", None, "a", "b"], categories=["b", "a", "unused"], ordered=True)
    df = pd.DataFrame({"kind": kind, "x": [1.0, 2.0, 3.0, 4.0]})
    td = TensorDict.from_pandas(df)
    assert td["kind"].tolist() == [0, -1, 1, 0] and td["kind"].dtype == torch.int8  # codes
    pd.testing.assert_frame_equal(td.to_pandas(), df)
    td.memmap(tmp_path / "m")
    loaded = TensorDict.load_memmap(tmp_path / "m")
    pd.testing.assert_frame_equal(loaded.to_pandas(), df)
    pd.testing.assert_frame_equal(loaded[1:3].to_pandas(), df[1:3].reset_index(drop=True))
    table = to_arrow(td)
    assert table.column("kind").type == pa.dictionary(pa.int8(), pa.string(), ordered=True)
    pd.testing.assert_frame_equal(from_arrow(table).to_pandas(), df)


def test_parquet_keeps_every_category_in_its_order(tmp_path):
    kind = pd.Categorical(["z", "a"], categories=["z", "q", "a"])
    td = TensorDict.from_pandas(pd.DataFrame({"kind": kind}))
    td.to_parquet(tmp_path / "t.parquet", row_group_size=1)
    back = TensorDict.from_parquet(tmp_path / "t.parquet")
    assert back["kind"].tolist() == [0, 2]
    assert list(back.to_pandas()["kind"].cat.categories) == ["z", "q", "a"]
    groups = ParquetRowGroups(tmp_path / "t.parquet")
    assert [g["kind"].tolist() for g in groups] == [[0], [2]]


def test_row_groups_with_their_own_dictionaries_share_one_coding(tmp_path):
    path = tmp_path / "rg.parquet"
    first = pa.table({"c": pa.array(["x", "y", "x"]).dictionary_encode()})
    second = pa.table({"c": pa.array(["y", "z"]).dictionary_encode()})
    with pq.ParquetWriter(path, first.schema) as writer:
        writer.write_table(first)
        writer.write_table(second)
    groups = ParquetRowGroups(path)
    assert [g["c"].tolist() for g in groups] == [[0, 1, 0], [1, 2]]  # "y" is 1 in both
    batches = [b["c"] for b in groups.iter_batches(2)]
    assert len(batches) > 2 and torch.cat(batches).tolist() == [0, 1, 0, 1, 2]
    assert groups.categories() == {"c": ["x", "y", "z"]}
    assert groups[1].to_pandas()["c"].tolist() == ["y", "z"]
    whole = TensorDict.from_parquet(path)
    assert whole["c"].tolist() == [0, 1, 0, 1, 2]


def test_an_arrow_dictionary_with_nulls_gives_code_minus_one():
    arr = pa.DictionaryArray.from_arrays(pa.array([0, None, 1], pa.int32()), pa.array(["a", "b"]))
    td = from_arrow(pa.table({"c": arr}))
    assert td["c"].tolist() == [0, -1, 1]
    assert to_arrow(td).column("c").to_pylist() == ["a", None, "b"]


def test_codes_outside_the_categories_are_refused():
    td = TensorDict.from_pandas(pd.DataFrame({"c": pd.Categorical(["a", "b"])}))
    td["c"][0] = 7
    with pytest.raises(ValueError, match=r"entry 'c' holds codes outside -1\.\.1"):
        td.to_pandas()


# ------------------------------------------------------------------ 3, 4: one key, two columns


@pytest.mark.parametrize("order", [["a.b", "a"], ["a", "a.b"]])
def test_a_separator_collision_is_refused_in_either_order(order):
    table = pa.table({name: [1, 2] for name in order})
    with pytest.raises(ValueError, match=r"columns 'a' and 'a\.b' would collide"):
        from_arrow(table, separator=".")
    df = pd.DataFrame({name: [1, 2] for name in order})
    with pytest.raises(ValueError, match=r"columns 'a' and 'a\.b' would collide"):
        TensorDict.from_pandas(df, separator=".")


def test_duplicate_arrow_columns_are_refused_naming_both():
    table = pa.table({"a": [1, 2], "b": [3, 4]}).rename_columns(["a", "a"])
    with pytest.raises(ValueError, match=r"columns 'a' and 'a' would both become key 'a'"):
        from_arrow(table)
    inner = pa.StructArray.from_arrays([pa.array([1]), pa.array([2])], names=["x", "x"])
    with pytest.raises(ValueError, match=r"columns 's\.x' and 's\.x' would both become"):
        from_arrow(pa.table({"s": inner}))


def test_names_equal_after_str_and_duplicate_pandas_names_are_refused():
    with pytest.raises(ValueError, match=r"columns 1 and '1' would both become key '1'"):
        TensorDict.from_pandas(pd.DataFrame({1: [1, 2], "1": [3, 4]}))
    dup = pd.DataFrame([[1, 2]], columns=["a", "a"])
    with pytest.raises(ValueError, match=r"columns 'a' and 'a' would both become key 'a'"):
        TensorDict.from_pandas(dup)


def test_a_column_named_like_the_reserved_key_is_refused():
    with pytest.raises(ValueError, match=r"'__columns__' is the key tensorbox keeps"):
        TensorDict.from_pandas(pd.DataFrame({"__columns__": [1]}))


# ------------------------------------------------------------------ 5, 6: schema metadata


def _with_meta(table, meta):
    raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    return table.replace_schema_metadata({META_KEY: raw})


def test_metadata_is_checked_against_the_column_type():
    table = pa.table({"x": pa.array([1, 2], pa.int32())})
    with pytest.raises(FormatError, match=r"gives column 'x' dtype 'float32'; expected"):
        from_arrow(_with_meta(table, {"dtypes": {"x": "float32"}}))
    with pytest.raises(FormatError, match=r"column 'x' holds bfloat16 .* Arrow type is int32"):
        from_arrow(_with_meta(table, {"dtypes": {"x": "bfloat16"}}))
    with pytest.raises(FormatError, match=r"gives column 'x' shape \[2, 3\]"):
        from_arrow(_with_meta(table, {"shapes": {"x": [2, 3]}}))
    with pytest.raises(FormatError, match=r"records column 'x' as category, but its Arrow"):
        from_arrow(_with_meta(table, {"columns": {"x": {"kind": "category", "categories": []}}}))
    cat = pa.table({"c": pa.array(["a", "b"]).dictionary_encode()})
    lying = {"columns": {"c": {"kind": "category", "categories": ["a"]}}}
    with pytest.raises(FormatError, match=r"column 'c' holds b, which is not among its"):
        from_arrow(_with_meta(cat, lying))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", r"'tensorbox' is not JSON"),
        (b"\xff\xfe", r"'tensorbox' is not JSON"),
        (b"[1, 2]", r"should be a JSON object, got list"),
        (b'{"batch_size": "3"}', r"batch_size should be a list of sizes"),
        (b'{"nodes": []}', r"'nodes' should be an object, got list"),
        (b'{"columns": {"x": 3}}', r"type of column 'x' should be an object"),
        (b'{"columns": {"x": {"kind": "bogus"}}}', r"column 'x' has kind 'bogus'"),
        (b'{"batch_size": []}', r"batch_size is empty"),
        (b'{"columns": {"x": {"kind": "category", "categories": ["a", "a"]}}}', "repeated"),
        (b'{"columns": {"x": {"index": [[1]]}}}', r"index label \[\[1\]\]; expected"),
        (b'{"columns": {"x": {"name": {"a": 1}}}}', r"name label \{'a': 1\}; expected"),
        (b'{"dtypes": {"x": "bfloat16"}, "shapes": {"x": [2, -1]}}', "list of sizes"),
    ],
)
def test_hostile_metadata_is_a_format_error_naming_what_is_wrong(raw, message):
    with pytest.raises(FormatError, match=message):
        from_arrow(_with_meta(pa.table({"x": [1, 2]}), raw))


def test_errors_of_a_file_name_the_file(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(_with_meta(pa.table({"x": [1]}), b"[]"), path)
    with pytest.raises(FormatError, match=r"from_parquet\('.*bad\.parquet'\): the schema"):
        TensorDict.from_parquet(path)
    with pytest.raises(FormatError, match=r"ParquetRowGroups\('.*bad\.parquet'\)"):
        ParquetRowGroups(path)[0]


# ------------------------------------------------------------------ the index


def test_the_index_is_dropped_unless_index_true_keeps_it():
    df = pd.DataFrame({"x": [1.0, 2.0]}, index=pd.Index([10, 20], name="id"))
    assert list(TensorDict.from_pandas(df).keys()) == ["x"]
    td = TensorDict.from_pandas(df, index=True)
    assert td["id"].tolist() == [10, 20]
    pd.testing.assert_frame_equal(td.to_pandas(), df)
    multi = df.set_index(pd.MultiIndex.from_tuples([("a", 1), ("b", 2)]))
    kept = TensorDict.from_pandas(multi, index=True)
    assert kept[1]["level_0"] == "b" and kept["level_1"].tolist() == [1, 2]
    pd.testing.assert_frame_equal(kept.to_pandas(), multi)
    with pytest.raises(ValueError, match=r"columns 'x' and 'x' would both become key 'x'"):
        TensorDict.from_pandas(df.rename_axis("x"), index=True)


def test_nullable_dtypes_without_missing_values_come_back():
    df = pd.DataFrame({"n": pd.array([1, 2], "Int64"), "b": pd.array([True, False], "boolean")})
    td = TensorDict.from_pandas(df)
    assert td["n"].dtype == torch.int64 and td["b"].dtype == torch.bool
    pd.testing.assert_frame_equal(td.to_pandas(), df)


# ------------------------------------------------------------------ CSV and JSON: pandas decides


def _same_values(entry, series):
    """An entry holds the values pandas' reader gave (NaN where pandas has NaN)."""
    if isinstance(entry, torch.Tensor):
        np.testing.assert_array_equal(entry.numpy(), series.to_numpy())
    else:
        assert [None if pd.isna(v) else v for v in entry] == [
            None if pd.isna(v) else v for v in series.tolist()
        ]


def test_csv_values_are_pandas_values(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("i,f,s,b,gap,when\n1,0.5,x,true,1,2024-01-01\n2,1e3,,False,,2024-01-02\n")
    td = TensorDict.from_csv(path)
    frame = pd.read_csv(path)
    for col in frame.columns:
        _same_values(td[col], frame[col])
    assert td["gap"].dtype == torch.float64 and td[0]["when"] == "2024-01-01"
    parsed = TensorDict.from_csv(path, parse_dates=["when"])  # pandas' keyword
    assert parsed["when"].tolist() == [pd.Timestamp("2024-01-0" + d).value for d in "12"]


def test_json_keeps_every_record_key(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[{"a": 1, "s": "x"}, {"a": 2, "s": "y", "late": 0.5}]')
    with pytest.raises(ValueError, match=r"from_json\('.*t\.json'\): column 'late' has 1 null"):
        TensorDict.from_json(path)
    path.write_text('[{"a": 1, "s": "x", "f": 2.5}, {"s": "y", "f": 1, "a": 2}]')
    td = TensorDict.from_json(path)
    frame = pd.read_json(path)
    assert list(td.keys()) == list(frame.columns) == ["a", "s", "f"]
    for col in frame.columns:
        _same_values(td[col], frame[col])
