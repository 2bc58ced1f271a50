"""Hostile and unlucky users against the rebuilt bridges: each test is one attack that
broke a promise (data back as written, or a clear error naming the column/file)."""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest
import torch

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
st_torch = pytest.importorskip("safetensors.torch")

from tensorbox import FormatError, NonTensorData, TensorDict  # noqa: E402
from tensorbox.interop import ParquetRowGroups  # noqa: E402
from tensorbox.interop.arrow import META_KEY, from_arrow, from_pandas, to_pandas  # noqa: E402

# ------------------------------------------------------------------ tabular


@pytest.mark.parametrize(
    "categories",
    [[3, 1, 2], [0.5, -1.5], [True, False]],
    ids=["int", "float", "bool"],
)
def test_parquet_reads_back_a_categorical_of_non_strings(tmp_path, categories):
    # Parquet reads a dictionary of numbers back as plain values: the file to_parquet
    # wrote was refused ("records column 'c' as category, but its Arrow type is int64")
    values = [categories[-1], None, categories[0], categories[-1]]
    df = pd.DataFrame({"c": pd.Categorical(values, categories=categories)})
    path = tmp_path / "c.parquet"
    from_pandas(df).to_parquet(path, row_group_size=2)
    back = TensorDict.from_parquet(path)
    assert back["c"].tolist() == [len(categories) - 1, -1, 0, len(categories) - 1]
    pd.testing.assert_frame_equal(to_pandas(back), df)
    groups = ParquetRowGroups(path)
    pd.testing.assert_frame_equal(pd.concat([to_pandas(g) for g in groups], ignore_index=True), df)
    batches = [to_pandas(b) for b in groups.iter_batches(3)]
    pd.testing.assert_frame_equal(pd.concat(batches, ignore_index=True), df)


def test_parquet_reads_back_a_nested_categorical_of_non_strings(tmp_path):
    # inside a struct column (a nested container saved without a separator)
    df = pd.DataFrame(
        {
            "g.c": pd.Categorical([1, 2, None]),
            "g.h.k": pd.Categorical([True, False, True]),
            "g.s": pd.Categorical(["x", "y", "x"]),
            "z": [1, 2, 3],
        }
    )
    path = tmp_path / "n.parquet"
    from_pandas(df, separator=".").to_parquet(path, row_group_size=2)
    assert pa.types.is_struct(pq.read_schema(path).field("g").type)
    pd.testing.assert_frame_equal(to_pandas(TensorDict.from_parquet(path), separator="."), df)
    parts = [to_pandas(g, separator=".") for g in ParquetRowGroups(path)]
    pd.testing.assert_frame_equal(pd.concat(parts, ignore_index=True), df)


def test_parquet_and_arrow_keep_the_pandas_nullable_dtypes(tmp_path):
    df = pd.DataFrame(
        {
            "u": pd.array([1, 2], dtype="UInt8"),
            "b": pd.array([True, False], dtype="boolean"),
            "f": pd.array([0.5, 1.5], dtype="Float32"),
        }
    )
    path = tmp_path / "n.parquet"
    from_pandas(df).to_parquet(path)
    pd.testing.assert_frame_equal(to_pandas(TensorDict.from_parquet(path)), df)
    pd.testing.assert_frame_equal(to_pandas(from_arrow(from_pandas(df).to_arrow())), df)


@pytest.mark.parametrize("dtype", ["datetime64[ns]", "category", "nonsense", "Float64"])
def test_a_recorded_pandas_dtype_that_does_not_fit_is_a_format_error(dtype):
    meta = json.dumps({"columns": {"x": {"pandas": dtype}}}).encode()
    table = pa.table({"x": pa.array([1, 2], pa.int32())}).replace_schema_metadata({META_KEY: meta})
    td = from_arrow(table)
    with pytest.raises(
        FormatError, match=rf"pandas dtype of column 'x' is '{re.escape(dtype)}', which"
    ):
        to_pandas(td)


def test_metadata_nested_deeper_than_the_parser_is_a_format_error():
    raw = b"[" * 100_000 + b"]" * 100_000
    table = pa.table({"x": [1]}).replace_schema_metadata({META_KEY: raw})
    with pytest.raises(FormatError, match=r"'tensorbox' nests deeper than Python's JSON"):
        from_arrow(table)


