"""A write of several entries at once on a saved tree (``update_``, ``update_at_``,
``update(..., inplace=True)``, a row write with a sub-container) that carries text
writes its tensors through the mapping, then commits a new ``meta.json``: when that
commit fails, the write leaves the tree (disk and memory) as it was, all or nothing."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorbox import TensorDict


def _tree(path: Path) -> TensorDict:
    td = TensorDict({"x": torch.zeros(3), "name": "a", "n": {"z": torch.zeros(3), "s": "q"}}, [3])
    return td.memmap(path)


WRITES: dict[str, Callable[[Any], Any]] = {
    "update_": lambda td: td.update_({"x": torch.ones(3), "name": "b"}),
    "update_ nested": lambda td: td.update_({"n": {"z": torch.ones(3), "s": "r"}}),
    "update_ tuple key": lambda td: td.update_({("n", "z"): torch.ones(3), ("n", "s"): "r"}),
    "update_ keys_to_update": lambda td: td.update_(
        {"x": torch.ones(3), "name": "b", "n": {"z": torch.ones(3)}}, keys_to_update=["x", "name"]
    ),
    "update inplace": lambda td: td.update({"x": torch.ones(3), "name": "b"}, inplace=True),
    "update_at_ mapping": lambda td: td.update_at_({"x": torch.tensor(1.0), "name": "b"}, 1),
    "update_at_ container": lambda td: td.update_at_(
        TensorDict({"x": torch.tensor(1.0), "name": "b"}, []), 1
    ),
    "row with a sub-container": lambda td: td.__setitem__(
        slice(0, 2), {"x": torch.ones(2), "n": {"z": torch.ones(2), "s": "r"}}
    ),
}


def _unchanged(td: TensorDict, path: Path) -> None:
    for back in (TensorDict.load_memmap(path), td):  # disk and memory
        assert back["x"].tolist() == [0.0, 0.0, 0.0]
        assert back["n", "z"].tolist() == [0.0, 0.0, 0.0]
        assert back["name"] == "a" and back["n", "s"] == "q"


def _written(path: Path) -> None:
    back = TensorDict.load_memmap(path)
    assert back["x"].sum() + back["n", "z"].sum() > 0  # each write sets ones somewhere


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_stale_tree_refuses_the_write_before_any_tensor_byte(
    tmp_path: Path, write: Callable[[Any], Any]
) -> None:
    mine = _tree(tmp_path / "t")
    other = TensorDict.load_memmap(tmp_path / "t")
    with other.unlock_():
        other["y"] = torch.ones(3)  # a new generation; x and n/z linked: the same files
    with pytest.raises(RuntimeError, match=r"tree at .*t' was saved again since this container"):
        write(mine)
    _unchanged(mine, tmp_path / "t")
    write(TensorDict.load_memmap(tmp_path / "t"))  # what the message advises
    _written(tmp_path / "t")


def _fill(where: Path) -> None:
    """Take every free block of the file system holding ``where``."""
    with open(where / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\1" * (1 << 16))
                f.flush()
        except OSError as err:
            assert err.errno == errno.ENOSPC


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_write_whose_commit_finds_a_full_disk_puts_its_tensors_back(
    small_tmpfs: Path, write: Callable[[Any], Any]
) -> None:
    td = _tree(small_tmpfs / "t")
    _fill(small_tmpfs)  # the tensors' blocks are there already: only the commit needs more
    with pytest.raises(OSError, match="No space left on device"):
        write(td)
    _unchanged(td, small_tmpfs / "t")
    os.unlink(small_tmpfs / "filler")
    write(td)  # room again: the same write goes through
    _written(small_tmpfs / "t")
