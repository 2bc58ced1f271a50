"""Arrow, Parquet, pandas, CSV and JSON bridges, with pyarrow / pandas as the oracle."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tensorbox
from tensorbox import TensorClass, TensorDict
from tensorbox.interop import ParquetRowGroups, from_arrow, to_arrow

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")

DTYPES = [
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.bool,
]


class Point(TensorClass):
    x: torch.Tensor
    y: torch.Tensor


def _inside(t: torch.Tensor, buf) -> bool:
    return buf.address <= t.data_ptr() < buf.address + buf.size


@st.composite
def columns(draw):
    """``(rows, {name: tensor of shape [rows, *trailing]})``."""
    rows = draw(st.integers(0, 6))
    names = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True))
    out = {}
    for name in names:
        dtype = draw(st.sampled_from(DTYPES))
        trailing = draw(st.lists(st.integers(1, 3), max_size=2))
        t = torch.randint(0, 100, (rows, *trailing)).to(dtype)
        out[name] = t
    return rows, out


# ------------------------------------------------------------------ zero copy


def test_numeric_columns_share_the_arrow_buffer():
    table = pa.table({"x": np.arange(1000, dtype=np.int64), "y": np.ones(1000, np.float32)})
    td = from_arrow(table)
    for name in ("x", "y"):
        buf = table[name].chunks[0].buffers()[1]
        assert _inside(td[name], buf)
    assert td["x"][999].item() == 999


def test_parquet_read_shares_the_arrow_buffer(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": np.arange(100, dtype=np.float64)}), path)
    table = pq.read_table(path)
    td = from_arrow(table)
    assert _inside(td["x"], table["x"].chunks[0].buffers()[1])


def test_fixed_size_list_column_shares_the_buffer():
    values = pa.array(np.arange(12, dtype=np.float32))
    table = pa.table({"m": pa.FixedSizeListArray.from_arrays(values, 3)})
    td = from_arrow(table)
    assert td["m"].shape == (4, 3)
    assert _inside(td["m"], values.buffers()[1])


def test_sliced_table_views_the_right_rows():
    table = pa.table({"x": np.arange(10, dtype=np.int32)}).slice(3, 4)
    assert from_arrow(table)["x"].tolist() == [3, 4, 5, 6]


# ------------------------------------------------------------------ round trips


@given(columns())
def test_to_arrow_matches_pyarrow_and_round_trips(data):
    rows, cols = data
    td = TensorDict(cols, batch_size=[rows])
    table = to_arrow(td)
    for name, t in cols.items():
        oracle = np.asarray(table.column(name).to_pylist(), dtype=object)
        assert oracle.reshape(t.shape).tolist() == t.tolist() or rows == 0
    back = from_arrow(table)
    assert back.batch_size == td.batch_size
    for name, t in cols.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t)


@given(columns())
def test_from_arrow_matches_pyarrow_values(data):
    _rows, cols = data
    table = pa.table(
        {k: (v.flatten(1)[:, 0] if v.dim() > 1 else v).numpy() for k, v in cols.items()}
    )
    td = from_arrow(table)
    for name in cols:
        assert td[name].tolist() == table.column(name).to_pylist()


def test_nested_strings_batch_dims_and_bfloat16_round_trip(tmp_path):
    td = TensorDict(
        {
            "obs": {"pix": torch.arange(24).view(2, 3, 4), "bf": torch.ones(2, 3).bfloat16()},
            "reward": torch.tensor([0.5, 1.5]).repeat(3, 1).T,
        },
        batch_size=[2, 3],
    )
    path = tmp_path / "t.parquet"
    td.to_parquet(path)
    back = TensorDict.from_parquet(path)
    assert back.batch_size == (2, 3)
    assert back["obs"].batch_size == (2, 3)
    assert back["obs", "bf"].dtype == torch.bfloat16
    assert (back == td).all()


def test_string_column_is_one_value_per_row(tmp_path):
    td = from_arrow(pa.table({"name": ["alice", "bob", None], "n": [1, 2, 3]}))
    assert [td[i]["name"] for i in range(3)] == ["alice", "bob", None]
    path = tmp_path / "s.parquet"
    td.to_parquet(path)
    assert pq.read_table(path).column("name").to_pylist() == ["alice", "bob", None]


def test_struct_columns_are_nested_keys():
    table = pa.table({"obs": pa.array([{"x": 1.0, "y": 2}, {"x": 3.0, "y": 4}])})
    td = from_arrow(table)
    assert td["obs", "x"].tolist() == [1.0, 3.0] and td["obs"].batch_size == (2,)


def test_tensorclass_round_trips_through_parquet(tmp_path):
    p = Point(x=torch.arange(3), y=torch.zeros(3), batch_size=[3])
    p.to_parquet(tmp_path / "p.parquet")
    back = Point.from_parquet(tmp_path / "p.parquet")
    assert isinstance(back, Point) and torch.equal(back.x, p.x)


def test_dictionary_and_temporal_columns():
    cat = pa.array(["a", "b", "a"]).dictionary_encode()
    when = pa.array(np.array([0, 1, 2], dtype="datetime64[s]"))
    td = from_arrow(pa.table({"cat": cat, "when": when}))
    assert td["cat"].tolist() == [0, 1, 0] and td["when"].tolist() == [0, 10**9, 2 * 10**9]


def test_ragged_lists_as_jagged():
    table = pa.table({"seq": [[1, 2], [3], [4, 5, 6]]})
    td = from_arrow(table, ragged="jagged")
    assert td["seq"].is_nested and td["seq"].values().tolist() == [1, 2, 3, 4, 5, 6]


def test_equal_length_lists_become_a_dim():
    td = from_arrow(pa.table({"v": [[1.0, 2.0], [3.0, 4.0]]}))
    assert td["v"].shape == (2, 2)


# ------------------------------------------------------------------ errors


def test_nulls_in_a_number_column_are_refused():
    with pytest.raises(ValueError, match=r"column 'x' has 1 null value\(s\).*fill_null"):
        from_arrow(pa.table({"x": [1, None, 3]}))


def test_ragged_lists_are_refused_naming_the_column():
    with pytest.raises(ValueError, match=r"column 'seq' holds lists of different lengths"):
        from_arrow(pa.table({"seq": [[1, 2], [3]]}))


def test_a_column_without_tensor_form_is_refused():
    import decimal

    table = pa.table({"price": pa.array([decimal.Decimal("1.5")])})
    with pytest.raises(TypeError, match=r"column 'price' has Arrow type decimal.*expected"):
        from_arrow(table)


def test_non_arrow_value_is_refused_naming_the_key():
    td = TensorDict({"obj": tensorbox.NonTensorData(object())}, batch_size=[2])
    with pytest.raises(TypeError, match=r"non-tensor entry 'obj' \(object\) has no Arrow form"):
        to_arrow(td)


def test_to_arrow_needs_a_batch_dim():
    with pytest.raises(ValueError, match="no batch dim"):
        to_arrow(TensorDict({"a": torch.zeros(2)}))


def test_from_arrow_refuses_other_objects():
    with pytest.raises(TypeError, match=r"expected a pyarrow\.Table"):
        from_arrow({"a": [1]})


def test_a_failed_parquet_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "t.parquet"
    TensorDict({"a": torch.arange(3)}, [3]).to_parquet(path)
    with pytest.raises(TypeError, match="complex"):
        TensorDict({"a": torch.zeros(3, dtype=torch.complex64)}, [3]).to_parquet(path)
    with pytest.raises(Exception, match="compression"):
        TensorDict({"a": torch.ones(3)}, [3]).to_parquet(path, compression="nope")
    assert pq.read_table(path).column("a").to_pylist() == [0, 1, 2]
    assert os.listdir(tmp_path) == ["t.parquet"]


# ------------------------------------------------------------------ pandas / CSV / JSON


@given(columns())
def test_pandas_round_trip_against_pandas(data):
    _rows, cols = data
    flat = {k: (v.flatten(1)[:, 0] if v.dim() > 1 else v) for k, v in cols.items()}
    df = pd.DataFrame({k: v.numpy() for k, v in flat.items()})
    td = TensorDict.from_pandas(df)
    for k, v in flat.items():
        assert torch.equal(td[k], v)
    back = td.to_pandas()
    pd.testing.assert_frame_equal(back, df)


def test_pandas_categorical_nullable_and_errors():
    df = pd.DataFrame({"c": pd.Categorical(["x", "y", "x"]), "n": pd.array([1, 2, 3], "Int64")})
    td = TensorDict.from_pandas(df)
    assert td["c"].tolist() == [0, 1, 0] and td["n"].dtype == torch.int64
    with pytest.raises(ValueError, match=r"column 'n' has 1 missing value\(s\).*fillna"):
        TensorDict.from_pandas(pd.DataFrame({"n": pd.array([1, None], "Int64")}))
    nested = TensorDict({"a": {"b": torch.zeros(2)}}, [2])
    with pytest.raises(ValueError, match="is nested; pass separator"):
        nested.to_pandas()
    with pytest.raises(ValueError, match=r"Cannot convert tensor 'm' of shape \[2, 2\]"):
        TensorDict({"m": torch.zeros(2, 2)}, [2]).to_pandas()


def test_conflicting_batch_sizes():
    with pytest.raises(TypeError, match="Conflicting batch sizes"):
        TensorDict.from_pandas(pd.DataFrame({"x": [1]}), batch_size=[1], auto_batch_size=True)


def test_csv_round_trip(tmp_path):
    td = TensorDict({"a": torch.arange(3), "n": {"b": torch.tensor([0.5, 1.0, 2.0])}}, [3])
    td.to_csv(tmp_path / "t.csv", separator=".")
    assert list(pd.read_csv(tmp_path / "t.csv").columns) == ["a", "n.b"]
    back = TensorDict.from_csv(tmp_path / "t.csv", separator=".")
    assert back["n", "b"].tolist() == [0.5, 1.0, 2.0]
    assert back["a"].tolist() == [0, 1, 2]


def test_json_records_lines_and_nesting(tmp_path):
    td = TensorDict({"a": torch.arange(3), "n": {"b": torch.ones(3, 2)}}, [3])
    td.to_json(tmp_path / "t.json")
    back = TensorDict.from_json(tmp_path / "t.json")
    assert back["n", "b"].shape == (3, 2) and back["a"].tolist() == [0, 1, 2]
    td.to_json(tmp_path / "t.jsonl", lines=True)
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 3
    assert TensorDict.from_json(tmp_path / "t.jsonl", lines=True).batch_size == (3,)
    (tmp_path / "bad.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match=r"bad.json' should hold an array of objects"):
        TensorDict.from_json(tmp_path / "bad.json")


# ------------------------------------------------------------------ row groups


def test_parquet_row_groups_read_lazily(tmp_path):
    path = tmp_path / "big.parquet"
    pq.write_table(
        pa.table({"x": np.arange(100), "y": np.arange(100) * 0.5}), path, row_group_size=32
    )
    groups = ParquetRowGroups(path, columns=["x"])
    assert len(groups) == 4 and groups.num_rows == 100
    assert groups[3]["x"].tolist() == list(range(96, 100))
    assert "y" not in groups[0]
    assert [b.batch_size[0] for b in groups.iter_batches(40)] == [40, 40, 20]
    again = pickle.loads(pickle.dumps(groups))
    assert torch.equal(torch.cat([g["x"] for g in again]), torch.arange(100))
    loader = torch.utils.data.DataLoader(groups, batch_size=None)
    assert sum(b.batch_size[0] for b in loader) == 100
    with pytest.raises(IndexError, match="row group 4 of 4"):
        groups[4]


def test_module_level_functions_on_the_package_face(tmp_path):
    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "t.parquet")
    assert tensorbox.from_parquet(tmp_path / "t.parquet")["x"].tolist() == [1, 2]
    assert tensorbox.from_arrow(tensorbox.to_arrow(TensorDict({"a": torch.ones(1)}, [1])))[
        "a"
    ].tolist() == [1.0]


def test_memory_mapped_table_is_viewed_and_copy_gives_own_memory(tmp_path):
    path = str(tmp_path / "cache.arrow")
    table = pa.table({"x": np.arange(64, dtype=np.int64)})
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    mapped = pa.ipc.open_file(pa.memory_map(path)).read_all()
    buf = mapped["x"].chunks[0].buffers()[1]
    assert not buf.is_mutable
    assert _inside(from_arrow(mapped, copy=False)["x"], buf)  # read-only views
    own = from_arrow(mapped)["x"]  # the default copies immutable memory
    assert not _inside(own, buf)
    own += 1  # its own memory: writable
    assert own[0].item() == 1
    assert not _inside(from_arrow(table, copy=True)["x"], table["x"].chunks[0].buffers()[1])


def test_tables_written_by_tensordict_read_back():
    td = pytest.importorskip("tensordict")
    src = td.TensorDict(x=torch.arange(4.0), img=torch.arange(24).view(4, 2, 3), batch_size=[4])
    back = from_arrow(td.to_arrow(src))
    assert torch.equal(back["img"], src["img"]) and torch.equal(back["x"], src["x"])
