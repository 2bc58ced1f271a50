"""``from_schema``: zeros of the right shapes and dtypes in each storage, checked against
``torch.zeros`` (the oracle), and the errors for bad schemas and unknown storages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict

DTYPES = [torch.float32, torch.int64, torch.uint8, torch.bool, torch.float16]

schemas = st.dictionaries(
    st.sampled_from(["a", "b", "obs", "reward"]),
    st.tuples(st.lists(st.integers(0, 3), max_size=2), st.sampled_from(DTYPES)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=25, deadline=None)
@given(schema=schemas, batch=st.lists(st.integers(0, 4), max_size=2))
def test_in_memory_matches_torch_zeros(schema: dict, batch: list[int]) -> None:
    td = TensorDict.from_schema(schema, batch_size=batch)
    assert td.batch_size == torch.Size(batch)
    assert sorted(td.keys()) == sorted(schema)
    for key, (shape, dtype) in schema.items():
        torch.testing.assert_close(td[key], torch.zeros([*batch, *shape], dtype=dtype))


def test_shared_memory() -> None:
    td = TensorDict.from_schema({"a": ([2], torch.float32)}, batch_size=[3], storage="shared")
    assert td["a"].is_shared() and td["a"].shape == (3, 2)


def test_nested_keys_and_default_batch() -> None:
    td = TensorDict.from_schema({("next", "obs"): ([2], torch.float32)})
    assert td.batch_size == torch.Size([])
    assert td["next", "obs"].shape == (2,)


def test_memmap_is_sparse_and_writable(tmp_path: Path) -> None:
    td = TensorDict.from_schema(
        {"obs": ([1024, 1024], torch.uint8)}, batch_size=[64], storage="memmap", prefix=tmp_path
    )
    assert td.is_memmap() and td["obs"].shape == (64, 1024, 1024)
    (f,) = [p for p in tmp_path.rglob("*.memmap")]
    # 64 MiB announced, (almost) nothing allocated until rows are written
    assert os.stat(f).st_blocks * 512 < 1 << 20
    td[3] = TensorDict({"obs": torch.ones(1024, 1024, dtype=torch.uint8)}, [])
    back = TensorDict.load_memmap(tmp_path)
    assert back["obs"][3].all() and not back["obs"][4].any()


@pytest.mark.parametrize("storage", ["h5", "zarr"])
def test_persistent_storages(tmp_path: Path, storage: str) -> None:
    pytest.importorskip("h5py" if storage == "h5" else "zarr")
    from tensorbox.interop import PersistentTensorDict

    td = TensorDict.from_schema(
        {"obs": ([4], torch.float32), "reward": ([], torch.int64)},
        batch_size=[8],
        storage=storage,
        filename=str(tmp_path / f"s.{storage}"),
    )
    assert isinstance(td, PersistentTensorDict)
    assert td["obs"].shape == (8, 4) and (td["obs"] == 0).all()
    td[0] = TensorDict({"obs": torch.ones(4), "reward": torch.ones((), dtype=torch.int64)}, [])
    assert (td["obs"][0] == 1).all() and (td["obs"][1:] == 0).all()
    assert td["reward"].dtype == torch.int64
    td.close()


def test_redis_storage(redis_server) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("redis")
    from tensorbox import TensorDictStore

    td = TensorDict.from_schema(
        {"obs": ([3], torch.float32)},
        batch_size=[5],
        storage="redis",
        host=redis_server.host,
        port=redis_server.port,
        prefix="schema-test",
    )
    try:
        assert isinstance(td, TensorDictStore)
        torch.testing.assert_close(td["obs"], torch.zeros(5, 3))
    finally:
        td.clear_redis()
        td.close()


def test_unknown_storage_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown storage 'nope'.*'memmap', 'h5', 'zarr'"):
        TensorDict.from_schema({"a": ([1], torch.float32)}, storage="nope")


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ([("a", ([1], torch.float32))], r"must be a mapping of key -> \(shape, dtype\), got list"),
        ({"a": [1]}, r"key 'a': expected a pair \(element shape, dtype\)"),
        ({"a": ([1], "float32")}, r"key 'a': 'float32' is not a torch.dtype"),
        ({3: ([1], torch.float32)}, r"key 3 must be a str or a tuple of str"),
    ],
)
def test_bad_schemas_name_the_key(schema: object, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        TensorDict.from_schema(schema)  # type: ignore[arg-type]


def test_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match=r"key 'a': negative size in shape \[-1\]"):
        TensorDict.from_schema({"a": ([-1], torch.float32)})


def test_persistent_needs_a_filename() -> None:
    with pytest.raises(TypeError, match=r"storage='zarr'\) needs filename="):
        TensorDict.from_schema({"a": ([1], torch.float32)}, storage="zarr")
