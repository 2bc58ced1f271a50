"""Everyday code gives tensordict's results: the same calls run against tensordict 0.15.3
(the oracle, where installed) and tensorbox, with the same assertions for both.

Each test takes ``lib``, the package under test (``tensordict`` or ``tensorbox``); the
tensordict run skips cleanly where it is not installed. The differences tensorbox keeps
on purpose are asserted by the ``test_kept_*`` tests, one behaviour per library, as
``docs/migrating.md``'s first table lists them.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
import torch

CPU = torch.device("cpu")


@pytest.fixture(params=["tensordict", "tensorbox"])
def lib(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "tensordict":
        return pytest.importorskip("tensordict")
    return importlib.import_module("tensorbox")


def _td(lib: ModuleType) -> object:
    return lib.TensorDict(
        {"a": torch.arange(3), "n": {"b": torch.ones(3, 2)}, "s": "cats"}, batch_size=[3]
    )


# ---------------------------------------------------------------- device after save and load


def _devices(td: object) -> list[torch.device | None]:
    return [td.device, td["n"].device]


def test_saved_containers_are_on_the_cpu(lib: ModuleType, tmp_path: Path) -> None:
    td = _td(lib)
    assert td.device is None
    assert _devices(td.memmap(tmp_path / "copy")) == [CPU, CPU]
    assert _devices(td.memmap()) == [CPU, CPU]  # shared memory
    assert _devices(td.memmap_like(tmp_path / "like")) == [CPU, CPU]
    assert _devices(td.clone().memmap_(tmp_path / "inplace")) == [CPU, CPU]
    assert _devices(td.clone().memmap_()) == [CPU, CPU]
    assert td.device is None  # the source is unchanged
    assert _devices(lib.TensorDict.load_memmap(tmp_path / "copy")) == [CPU, CPU]


def test_saved_archives_load_on_the_cpu(lib: ModuleType, tmp_path: Path) -> None:
    _td(lib).memmap(tmp_path / "one.tdz")
    back = lib.TensorDict.load_memmap(tmp_path / "one.tdz")
    assert _devices(back) == [CPU, CPU] and not back.is_locked
    assert back["n", "b"].tolist() == [[1.0, 1.0]] * 3


def test_every_store_loads_on_the_cpu(tmp_path: Path) -> None:
    """tensorbox's other stores decide the device in the same Loader: a memory:// URL, a
    .safetensors file, a tree saved from a container without a device."""
    from safetensors.torch import save_file

    from tensorbox import TensorDict

    TensorDict(a=torch.arange(3), batch_size=[3]).memmap("memory://dropin/x.tdz", archive=True)
    url = TensorDict.load_memmap("memory://dropin/x.tdz")
    save_file({"w": torch.ones(2)}, str(tmp_path / "m.safetensors"))
    st = TensorDict.load_memmap(tmp_path / "m.safetensors")
    for back in (url, st):
        assert back.device == CPU and not back.is_locked
    assert TensorDict.load_memmap(tmp_path / "m.safetensors", device="cpu").device == CPU


# ---------------------------------------------------------------- the lock, the mapping


def test_a_loaded_tree_is_unlocked(lib: ModuleType, tmp_path: Path) -> None:
    saved = _td(lib).memmap(tmp_path / "t")
    assert saved.is_locked  # a save's result stays locked
    back = lib.TensorDict.load_memmap(tmp_path / "t")
    assert not back.is_locked
    back["new"] = torch.zeros(3)  # what the saving guide's user writes next
    back["n", "c"] = torch.ones(3)
    assert set(back.keys()) == {"a", "n", "s", "new"}


def test_keys_set_on_a_loaded_tree_are_saved(tmp_path: Path) -> None:
    """tensorbox saves them (whole-tree commit); tensordict keeps them in memory (a kept
    difference: nothing written to a loaded tree is lost)."""
    from tensorbox import TensorDict

    _td(importlib.import_module("tensorbox")).memmap(tmp_path / "t")
    back = TensorDict.load_memmap(tmp_path / "t")
    back["new"] = torch.full((3,), 7)
    del back["a"]
    again = TensorDict.load_memmap(tmp_path / "t")
    assert sorted(again.keys()) == ["n", "new", "s"] and again["new"].tolist() == [7, 7, 7]


def test_load_on_the_cpu_keeps_the_mapping(lib: ModuleType, tmp_path: Path) -> None:
    _td(lib).memmap(tmp_path / "t")
    back = lib.TensorDict.load_memmap(tmp_path / "t", device="cpu")
    assert isinstance(back["a"], lib.MemoryMappedTensor) and back.device == CPU
    assert not back.is_locked
    back["a"][0] = 100  # reaches the file
    assert lib.TensorDict.load_memmap(tmp_path / "t")["a"].tolist() == [100, 1, 2]
    copy = lib.TensorDict.load_memmap(tmp_path / "t").clone()  # a copy in memory
    assert type(copy["a"]) is torch.Tensor
    copy["a"][0] = 5
    assert lib.TensorDict.load_memmap(tmp_path / "t")["a"].tolist() == [100, 1, 2]


def test_load_on_the_cpu_of_an_archive_stays_in_memory(lib: ModuleType, tmp_path: Path) -> None:
    _td(lib).memmap(tmp_path / "one.tdz")
    back = lib.TensorDict.load_memmap(tmp_path / "one.tdz", device="cpu")
    back["a"][0] = 100  # copy-on-write: the archive keeps its bytes
    assert back["a"].tolist() == [100, 1, 2]
    assert lib.TensorDict.load_memmap(tmp_path / "one.tdz")["a"].tolist() == [0, 1, 2]


# ---------------------------------------------------------------- saving a saved tree again


def test_saving_again_gives_the_same_leaves(lib: ModuleType, tmp_path: Path) -> None:
    td = _td(lib)
    shared = td.memmap()  # shared memory
    again = shared.memmap()
    assert again["a"] is shared["a"] and again["n", "b"] is shared["n", "b"]
    saved = td.memmap(tmp_path / "t")
    twice = saved.memmap(tmp_path / "t")  # the same prefix
    assert twice["a"] is saved["a"] and twice["n", "b"] is saved["n", "b"]
    assert twice.device == CPU and twice.is_locked
    twice["a"][0] = 9  # one mapping: both see it, and so does the folder
    assert saved["a"][0] == 9
    assert lib.TensorDict.load_memmap(tmp_path / "t")["a"].tolist() == [9, 1, 2]
    copy = td.memmap()  # leaves in memory are copied
    assert copy["a"] is not td["a"]


def test_kept_a_loaded_tree_saves_elsewhere_without_copy_existing(
    lib: ModuleType, tmp_path: Path
) -> None:
    """tensordict refuses (RuntimeError); tensorbox writes the copy (nothing is lost, and
    every leaf of a saved tree is its own file). The line that works in both:
    ``memmap(other, copy_existing=True)``."""
    _td(lib).memmap(tmp_path / "t")
    back = lib.TensorDict.load_memmap(tmp_path / "t")
    both = back.memmap(tmp_path / "both", copy_existing=True)
    assert both["a"].tolist() == [0, 1, 2]
    if lib.__name__ == "tensordict":
        with pytest.raises(RuntimeError, match="pass copy_existing=True"):
            back.memmap(tmp_path / "elsewhere")
    else:
        elsewhere = back.memmap(tmp_path / "elsewhere")
        assert elsewhere["a"].filename == str((tmp_path / "elsewhere" / "a.memmap").resolve())


# ---------------------------------------------------------------- text per row


def _row(lib: ModuleType, text: str = "cats") -> object:
    return lib.TensorDict(a=torch.zeros(()), s=text, batch_size=[])


def test_stacked_rows_give_a_value_per_row(lib: ModuleType) -> None:
    rows = torch.stack([_row(lib), _row(lib)])
    assert rows["s"] == ["cats", "cats"] and isinstance(rows.get("s"), lib.NonTensorStack)
    assert rows[0]["s"] == "cats" and rows[:1]["s"] == ["cats"]
    mixed = torch.stack([_row(lib), _row(lib, "dogs")])
    assert mixed["s"] == ["cats", "dogs"] and mixed[1]["s"] == "dogs"
    b3 = lib.TensorDict(a=torch.zeros(3), s="cats", batch_size=[3])
    assert torch.stack([b3, b3], 1)["s"] == [["cats", "cats"]] * 3
    assert torch.cat([b3, b3])["s"] == "cats"  # one shared value stays one


def test_expand_gives_a_value_per_row_where_it_adds_dims(lib: ModuleType) -> None:
    assert _row(lib).expand(2)["s"] == ["cats", "cats"]
    assert _row(lib).expand(2, 3)["s"] == [["cats"] * 3] * 2
    assert _row(lib).unsqueeze(0)["s"] == ["cats"]
    one = lib.TensorDict(a=torch.zeros(1), s="cats", batch_size=[1])
    assert one.expand(3)["s"] == "cats"  # no dim added: one shared value


def test_per_row_text_round_trips_through_a_save(lib: ModuleType, tmp_path: Path) -> None:
    rows = torch.stack([_row(lib), _row(lib, "dogs")])
    rows.memmap(tmp_path / "t")
    assert lib.TensorDict.load_memmap(tmp_path / "t")["s"] == ["cats", "dogs"]


# ---------------------------------------------------------------- sizes and errors


def test_indexing_without_batch_dims_raises_runtime_error(lib: ModuleType) -> None:
    with pytest.raises(RuntimeError):
        lib.TensorDict(a=torch.zeros(2))[0]


def test_indexing_without_batch_dims_is_a_batch_dim_error() -> None:
    from tensorbox import TensorDict
    from tensorbox.errors import BatchDimError

    with pytest.raises(BatchDimError, match=r"batch_size \[\] by 0: it has no batch dims") as err:
        TensorDict(a=torch.zeros(2))[0]
    assert isinstance(err.value, IndexError) and isinstance(err.value, ValueError)


def test_kept_numel_of_an_empty_batch(lib: ModuleType) -> None:
    """tensordict: at least 1 (``numel()`` of ``[0]`` is 1); tensorbox: the product, 0,
    as torch's. The line that works in both: ``td.batch_size.numel()``."""
    empty = lib.TensorDict(a=torch.zeros(0, 2), batch_size=[0])
    assert empty.batch_size.numel() == 0 and lib.TensorDict(batch_size=[]).numel() == 1
    assert empty.numel() == (1 if lib.__name__ == "tensordict" else 0)


