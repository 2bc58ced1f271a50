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
from tensorbox.errors import LockedError


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


# ---------------------------------------------------------------- apply_


def _applied(path: Path) -> TensorDict:
    td = TensorDict({"n": {"z": torch.zeros(3)}, "x": torch.zeros(3), "w": torch.zeros(3)}, [3])
    return td.memmap(path)


def _untouched(td: TensorDict, path: Path) -> None:
    for back in (TensorDict.load_memmap(path), td):
        assert back["n", "z"].tolist() == back["x"].tolist() == [0.0] * 3
        assert back["w"].tolist() == [0.0] * 3 and back["w"].dtype == torch.float32


def test_an_apply_whose_commit_fails_writes_no_leaf(tmp_path: Path) -> None:
    # "w" gets another dtype: a new file, committed; the other leaves are written in
    # place only once that commit is made, so a stale tree leaves them as they were
    mine = _applied(tmp_path / "t")
    other = TensorDict.load_memmap(tmp_path / "t")
    with other.unlock_():
        other["y"] = torch.ones(3)
    fn = lambda t: t.double() if t.shape == (3,) and t is mine["w"] else t + 1  # noqa: E731
    with mine.unlock_(), pytest.raises(RuntimeError, match=r"was saved again since this"):
        mine.apply_(fn)
    _untouched(mine, tmp_path / "t")


def _fails_on_w(td: TensorDict, exc: BaseException) -> Callable[[Any], Any]:
    def fn(t: Any) -> Any:
        if t is td["w"]:
            raise exc
        return t + 1

    return fn


def test_an_apply_whose_fn_raises_midway_writes_no_leaf(tmp_path: Path) -> None:
    td = _applied(tmp_path / "t")  # "n" and "x" come before "w"
    with pytest.raises(ValueError, match="no value for w"):
        td.apply_(_fails_on_w(td, ValueError("no value for w")))
    _untouched(td, tmp_path / "t")


def test_an_apply_refused_by_the_lock_midway_writes_no_leaf(tmp_path: Path) -> None:
    td = _applied(tmp_path / "t")
    fn = lambda t: torch.zeros(3, 2) if t is td["w"] else t + 1  # noqa: E731
    with pytest.raises(LockedError, match=r"apply\(inplace=True\) would replace 'w' of a locked"):
        td.apply_(fn)
    _untouched(td, tmp_path / "t")
    td.apply_(lambda t: t + 1)  # then a plain apply_ goes through, into the files
    assert TensorDict.load_memmap(tmp_path / "t")["n", "z"].tolist() == [1.0] * 3