def test_an_empty_object_column_keeps_its_dtype():
    df = pd.DataFrame({"s": pd.Series([], dtype=object), "x": pd.Series([], dtype="int16")})
    pd.testing.assert_frame_equal(to_pandas(from_pandas(df)), df)


@pytest.mark.parametrize("how", ["cat", "stack", "row write"])
def test_rows_of_different_frames_say_why_they_cannot_be_a_frame(how):
    a = from_pandas(pd.DataFrame({"c": pd.Categorical(["x", "x"])}))
    b = from_pandas(pd.DataFrame({"c": pd.Categorical(["y", "y"])}))
    if how == "cat":
        mixed = torch.cat([a, b])
    elif how == "stack":
        mixed = torch.stack([a, b], 1).reshape(-1)
    else:
        mixed = a.clone()
        mixed[0] = b[0]
    with pytest.raises(FormatError, match=r"rows of this container carry different column"):
        to_pandas(mixed)
    same = torch.cat([a, a])  # one frame's parts: one record, fine
    assert to_pandas(same)["c"].tolist() == ["x"] * 4


# ------------------------------------------------------------------ safetensors


def _raw_safetensors(path, header: dict, data: bytes = b""):
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


@pytest.mark.parametrize("shape", [[0, 2**63], [2**40, 2**40, 0]])
def test_a_shape_past_int64_is_a_format_error_not_a_torch_error(tmp_path, shape):
    entry = {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}
    path = _raw_safetensors(tmp_path / "big.safetensors", {"w": entry})
    with pytest.raises(FormatError, match=r"big\.safetensors: entry 'w' has shape .* past int64"):
        TensorDict.from_safetensors(path)
    with pytest.raises(FormatError, match=r"entry 'w' has shape .* past int64"):
        TensorDict.load_memmap(path)


def _lists(tree):
    return {k: _lists(v) if isinstance(v, dict) else v.tolist() for k, v in tree.items()}


@pytest.mark.parametrize(
    ("key", "tree"),
    [
        (".", {"": {"": [1.0]}}),
        ("..", {"": {"": {"": [1.0]}}}),
        ("../etc", {"": {"": {"/etc": [1.0]}}}),
        ("a.", {"a": {"": [1.0]}}),
    ],
)
def test_keys_with_empty_parts_nest_as_they_read_not_into_the_root(tmp_path, key, tree):
    # an empty first part was the root itself: "." lost a level, "../etc" looped
    path = tmp_path / "k.safetensors"
    st_torch.save_file({key: torch.ones(1)}, str(path))
    assert _lists(TensorDict.from_safetensors(path).to_dict()) == tree
    assert sorted(st_torch.load_file(str(path))) == [key]


def test_a_node_named_empty_string_keeps_its_level_in_the_file(tmp_path):
    # {"": {"x": a}} was written as key "x" (a KeyCollisionError beside "x") and
    # {"": {"": a}} as key "" (one level lost)
    path = tmp_path / "e.safetensors"
    td = TensorDict({"": {"x": torch.zeros(1), "": torch.full((1,), 2.0)}, "x": torch.ones(1)})
    td.to_safetensors(path)
    assert sorted(st_torch.load_file(str(path))) == [".", ".x", "x"]
    back = TensorDict.from_safetensors(path)
    assert (back == td).all()
    assert _lists(back.to_dict()) == _lists(td.to_dict())


# ------------------------------------------------------------------ HDF5 / zarr


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ([2.7], r"\[2\.7\]"),  # was truncated to 2: a 2-row batch of 4-row arrays
        ([-1], r"\[-1\]"),  # was accepted as batch size [-1]
        ("abc", "'abc'"),  # was a bare ValueError from int('a')
        (3, "3"),  # was a bare TypeError (not iterable)
        ([True], r"\[ ?True\]"),  # was batch size [1]
    ],
)
@pytest.mark.parametrize("backend", ["h5", "zarr"])
def test_a_lying_batch_size_attribute_is_a_format_error(tmp_path, backend, value, shown):
    from tensorbox.interop import PersistentTensorDict

    if backend == "h5":
        h5py = pytest.importorskip("h5py")
        path = tmp_path / "f.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("a", data=[1, 2, 3, 4])
            f.attrs["tensorbox_batch_size"] = np.asarray(value) if value != "abc" else value
        opened = PersistentTensorDict.from_h5
    else:
        zarr = pytest.importorskip("zarr")
        path = tmp_path / "f.zarr"
        group = zarr.open_group(str(path), mode="w")
        group.create_array("a", data=np.arange(4))
        group.attrs["tensorbox_batch_size"] = value
        opened = PersistentTensorDict.from_zarr
    match = rf"f\.{backend}:/: attribute 'tensorbox_batch_size' is .*{shown}.*; expected a list"
    with pytest.raises(FormatError, match=match):
        opened(path)


