"""consolidate() as tensordict users rely on it: the ``_consolidated`` marker, byte-equal
buffers, ``TensorDictFuture``, one-buffer pickling and file round trips."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict, TensorDictFuture, tensorclass
from tensorbox.utils import TensorDictFuture as UtilsFuture

DTYPES = [torch.float32, torch.float16, torch.uint8, torch.float64, torch.int32, torch.bool]


def _tree(sizes: list[int], dtypes: list[torch.dtype]) -> TensorDict:
    td = TensorDict(
        {f"k{i}": torch.arange(n).to(dt) for i, (n, dt) in enumerate(zip(sizes, dtypes))},
        batch_size=[],
    )
    td["nested"] = TensorDict(a=torch.arange(3.0), s="text")
    return td


def test_only_a_consolidated_container_has_the_marker() -> None:
    td = _tree([2, 3], [torch.float32, torch.int64])
    assert not hasattr(td, "_consolidated")
    c = td.consolidate()
    assert set(c._consolidated) >= {"storage", "metadata"}
    storage = c._consolidated["storage"]
    assert storage.dtype is torch.uint8
    storage.zero_()  # the leaves are views of it
    assert (c["k1"] == 0).all() and (c["nested", "a"] == 0).all()
    c.unlock_()  # unlocking ends the consolidation
    assert not hasattr(c, "_consolidated") and not c.is_consolidated()
    with pytest.raises(AttributeError, match="not consolidated"):
        _ = td._consolidated


def test_a_consolidated_tensorclass_has_the_marker() -> None:
    @tensorclass
    class Pair:
        x: torch.Tensor
        y: torch.Tensor

    p = Pair(x=torch.zeros(2), y=torch.ones(2, 3), batch_size=[2])
    assert not hasattr(p, "_consolidated")
    c = p.consolidate()
    assert isinstance(c, Pair) and c._consolidated["storage"].numel() >= 32


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.sampled_from(DTYPES)), min_size=1, max_size=12),
    st.sampled_from([0, 3]),
)
def test_two_consolidations_are_byte_equal(
    leaves: list[tuple[int, torch.dtype]], num_threads: int
) -> None:
    # the alignment padding is zeroed, never stale memory
    td = _tree([n for n, _ in leaves], [d for _, d in leaves])
    a = td.consolidate()._consolidated["storage"]
    torch.empty(a.numel() * 4, dtype=torch.uint8).fill_(0xAB)  # dirty the allocator
    b = td.consolidate(num_threads=num_threads)._consolidated["storage"]
    assert torch.equal(a, b)


def test_consolidate_to_a_file_and_back(tmp_path: Path) -> None:
    td = _tree([5, 1, 7], [torch.float16, torch.uint8, torch.float64])
    c = td.consolidate(filename=tmp_path / "f.td", num_threads=2)
    back = TensorDict.from_consolidated(tmp_path / "f.td")
    assert (back == td).all() and back["nested", "s"] == "text"
    assert torch.equal(back._consolidated["storage"], c._consolidated["storage"])


def test_return_early_gives_a_tensordict_future(tmp_path: Path) -> None:
    assert TensorDictFuture is UtilsFuture
    td = _tree([4, 4], [torch.float32, torch.int64])
    fut = td.consolidate(num_threads=2, return_early=True)
    assert isinstance(fut, TensorDictFuture)
    assert (fut.result() == td).all() and fut.result().is_consolidated()
    saved = td.memmap(tmp_path / "m", return_early=True)
    assert isinstance(saved, TensorDictFuture) and saved.done()
    with pytest.raises(NotImplementedError, match="use_buffer"):
        td.consolidate(return_early=True, use_buffer=True)
    with pytest.raises(NotImplementedError, match="non_blocking"):
        td.consolidate(return_early=True, non_blocking=True)


def test_an_error_in_the_background_reaches_result(tmp_path: Path) -> None:
    td = TensorDict(a=torch.zeros(2), obj=object())
    fut = td.consolidate(filename=tmp_path / "f.td", return_early=True)
    with pytest.raises(TypeError, match="JSON values only"):
        fut.result()


def test_pickling_sends_one_buffer() -> None:
    td = TensorDict({f"k{i}": torch.full((8,), float(i)) for i in range(200)}, batch_size=[8])
    c = td.consolidate()
    blob, plain = pickle.dumps(c), pickle.dumps(td)
    back = pickle.loads(blob)
    assert back.is_consolidated() and (back == td).all()
    assert len(blob) < len(plain)  # one storage instead of 200 tensors
    leaf_ptrs = {v.untyped_storage().data_ptr() for v in back.values()}
    assert len(leaf_ptrs) == 1
