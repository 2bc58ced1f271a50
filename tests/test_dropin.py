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