def test_a_batch_size_attribute_the_arrays_do_not_start_with_is_refused_on_open(tmp_path):
    h5py = pytest.importorskip("h5py")
    from tensorbox.interop import PersistentTensorDict

    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=np.arange(4))
        f.attrs["tensorbox_batch_size"] = [5]
    with pytest.raises(FormatError, match=r"records batch size \[5\], but an array .* \[4\]"):
        PersistentTensorDict.from_h5(path)  # was opened with batch size [5]


@pytest.mark.parametrize("name", ["t.h5", "t.hdf5", "t.zarr"])
def test_load_memmap_opens_hdf5_files_and_zarr_stores(tmp_path, name):
    # was "no zip end record: not a zip archive" (HDF5) or "meta.json is missing" (zarr)
    pytest.importorskip("zarr" if name.endswith("zarr") else "h5py")
    td = TensorDict({"a": torch.arange(3), "g": {"b": torch.ones(3, 2)}}, [3])
    path = tmp_path / name
    (td.to_zarr if name.endswith("zarr") else td.to_h5)(path)
    back = TensorDict.load_memmap(path)
    assert back.batch_size == td.batch_size and (back == td).all()
    with pytest.raises(ValueError, match=r"t\.(h5|hdf5|zarr) is an? (HDF5 file|zarr store), which"):
        TensorDict.load_memmap(path, mode="r+")


@pytest.mark.parametrize("key", ["a/b", "", ".", ".."])
@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_a_key_the_group_library_reads_as_a_path_is_refused_by_to_h5_and_to_zarr(
    tmp_path, fmt, key
):
    # "a/b" came back as a nested a -> b; "" and "." were the library's bare errors
    pytest.importorskip("h5py" if fmt == "h5" else "zarr")
    td = TensorDict({key: torch.ones(2)}, [2])
    with pytest.raises(ValueError, match=rf"key {re.escape(repr(key))} cannot name a member"):
        getattr(td, f"to_{fmt}")(tmp_path / f"t.{fmt}")
    assert not (tmp_path / f"t.{fmt}").exists()


def test_row_groups_share_one_coding_of_a_dictionary_inside_a_struct(tmp_path):
    # "y" was code 1 in the first row group and code 0 in the second
    path = tmp_path / "s.parquet"

    def table(values):
        column = pa.array(values).dictionary_encode()
        return pa.table({"g": pa.StructArray.from_arrays([column], names=["c"])})

    first, second = table(["x", "y"]), table(["y", "z"])
    with pq.ParquetWriter(path, first.schema) as writer:
        writer.write_table(first)
        writer.write_table(second)
    groups = ParquetRowGroups(path)
    assert [g["g", "c"].tolist() for g in groups] == [[0, 1], [1, 2]]
    assert groups.categories() == {"g.c": ["x", "y", "z"]}
    assert to_pandas(groups[1], separator=".")["g.c"].tolist() == ["y", "z"]


@pytest.mark.parametrize("tz", ["Mars/Olympus", "+99:00", "../../etc/passwd", ""])
def test_a_recorded_zone_arrow_does_not_know_is_a_format_error(tz):
    # was a bare ArrowInvalid asking to install the zoneinfo module
    info = {"x": {"kind": "timestamp", "unit": "ns", "tz": tz}}
    td = TensorDict({"x": torch.tensor([0, 1]), "__columns__": NonTensorData(info)}, [2])
    with pytest.raises(FormatError, match=rf"column 'x' has time zone {re.escape(repr(tz))}"):
        to_pandas(td)
    meta = json.dumps({"columns": info}).encode()
    table = pa.table({"x": pa.array([0, 1], pa.timestamp("ns"))})
    with pytest.raises(FormatError, match=r"column 'x' has time zone"):
        from_arrow(table.replace_schema_metadata({META_KEY: meta}))