def test_kept_keys_set_on_a_loaded_tree(lib: ModuleType, tmp_path: Path) -> None:
    """tensordict keeps them in memory; tensorbox saves them to the tree (see
    test_keys_set_on_a_loaded_tree_are_saved). In both, ``clone()`` keeps changes in memory."""
    _td(lib).memmap(tmp_path / "t")
    back = lib.TensorDict.load_memmap(tmp_path / "t")
    back["new"] = torch.zeros(3)
    saved = "new" in set(lib.TensorDict.load_memmap(tmp_path / "t").keys())
    assert saved is (lib.__name__ == "tensorbox")
    private = lib.TensorDict.load_memmap(tmp_path / "t").clone()
    private["other"] = torch.zeros(3)
    assert "other" not in set(lib.TensorDict.load_memmap(tmp_path / "t").keys())


def test_kept_a_row_write_into_stacked_text(lib: ModuleType) -> None:
    """tensordict's stack of one row object twice shares its text, so writing one row
    writes both; tensorbox writes that row only (as both do for distinct rows)."""
    row = _row(lib)
    rows = torch.stack([row, row])
    rows[0] = _row(lib, "dogs")
    expect = ["dogs", "dogs"] if lib.__name__ == "tensordict" else ["dogs", "cats"]
    assert rows["s"] == expect
    apart = torch.stack([_row(lib), _row(lib)])
    apart[0] = _row(lib, "dogs")
    assert apart["s"] == ["dogs", "cats"]


