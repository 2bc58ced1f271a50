"""A folder save does what its floor needs and no more: one create per file of the tree
(a leaf's data, a node's meta.json), one mkdir per node, and the commit's one rename;
an archive save creates one file and renames it in."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorbox import TensorDict

# Heavy: counts system calls in processes of its own. The quick loop (`make check`) leaves the
# module out without importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy


def _count(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    calls: dict[str, list[str]] = {"create": [], "mkdir": [], "rename": []}
    real_open, real_mkdir = os.open, os.mkdir
    real_rename, real_replace = os.rename, os.replace

    def opened(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and flags & os.O_EXCL:
            calls["create"].append(os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        calls["mkdir"].append(os.fspath(path))
        real_mkdir(path, *args, **kwargs)

    def rename(a: Any, b: Any, *args: Any, **kwargs: Any) -> None:
        calls["rename"].append(os.fspath(b))
        real_rename(a, b, *args, **kwargs)

    def replace(a: Any, b: Any, *args: Any, **kwargs: Any) -> None:
        calls["rename"].append(os.fspath(b))
        real_replace(a, b, *args, **kwargs)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", replace)
    return calls


def _tree() -> TensorDict:
    return TensorDict(
        {"a": torch.ones(2), "n": {"b": torch.zeros(2), "m": {"c": torch.arange(2)}}}, [2]
    )


def test_folder_save_creates_the_tree_files_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count(monkeypatch)
    _tree().memmap(tmp_path / "t", num_threads=2)
    names = sorted(os.path.basename(p)[:14] for p in calls["create"])
    # 3 leaves, 3 meta.json, the writer lock, the stage's building mark (empty, unlinked
    # at the swap): no temporary copy of any file
    leaves = ["a.memmap", "b.memmap", "c.memmap"]
    assert names == [".t.tbx-lock", ".tbx-building-", *leaves] + ["meta.json"] * 3
    made = [p for p in calls["mkdir"] if p != str(tmp_path)]  # (the parent: exists already)
    assert len(made) == 3  # the staging directory and the two sub-nodes
    assert calls["rename"] == [str(tmp_path / "t")]  # the commit: a new tree appears at once
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["t"]
    assert TensorDict.load_memmap(tmp_path / "t")["n", "m", "c"].tolist() == [0, 1]


def test_archive_save_creates_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count(monkeypatch)
    _tree().memmap(tmp_path / "t.tbx", archive=True)
    names = [os.path.basename(p)[:15] for p in calls["create"]]
    assert names == [".t.tbx.tbx-lock", ".t.tbx.tbx-new-"]  # the writer lock, the new file
    assert calls["rename"] == [str(tmp_path / "t.tbx")]
    assert [p for p in calls["mkdir"] if p != str(tmp_path)] == []


def test_generation_ids_are_unique_and_not_shared_with_a_forked_child() -> None:
    import multiprocessing

    from tensorbox._storage import save as _save

    _save._IDS.clear()  # a pool left by earlier saves could run out at exactly 200
    ids = [_save.new_id() for _ in range(200)]
    assert len(set(ids)) == 200 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert _save._IDS  # some left in the pool
    if "fork" not in multiprocessing.get_all_start_methods():
        return
    left = set(_save._IDS)
    r, w = os.pipe()
    with warnings.catch_warnings():  # 3.12+: fork() of a process with threads warns
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: a fresh pool
        os.write(w, _save.new_id().encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.waitpid(pid, 0)
    os.close(r)
    assert len(child) == 32 and child not in left and child not in ids
