"""Every public write on a tree-backed container reaches the tree or raises (issue 14,
"Everyday writes"): row writes with text, keys set or deleted after ``unlock_()``,
``set_``/``update_`` of non-tensor values, and ``memmap_()`` with no prefix."""

from __future__ import annotations

import copy
import gc
import json
import os

import pytest
import torch

from tensorbox import TensorDict, tensorclass
from tensorbox._core.backing import OPEN, TREES
from tensorbox.errors import LockedError


def _saved(tmp_path, name: str = "t") -> tuple[TensorDict, str]:
    path = str(tmp_path / name)
    td = TensorDict(
        {"x": torch.zeros(3), "name": "a", "sub": {"y": torch.zeros(3), "s": "q"}}, [3]
    ).memmap(path)
    return td, path


def _disk(path: str) -> TensorDict:
    return TensorDict.load_memmap(path)


# ---------------------------------------------------------------- row writes (item 5)


def test_text_in_a_row_write_reaches_the_tree(tmp_path) -> None:
    td, path = _saved(tmp_path)
    td[1] = TensorDict({"x": torch.tensor(1.0), "name": "b"}, [])
    assert td["name"] == ["a", "b", "a"]
    back = _disk(path)
    assert back["name"] == ["a", "b", "a"]
    assert back["x"].tolist() == [0.0, 1.0, 0.0]


def test_text_in_a_nested_row_write_reaches_the_tree(tmp_path) -> None:
    td, path = _saved(tmp_path)
    td[0] = {"sub": {"s": "z", "y": torch.tensor(3.0)}}
    assert _disk(path)["sub", "s"] == ["z", "q", "q"]
    assert _disk(path)["sub", "y"].tolist() == [3.0, 0.0, 0.0]


def test_row_writes_on_a_loaded_tree_and_set_at_reach_it(tmp_path) -> None:
    _, path = _saved(tmp_path)
    loaded = _disk(path)
    loaded.set_at_("name", "c", 2)
    loaded.update_at_({"name": "d"}, 0)
    assert _disk(path)["name"] == ["d", "a", "c"]


def test_an_unchanged_text_commits_nothing(tmp_path) -> None:
    td, path = _saved(tmp_path)
    before = os.stat(path).st_ino
    td[1] = {"x": torch.tensor(2.0), "name": "a"}  # tensor rows go through the mapping
    assert os.stat(path).st_ino == before  # the tree was not swapped
    assert _disk(path)["x"].tolist() == [0.0, 2.0, 0.0]


def test_a_text_the_tree_cannot_hold_raises_before_any_row_is_written(tmp_path) -> None:
    td, path = _saved(tmp_path)
    with pytest.raises(TypeError, match=r"key 'name': value <object object at .* cannot be saved"):
        td[2] = {"x": torch.tensor(5.0), "name": object()}
    assert td["x"].tolist() == [0.0, 0.0, 0.0]
    assert _disk(path)["x"].tolist() == [0.0, 0.0, 0.0]
    assert td["name"] == "a" and _disk(path)["name"] == "a"


def test_a_nested_text_the_tree_cannot_hold_names_its_key(tmp_path) -> None:
    td, _ = _saved(tmp_path)
    with pytest.raises(TypeError, match=r"key \('sub', 's'\): value"):
        td[0] = {"sub": {"s": {1, 2}}}


# ---------------------------------------------------------------- set_ / update_ of text


def test_set_and_update_of_text_on_a_locked_tree_reach_it(tmp_path) -> None:
    td, path = _saved(tmp_path)
    td.set_("name", "B")
    assert _disk(path)["name"] == "B"
    td.update_({"name": "C", "sub": {"s": "w"}})
    back = _disk(path)
    assert (back["name"], back["sub", "s"]) == ("C", "w")
    td.set("name", "D", inplace=True)
    assert _disk(path)["name"] == "D"


# ---------------------------------------------------------------- keys (item 6)


def test_a_key_set_after_unlock_is_saved_at_once(tmp_path) -> None:
    td, path = _saved(tmp_path)
    td.unlock_()
    td["new"] = torch.ones(3)
    assert "new" in _disk(path)  # no memmap_() needed
    assert not td.is_locked  # a write keeps the lock state
    td.memmap_()  # what the user called: still right
    back = _disk(path)
    assert back["new"].tolist() == [1.0, 1.0, 1.0]
    assert td.is_locked