def test_kept_load_state_dict_of_a_container(lib: ModuleType) -> None:
    """tensordict's container is a MutableMapping, tensorbox's is not (a Mapping breaks
    ``DataLoader(ds, batch_size=None)``); the spellings in docs/migrating.md work in both."""
    from torch import nn

    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    weights = lib.TensorDict.from_module(model).apply(lambda t: t.detach() + 1)
    for state in (weights.state_dict(), weights.flatten_keys(".").to_dict()):
        fresh = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
        fresh.load_state_dict(state)
        assert torch.equal(fresh[0].weight, weights["0", "weight"])
    fresh = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    if lib.__name__ == "tensordict":
        fresh.load_state_dict(weights.flatten_keys("."))
        assert torch.equal(fresh[1].bias, weights["1", "bias"])
    else:
        with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
            fresh.load_state_dict(weights.flatten_keys("."))


def test_metadata_stays_one_value_through_stack_and_expand(lib: ModuleType) -> None:
    """A ``MetaData`` is metadata of the whole batch: stack (of equal values), expand,
    unsqueeze and indexing keep one value; text in a plain ``NonTensorData`` becomes a value
    per row there."""
    row = lib.TensorDict(m=lib.MetaData("x"), s=lib.NonTensorData("x"), batch_size=[])
    for wide in (torch.stack([row, row]), row.expand(2), row.unsqueeze(0).expand(2, 1)):
        assert wide["m"] == "x" and isinstance(wide.get("m"), lib.MetaData)
        assert wide.get("m").batch_size == wide.batch_size
        assert len(wide["s"]) == 2  # per row
    assert torch.stack([row, row])[1:]["m"] == "x"
    assert torch.cat([torch.stack([row, row])] * 2)["m"] == "x"
    other = lib.TensorDict(m=lib.MetaData("y"), s=lib.NonTensorData("x"), batch_size=[])
    mixed = torch.stack([row, other]).get("m")  # values that differ: one per row
    assert isinstance(mixed, lib.NonTensorStack) and not isinstance(mixed, lib.MetaData)
    assert mixed.tolist() == ["x", "y"]
    one = lib.MetaData(0, batch_size=(1,)).expand((2, 3))
    assert one.data == 0 and one.shape == (2, 3) and isinstance(one, lib.MetaData)
    assert one.tolist() == [[0] * 3] * 2
    assert isinstance(torch.stack([lib.MetaData(1), lib.MetaData(1)]), lib.MetaData)
    assert torch.stack([lib.MetaData(1), lib.MetaData(2)]).tolist() == [1, 2]
    assert not isinstance(lib.NonTensorData(1), lib.MetaData)
    assert isinstance(row.clone().get("m"), lib.MetaData)


