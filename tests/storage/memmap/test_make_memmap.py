"""tensordict's entry points for adding to and loading into memory-mapped containers:
``make_memmap``, ``make_memmap_from_tensor``, ``make_memmap_from_storage``,
``load_memmap_``, ``saved_path``, and ``td[k] += v`` on a locked (saved) tree."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import MemoryMappedTensor, TensorDict
from tensorbox.errors import LockedError


def _tree(tmp_path, name: str = "t") -> tuple[TensorDict, str]:
    path = str(tmp_path / name)
    return TensorDict(a=torch.zeros(3), batch_size=[3]).memmap(path), path


def test_make_memmap_adds_a_saved_entry_while_locked(tmp_path) -> None:
    td, path = _tree(tmp_path)
    x = td.make_memmap(("n", "b"), [3, 2], dtype=torch.int64)
    assert type(x) is MemoryMappedTensor and x.dtype is torch.int64 and (x == 0).all()
    assert td["n", "b"] is x and td.is_locked and td["n"].is_locked and td.is_memmap()
    x.fill_(5)  # the leaf maps the new file: writes reach it
    again = TensorDict.load_memmap(path)
    assert again["n", "b"].tolist() == [[5, 5]] * 3
    assert x.filename == os.path.join(path, "n", "b.memmap")
    with pytest.raises(RuntimeError, match=r"key \('n', 'b'\) already exists"):
        td.make_memmap(("n", "b"), [3, 2])


def test_make_memmap_from_tensor_copies(tmp_path) -> None:
    td, path = _tree(tmp_path)
    src = MemoryMappedTensor.ones(3, 2, filename=tmp_path / "elsewhere.memmap")
    out = td.make_memmap_from_tensor("b", src)
    assert out.untyped_storage().data_ptr() != src.untyped_storage().data_ptr()
    assert out.filename == os.path.join(path, "b.memmap")
    shaped = td.make_memmap_from_tensor("c", torch.ones(3, 4), copy_data=False)
    assert shaped.shape == (3, 4) and (shaped == 0).all()
    loaded = TensorDict.load_memmap(path)
    assert loaded["b"].sum() == 6 and sorted(loaded.keys()) == ["a", "b", "c"]
    with pytest.raises(TypeError, match="expected a tensor, got list"):
        td.make_memmap_from_tensor("d", [1, 2])


def test_make_memmap_from_storage_takes_the_entry_file_only(tmp_path) -> None:
    path = str(tmp_path / "t")
    base = TensorDict({"a": torch.arange(4.0)}, [4]).memmap(path)
    td = TensorDict(batch_size=[4]).memmap(path)  # replaces the tree; base maps the old file
    out = td.make_memmap_from_storage("a", base["a"].untyped_storage(), [4])
    assert out.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert TensorDict.load_memmap(path)["a"].tolist() == [0.0, 1.0, 2.0, 3.0]
    other = MemoryMappedTensor.ones(4, filename=tmp_path / "other.memmap")
    with pytest.raises(RuntimeError, match="not the file of the new entry"):
        td.make_memmap_from_storage("b", other.untyped_storage(), [4])
    with pytest.raises(RuntimeError, match="the storage has no file"):
        td.make_memmap_from_storage("b", torch.zeros(4).untyped_storage(), [4])
    assert sorted(TensorDict.load_memmap(path).keys()) == ["a"]


def test_make_memmap_in_shared_memory_and_refused_elsewhere() -> None:
    td = TensorDict(a=torch.zeros(3), batch_size=[3]).memmap()
    data = torch.arange(6.0).share_memory_()
    out = td.make_memmap_from_storage("b", data.untyped_storage(), [3, 2])
    data[0] = 9.0
    assert out[0, 0] == 9.0  # the storage itself, not a copy
    assert td.make_memmap("c", [3]).is_shared()
    with pytest.raises(RuntimeError, match="is not memory-mapped; call memmap_"):
        TensorDict(a=torch.zeros(3), batch_size=[3]).make_memmap("b", [3])
    with pytest.raises(TypeError, match="2-d tensor of shapes describes a nested tensor"):
        td.make_memmap("d", torch.tensor([[1, 2], [1, 3]]))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=3), st.sampled_from([0, 1]))
def test_make_memmap_matches_tensordict(shape: list[int], which: int) -> None:
    import tempfile

    tensordict = pytest.importorskip("tensordict")  # the oracle: the bench/interop extra

    with tempfile.TemporaryDirectory() as d:
        ours = TensorDict().memmap(f"{d}/ours")
        theirs = tensordict.TensorDict().memmap(f"{d}/theirs")
        if which == 0:
            a, b = ours.make_memmap("k", shape), theirs.make_memmap("k", shape)
            a.fill_(1)
            b.fill_(1)
        else:
            t = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
            a, b = ours.make_memmap_from_tensor("k", t), theirs.make_memmap_from_tensor("k", t)
        assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
        assert torch.equal(TensorDict.load_memmap(f"{d}/ours")["k"], b)


def test_saved_path(tmp_path) -> None:
    td, path = _tree(tmp_path)
    nested = TensorDict({"n": {"x": torch.zeros(2)}}, [2]).memmap(tmp_path / "n")
    assert td.saved_path == path and nested["n"].saved_path == str(tmp_path / "n" / "n")
    assert TensorDict.load_memmap(path).saved_path == path
    assert TensorDict(a=torch.zeros(1)).saved_path is None and td.clone().saved_path is None


def test_load_memmap_into_a_container(tmp_path) -> None:
    src = TensorDict({"a": torch.ones(2), "n": {"x": torch.arange(2)}, "s": "text"}, [2])
    src.memmap(tmp_path / "src")
    dest = TensorDict({"a": torch.zeros(2), "n": {"x": torch.zeros(2), "old": torch.ones(2)}}, [2])
    nested = dest["n"]
    assert dest.load_memmap_(tmp_path / "src") is dest
    assert dest["n"] is nested  # nested containers are kept and filled
    assert (dest == src).all() and sorted(dest["n"].keys()) == ["x"] and dest["s"] == "text"
    rows = TensorDict({"a": torch.zeros(4, 3)}, [4, 3])
    TensorDict({"a": torch.ones(4, 2)}, [4, 2]).memmap(tmp_path / "rows")
    rows._get_sub_tensordict((slice(None), slice(0, 2))).load_memmap_(tmp_path / "rows")
    assert rows["a"].sum() == 8  # a row view writes its rows
    saved, _ = _tree(tmp_path)
    with pytest.raises(RuntimeError, match="backed by a saved tree"):
        saved.load_memmap_(tmp_path / "src")


def test_augmented_assignment_on_a_locked_tree(tmp_path) -> None:
    td, path = _tree(tmp_path)
    td["a"] += 1  # the leaf is added to in place, then set again as itself
    assert TensorDict.load_memmap(path)["a"].tolist() == [1.0] * 3
    archive = tmp_path / "x.tdz"
    TensorDict(a=torch.zeros(3), batch_size=[3]).save(archive)
    before = archive.read_bytes()
    loaded = TensorDict.load_memmap(archive)
    loaded["a"] += 1  # copy-on-write: this process only
    assert loaded["a"].tolist() == [1.0] * 3 and archive.read_bytes() == before
    with pytest.raises(LockedError, match="cannot set 'a': the TensorDict is locked"):
        td["a"] = td["a"] + 1  # a new tensor is still a replacement
    with pytest.raises(LockedError, match="cannot set 'a': the TensorDict is locked"):
        td.set("a", td["a"])  # set() of a locked container refuses, as tensordict's
    with pytest.raises(LockedError, match="cannot set"):
        td.set(("a",), td["a"])


# ------------------------------------------------- a new entry of a saved tree is sparse


def _allocated(path) -> int:  # type: ignore[no-untyped-def]
    return os.stat(path).st_blocks * 512


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda td: td.make_memmap("big", (4, 1 << 18)), id="make_memmap"),
        pytest.param(
            lambda td: td.make_memmap_from_tensor("big", torch.ones(4, 1 << 18), copy_data=False),
            id="make_memmap_from_tensor(copy_data=False)",
        ),
    ],
)
def test_a_new_entry_of_a_saved_tree_is_a_sparse_file(small_tmpfs, make) -> None:  # type: ignore[no-untyped-def]
    # 4 MiB of zeros on an 8 MiB file system: made as a sparse file (as memmap_like's),
    # its blocks taken only by the rows written
    td = TensorDict(a=torch.zeros(4), batch_size=[4]).memmap(small_tmpfs / "t")
    x = make(td)
    file = small_tmpfs / "t" / "big.memmap"
    assert os.path.getsize(file) == 4 << 20 and _allocated(file) == 0
    td[1] = {"big": torch.full((1 << 18,), 2.0)}  # one row reserved, then written
    assert 0 < _allocated(file) < 4 << 20
    back = TensorDict.load_memmap(small_tmpfs / "t")
    assert back["big"].sum().item() == 2.0 * (1 << 18) and x[1, 0].item() == 2.0


def test_a_new_entry_larger_than_the_disk_is_made_and_its_rows_raise_when_full(
    small_tmpfs,
) -> None:  # type: ignore[no-untyped-def]
    td = TensorDict(a=torch.zeros(8), batch_size=[8]).memmap(small_tmpfs / "t")
    td.make_memmap("big", (8, 1 << 20))  # 32 MiB on 8 MiB: nothing is written now
    td[0] = {"big": torch.ones(1 << 20)}  # 4 MiB
    with pytest.raises(
        OSError, match=r"no space left on the device to write rows 1\.\.1 of key 'big'"
    ):
        td[1] = {"big": torch.ones(1 << 20)}  # 4 more: the disk is full
    # row 1 took no block (reading a hole of a full tmpfs would need a page: not read)
    assert _allocated(small_tmpfs / "t" / "big.memmap") == 4 << 20
    assert TensorDict.load_memmap(small_tmpfs / "t")["big"][0].sum().item() == 1 << 20