def test_keys_set_deleted_and_renamed_in_an_unlock_block(tmp_path) -> None:
    td, path = _saved(tmp_path)
    with td.unlock_():
        td["sub", "new"] = torch.ones(3)
        td["n2", "deep"] = torch.ones(3)  # a new level
        del td["x"]
        td.rename_key_("name", "nm")
        td.update({"u": torch.full((3,), 7.0), "txt": "hello"})
    assert td.is_locked
    back = _disk(path)
    assert set(back.keys(True)) == {
        "sub",
        ("sub", "y"),
        ("sub", "s"),
        ("sub", "new"),
        "n2",
        ("n2", "deep"),
        "nm",
        "u",
        "txt",
    }
    assert back["txt"] == "hello" and back["u"].tolist() == [7.0] * 3
    # the new leaves are mapped from the tree now: in-place writes reach it
    td["u"][0] = 1.0
    assert _disk(path)["u"].tolist() == [1.0, 7.0, 7.0]


def test_a_replaced_leaf_and_a_tensor_mapped_elsewhere_are_copied_into_the_tree(tmp_path) -> None:
    td, path = _saved(tmp_path)
    other = TensorDict(z=torch.full((3,), 4.0), batch_size=[3]).memmap(str(tmp_path / "o"))
    with td.unlock_():
        td["x"] = torch.full((3,), 2.0)
        td["z"] = other["z"]
    back = _disk(path)
    assert back["x"].tolist() == [2.0] * 3 and back["z"].tolist() == [4.0] * 3
    assert td["z"].filename.startswith(path)


def test_a_failing_key_set_changes_neither_memory_nor_disk(tmp_path) -> None:
    td, path = _saved(tmp_path)
    with td.unlock_(), pytest.raises(TypeError, match="key 'bad': value <object object"):
        td["bad"] = object()
    assert "bad" not in td
    assert "bad" not in _disk(path)


def test_the_locked_error_leads_to_unlock(tmp_path) -> None:
    td, path = _saved(tmp_path)
    msg = r"cannot set 'new': the TensorDict is locked: unlock_\(\) first \(on a saved tree"
    with pytest.raises(LockedError, match=msg):
        td["new"] = torch.ones(3)
    with pytest.raises(LockedError, match=r"cannot delete 'x': .* unlock_\(\) first"):
        del td["x"]
    with pytest.raises(LockedError, match=r"cannot rename 'x': .* unlock_\(\) first"):
        td.rename_key_("x", "y")
    with pytest.raises(LockedError, match=r"cannot create 'k': .* unlock_\(\) first"):
        td["k", "j"] = torch.ones(3)
    # ... and what it recommends works
    with td.unlock_():
        td["new"] = torch.ones(3)
    assert "new" in _disk(path)


# ---------------------------------------------------------------- memmap_() with no prefix


def test_memmap_without_prefix_saves_pending_changes_into_its_own_tree(tmp_path) -> None:
    td, path = _saved(tmp_path)
    td._tensordict["pending"] = torch.ones(3)  # a change no gate saw (private access)
    td.memmap_()
    assert _disk(path)["pending"].tolist() == [1.0] * 3
    assert td["pending"].filename.startswith(path)


def test_memmap_without_prefix_on_a_node_saves_the_whole_tree(tmp_path) -> None:
    td, path = _saved(tmp_path)
    td._tensordict["pending"] = torch.ones(3)
    td["sub"].memmap_()
    assert "pending" in _disk(path)


def test_a_tensorclass_field_set_after_unlock_reaches_the_tree(tmp_path) -> None:
    @tensorclass
    class Rec:
        x: torch.Tensor
        name: str

    path = str(tmp_path / "tc")
    tc = Rec(x=torch.zeros(2), name="a", batch_size=[2]).memmap(path)
    tc.unlock_()
    tc.x = torch.ones(2)
    tc.memmap_()  # a field set on an unlocked tensorclass is saved by memmap_() at the latest
    assert Rec.load_memmap(path).x.tolist() == [1.0, 1.0]
    tc[0] = Rec(x=torch.tensor(5.0), name="b", batch_size=[])
    assert Rec.load_memmap(path).name == ["b", "a"]


def test_memmap_to_a_new_prefix_moves_the_tree(tmp_path) -> None:
    td, path = _saved(tmp_path)
    new = str(tmp_path / "moved")
    td.memmap_(new, copy_existing=True)
    td.set_("name", "moved")
    assert _disk(new)["name"] == "moved"
    assert _disk(path)["name"] == "a"


# ---------------------------------------------------------------- copies, views, mode="r"


def test_copies_are_in_memory_and_leave_the_tree_alone(tmp_path) -> None:
    td, path = _saved(tmp_path)
    for twin in (copy.deepcopy(td), td.clone()):
        twin.unlock_()
        twin["new"] = torch.ones(3)
        twin[0] = {"name": "zz"}
    assert set(_disk(path).keys()) == {"x", "name", "sub"}
    assert _disk(path)["name"] == "a"