def test_typed_metadata_checks_the_value(lib: ModuleType) -> None:
    typed = lib.MetaData[int]
    assert issubclass(typed, lib.MetaData) and lib.MetaData[int] is typed
    assert isinstance(typed(0, batch_size=(3,)), lib.MetaData[int])
    assert not isinstance(lib.MetaData("a"), lib.MetaData[int])
    with pytest.raises(TypeError, match="Expected data of type int, got str"):
        typed("a string")


# ------------------------------------------------- td[key] of a value per row: a LinkedList


def _names(lib: ModuleType) -> object:
    return lib.TensorDict(tags=lib.NonTensorStack("a", "b", "c"), x=torch.zeros(3), batch_size=[3])


def test_item_writes_into_per_row_text_reach_the_container(lib: ModuleType) -> None:
    td = _names(lib)
    names = td["tags"]
    assert isinstance(names, list) and names == ["a", "b", "c"]
    assert repr(names) == str(names) == "LinkedList(['a', 'b', 'c'])"
    names[0] = "z"
    names[1:] = ["y", "x"]
    assert td["tags"] == ["z", "y", "x"] and names == ["z", "y", "x"]
    assert td.get("tags").tolist() == ["z", "y", "x"]
    assert type(names.tolist()) is list
    names.append("w")  # a new length: the list only, no longer linked
    names[0] = "q"
    assert td["tags"] == ["z", "y", "x"] and names == ["q", "y", "x", "w"]


def test_item_writes_reach_nested_and_two_dim_entries(lib: ModuleType) -> None:
    grid = lib.NonTensorStack(lib.NonTensorStack("a", "b"), lib.NonTensorStack("c", "d"))
    td = lib.TensorDict(sub=lib.TensorDict(g=grid, batch_size=[2, 2]), batch_size=[2, 2])
    cells = td["sub", "g"]
    cells[0][1] = "z"
    cells[1] = ["x", "y"]
    assert td["sub", "g"] == [["a", "z"], ["x", "y"]]
    assert td["sub", "g"].tolist() == [["a", "z"], ["x", "y"]]
    assert type(td["sub", "g"].tolist()[0]) is list


def test_a_copied_linked_list_is_a_plain_copy(lib: ModuleType) -> None:
    import copy
    import pickle

    td = _names(lib)
    for other in (copy.copy(td["tags"]), pickle.loads(pickle.dumps(td["tags"]))):
        other[0] = "z"
        assert other == ["z", "b", "c"] and td["tags"] == ["a", "b", "c"]


