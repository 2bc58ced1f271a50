"""``extend_`` checks everything before it writes: files shared between leaves, and a
jagged leaf's committed offsets. A refusal names the file and changes nothing on disk."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tensorbox import FormatError, TensorDict
from tensorbox._core.jagged import from_parts


def _pair(root: Path) -> TensorDict:
    return TensorDict({"a": torch.arange(4.0), "b": torch.arange(4.0) + 10}, [4]).memmap(root)


def _unchanged(root: Path, before: bytes) -> None:
    assert (root / "meta.json").read_bytes() == before
    assert TensorDict.load_memmap(root).batch_size == (4,)


def test_a_leaf_symlinked_to_another_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _pair(root)
    (root / "b.memmap").unlink()
    (root / "b.memmap").symlink_to("a.memmap")  # inside the tree: loads
    td = TensorDict.load_memmap(root)
    before = (root / "meta.json").read_bytes()
    rows = TensorDict({"a": torch.tensor([4.0]), "b": torch.tensor([14.0])}, [1])
    with pytest.raises(RuntimeError, match=r"key '(a|b)' and key '(a|b)' are one file \(.*memmap"):
        td.extend_(rows)
    _unchanged(root, before)
    assert TensorDict.load_memmap(root)["a"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_two_entries_naming_one_file_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _pair(root)
    meta = json.loads((root / "meta.json").read_text())
    meta["entries"]["b"]["file"] = "a.memmap"
    (root / "meta.json").write_text(json.dumps(meta))
    td = TensorDict.load_memmap(root)
    before = (root / "meta.json").read_bytes()
    rows = TensorDict({"a": torch.tensor([4.0]), "b": torch.tensor([14.0])}, [1])
    with pytest.raises(RuntimeError, match=r"are one file \(.*a\.memmap: a symlink, a hard link"):
        td.extend_(rows)
    _unchanged(root, before)


@pytest.mark.parametrize(("at", "value"), [(2, 50), (3, 9), (1, -1)])
def test_damaged_jagged_offsets_raise_before_anything_is_written(
    tmp_path: Path, at: int, value: int
) -> None:
    root = tmp_path / "t"
    j = from_parts(torch.arange(10.0), torch.tensor([0, 3, 5, 10]))
    TensorDict({"j": j, "x": torch.arange(3)}, [3]).memmap(root)
    td = TensorDict.load_memmap(root)
    offsets = np.memmap(root / "j.offsets.memmap", dtype=np.int64, mode="r+")
    offsets[at] = value  # damaged by another process after the load
    offsets.flush()
    del offsets
    before = (root / "meta.json").read_bytes()
    sizes = {p.name: p.stat().st_size for p in root.iterdir()}
    rows = TensorDict(
        {"j": from_parts(torch.ones(2), torch.tensor([0, 2])), "x": torch.tensor([7])}, [1]
    )
    with pytest.raises(
        FormatError, match=r"t/j\.offsets\.memmap: the offsets (start|end|decrease)"
    ):
        td.extend_(rows)
    assert (root / "meta.json").read_bytes() == before
    assert {p.name: p.stat().st_size for p in root.iterdir()} == sizes  # nothing grown
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