def test_mode_r_is_copy_on_write(tmp_path) -> None:
    _, path = _saved(tmp_path)
    ro = TensorDict.load_memmap(path, mode="r")
    with ro.unlock_():
        ro["new"] = torch.ones(3)
    ro.set_("name", "b")
    ro["x"][0] = 9.0
    back = _disk(path)
    assert "new" not in back and back["name"] == "a" and back["x"][0] == 0.0


def test_a_node_outlives_its_root_and_still_writes_its_folder(tmp_path) -> None:
    td, path = _saved(tmp_path)
    sub = td["sub"]
    del td
    gc.collect()
    with sub.unlock_():
        sub["late"] = torch.ones(3)
    assert "late" in _disk(path)["sub"]


def test_a_deleted_node_leaves_the_tree(tmp_path) -> None:
    td, path = _saved(tmp_path)
    sub = td["sub"]
    with td.unlock_():
        del td["sub"]
    assert id(sub) not in TREES
    with sub.unlock_():
        sub["k"] = torch.ones(3)  # an in-memory container now
    assert "sub" not in _disk(path)


def test_registry_forgets_dead_trees(tmp_path) -> None:
    td, _ = _saved(tmp_path)
    ids = {id(td), id(td["sub"])}
    td.unlock_()
    assert ids <= OPEN
    del td
    gc.collect()
    assert not ids & set(TREES) and not ids & OPEN


def test_restructuring_writes_reach_the_tree(tmp_path) -> None:
    path = str(tmp_path / "r")
    td = TensorDict({"x": torch.zeros(3, 2), "y": torch.zeros(3, 2), "z": torch.zeros(3)}, [3])
    td = td.memmap(path)
    with td.unlock_():
        td.exclude("z", inplace=True)
        assert set(_disk(path).keys()) == {"x", "y"}
        td.batch_size = [3, 2]  # recorded in meta.json: saved
        assert _disk(path).batch_size == (3, 2)
        td.select("x", inplace=True)
        assert set(_disk(path).keys()) == {"x"}
    with pytest.raises(LockedError, match=r"select\(inplace=True\) on a locked .* unlock_\(\)"):
        td.select("x", inplace=True)


def test_a_write_that_fails_to_commit_is_undone_in_memory(tmp_path, monkeypatch) -> None:
    from tensorbox._storage import commit as _commit

    td, path = _saved(tmp_path)

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_commit, "commit", full)
    with pytest.raises(OSError, match="No space left"):
        td.set_("name", "b")
    with td.unlock_(), pytest.raises(OSError, match="No space left"):
        td["new"] = torch.ones(3)
    with pytest.raises(OSError, match="No space left"):
        td[0] = {"name": "c"}
    monkeypatch.undo()
    assert td["name"] == "a" and "new" not in td
    back = _disk(path)
    assert back["name"] == "a" and "new" not in back
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".t.tbx")]  # no leftovers


def test_apply_in_place_and_clear_device_reach_the_tree(tmp_path) -> None:
    path = str(tmp_path / "a")
    td = TensorDict({"x": torch.zeros(3)}, [3], device="cpu").memmap(path)
    td.apply_(lambda t: t + 1)  # same dtype: written into the files
    assert _disk(path)["x"].tolist() == [1.0] * 3
    with td.unlock_():
        td.apply_(lambda t: t.double())  # another dtype: a new leaf, saved at once
    assert _disk(path)["x"].dtype == torch.float64
    td.clear_device_()
    assert td.device is None  # the commit keeps it cleared (a load gives the CPU, as tensordict)
    with open(os.path.join(path, "meta.json")) as f:
        assert json.load(f)["device"] is None


def test_a_stale_handle_raises_instead_of_dropping_another_save(tmp_path) -> None:
    a, path = _saved(tmp_path)
    b = _disk(path)
    with a.unlock_():
        a["from_a"] = torch.ones(3)
    msg = "was saved again since this container was loaded or saved"
    with pytest.raises(RuntimeError, match=msg):
        b.set_("name", "from b")
    with b.unlock_(), pytest.raises(RuntimeError, match=msg):
        b["from_b"] = torch.ones(3)
    with pytest.raises(RuntimeError, match=msg):
        b.memmap_()
    assert b["name"] == "a" and "from_b" not in b  # undone in memory
    back = _disk(path)
    assert "from_a" in back and back["name"] == "a"
    b.memmap_(path)  # the way to replace the tree with this container, on purpose
    assert "from_a" not in _disk(path)
    # an overwrite by an unrelated save is detected the same way
    TensorDict({"x": torch.zeros(3)}, [3]).memmap(path)
    with pytest.raises(RuntimeError, match=msg):
        a.set_("name", "late")