def test_linked_list_writes_commit_to_a_loaded_tree(tmp_path: Path) -> None:
    from tensorbox import NonTensorStack, TensorDict

    TensorDict(tags=NonTensorStack("a", "b"), batch_size=[2]).memmap(tmp_path / "t")
    back = TensorDict.load_memmap(tmp_path / "t")
    names = back["tags"]
    names[1] = "z"
    assert TensorDict.load_memmap(tmp_path / "t")["tags"] == ["a", "z"]
    with pytest.raises(ValueError, match="changes the length"):
        names[:] = ["only one"]
    assert names == ["a", "z"] and back["tags"] == ["a", "z"]  # refused: both unchanged
    other = TensorDict(copied=names, batch_size=[2])  # set elsewhere: a plain list value
    assert type(other["copied"]) is list and other["copied"] == ["a", "z"]


def test_saved_metadata_loads_as_metadata(lib: ModuleType, tmp_path: Path) -> None:
    """A saved ``MetaData`` reloads as one in both (tensorbox's format marks it, version 4
    of a node holding one; it loaded as a ``NonTensorData`` before)."""
    lib.TensorDict(m=lib.MetaData("cfg"), batch_size=[]).memmap(tmp_path / "t")
    back = lib.TensorDict.load_memmap(tmp_path / "t")
    assert back["m"] == "cfg"
    assert isinstance(back.get("m"), lib.MetaData)
    back["m"] = lib.MetaData(back["m"])  # the line that works in both
    assert isinstance(back.get("m"), lib.MetaData) and back.expand(2)["m"] == "cfg"


# ---------------------------------------------------------------- to(dtype)


def test_to_dtype_casts_every_leaf(lib: ModuleType) -> None:
    td = lib.TensorDict(
        {"x": torch.zeros(3), "label": torch.arange(3), "n": {"mask": torch.ones(3, dtype=bool)}},
        batch_size=[3],
    )
    for out in (td.to(torch.float16), td.to("cpu", torch.float16), td.to(dtype=torch.float16)):
        assert {k: v.dtype for k, v in out.items(True, True)} == dict.fromkeys(
            ("x", "label", ("n", "mask")), torch.float16
        )
    assert td["label"].dtype == torch.int64  # the source is unchanged
    assert td.to(torch.float64, inplace=True) is td and td.dtype == torch.float64
    td.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        td.to(torch.float32, inplace=True)
    assert td.dtype == torch.float64  # refused: nothing changed


def test_to_dtype_floating_only_keeps_labels() -> None:
    """tensorbox's extra option: ``floating_only=True`` casts the floating-point leaves."""
    from tensorbox import TensorDict

    td = TensorDict(x=torch.zeros(2), label=torch.arange(2), batch_size=[2])
    half = td.to(torch.float16, floating_only=True)
    assert half["x"].dtype == torch.float16 and half["label"].dtype == torch.int64


# ---------------------------------------------------------------- update(keys_to_update=)


@pytest.mark.parametrize("inplace", [False, True])
def test_update_keys_copies_a_missing_level_whole(lib: ModuleType, inplace: bool) -> None:
    """tensordict's rule: at the first level of a named key the destination lacks, the
    source's whole sub-container is copied; below an existing level, only the key."""
    t = lambda: torch.zeros(2)  # noqa: E731
    src = lib.TensorDict({"My": {"father": {"was": t(), "a": t()}, "rel": t()}}, batch_size=[2])
    dest = lib.TensorDict(b=t(), batch_size=[2])
    dest.update(src, keys_to_update=[("My", "father", "was")], inplace=inplace)
    assert set(dest.keys(True, True)) == {"b", ("My", "father", "was"), ("My", "father", "a")} | {
        ("My", "rel")
    }
    dest = lib.TensorDict(b=t(), My={"q": t()}, batch_size=[2])
    dest.update(src, keys_to_update=[("My", "father", "was")], inplace=inplace)
    assert set(dest.keys(True, True)) == {"b", ("My", "q"), ("My", "father", "was")} | {
        ("My", "father", "a")
    }
    dest = lib.TensorDict(b=t(), My={"q": t(), "father": {}}, batch_size=[2])
    dest.update(src, keys_to_update=[("My", "father", "was")], inplace=inplace)
    assert set(dest.keys(True, True)) == {"b", ("My", "q"), ("My", "father", "was")}
