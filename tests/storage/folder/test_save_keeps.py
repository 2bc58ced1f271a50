"""A save touches only what it wrote: the names its old tree's ``meta.json`` files list.

Every other file or folder in and around a saved tree (a user's file, a folder with its
own ``meta.json``, an independent tree saved inside, ``*.tmp``) survives every save, and
a save that could not keep one (its path taken by the new tree, a non-empty folder that is
not a tree) is refused before anything changes, naming the file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tensorbox import TensorDict


def _tree(v: float, keys: frozenset[str] = frozenset({"a", "n/c"})) -> TensorDict:
    td = TensorDict({}, [2])
    for k in sorted(keys):
        td[tuple(k.split("/"))] = torch.full((2,), v)
    return td


def test_foreign_files_in_a_tree_survive_a_save(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    (root / "configs").mkdir()
    (root / "configs" / "meta.json").write_text("{}")  # a user's meta.json, in no node
    _tree(9.0).memmap(root / "inner")  # an independent tree saved inside
    (root / "build.tmp").write_text("tmp")
    (root / "n" / "notes.tmp").write_text("tmp2")
    _tree(2.0, frozenset({"a"})).memmap(root)  # the node "n" goes, not what the user put there
    assert (root / "configs" / "meta.json").read_text() == "{}"
    assert TensorDict.load_memmap(root / "inner")["a"].tolist() == [9.0, 9.0]
    assert (root / "build.tmp").read_text() == "tmp"
    assert sorted(os.listdir(root / "n")) == ["notes.tmp"]
    assert TensorDict.load_memmap(root)["a"].tolist() == [2.0, 2.0]
    _tree(3.0).memmap(root)  # the node "n" again: the user's file stays in it
    assert (root / "n" / "notes.tmp").read_text() == "tmp2"
    assert TensorDict.load_memmap(root)["n", "c"].tolist() == [3.0, 3.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def test_a_folder_that_is_not_a_tree_keeps_everything(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "meta.json").write_text('{"name": "my project"}')
    (root / "model.memmap").write_bytes(b"weights")
    (root / "build.tmp").write_text("tmp")
    (root / "README").write_text("readme")
    (root / "src" / "meta.json").write_text("{}")
    with pytest.raises(FileExistsError, match=r"proj/meta.json' is not a file of the saved tree"):
        _tree(1.0).memmap(root)  # its meta.json is not a tree's, and the tree needs the name
    (root / "meta.json").rename(tmp_path / "project.json")
    with pytest.raises(FileExistsError, match=r"proj/model.memmap' is not a file of the saved"):
        _tree(1.0, frozenset({"model"})).memmap(root)
    _tree(1.0).memmap(root)  # no name in common: saved, and everything kept
    assert (root / "model.memmap").read_bytes() == b"weights"
    assert (root / "build.tmp").read_text() == "tmp" and (root / "README").exists()
    assert (root / "src" / "meta.json").read_text() == "{}"
    assert TensorDict.load_memmap(root)["a"].tolist() == [1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj", "project.json"]


def test_a_foreign_file_whose_name_the_new_tree_needs_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(1.0, frozenset({"a"})).memmap(root)
    (root / "b.memmap").write_bytes(b"mine")  # not listed by meta.json: the user's
    with pytest.raises(FileExistsError, match=r"t/b.memmap' is not a file of the saved tree"):
        _tree(2.0, frozenset({"a", "b"})).memmap(root)
    assert (root / "b.memmap").read_bytes() == b"mine"
    assert TensorDict.load_memmap(root)["a"].tolist() == [1.0, 1.0]  # unchanged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # no staging folder left


def test_names_a_meta_json_lists_are_the_trees_even_as_symlinks(tmp_path: Path) -> None:
    other = tmp_path / "other.bin"
    other.write_bytes(b"keep")
    root = tmp_path / "t"
    _tree(1.0, frozenset({"a"})).memmap(root)
    (root / "a.memmap").unlink()
    (root / "a.memmap").symlink_to(other)  # the tree's name: the link goes, never its target
    _tree(2.0, frozenset({"a"})).memmap(root)
    assert other.read_bytes() == b"keep"
    assert TensorDict.load_memmap(root)["a"].tolist() == [2.0, 2.0]


# ---------------------------------------------------------------- stateful

KEYS = ("a", "b", "n/c", "n/d")
PLACES = ("", "n", "n/deep", "other")
NAMES = ("README", "x.tmp", "meta.json", "a.memmap", "c.memmap", "tree")


class KeepsForeignFiles(RuleBasedStateMachine):
    """Saves at one path, with foreign files and trees dropped in and around it between
    saves; every foreign file must survive, every refusal must change nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.root = os.path.join(self.dir, "t")
        self.foreign: dict[str, bytes] = {}  # path below self.dir -> content
        self.value: float | None = None
        self.keys: frozenset[str] = frozenset()
        self.count = 0

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _nodes(self) -> set[str]:
        """Folders of the tree now at the path that a meta.json lists (its nodes)."""
        return {""} | {k.split("/")[0] for k in self.keys if "/" in k}

    @rule(keys=st.frozensets(st.sampled_from(KEYS), min_size=1), v=st.integers(0, 99))
    def save(self, keys: frozenset[str], v: int) -> None:
        clash = self._clash(keys)
        if clash is None:
            _tree(float(v), keys).memmap(self.root)
            self.value, self.keys = float(v), keys
            return
        with pytest.raises(FileExistsError, match=r"is not a file of the saved tree there"):
            _tree(float(v), keys).memmap(self.root)

    def _clash(self, keys: frozenset[str]) -> str | None:
        """A foreign path that the new tree would need (a file it writes)."""
        files = {"meta.json", "n/meta.json"} if any("/" in k for k in keys) else {"meta.json"}
        files |= {f"{k}.memmap" for k in keys}
        dirs = {"n"} if any("/" in k for k in keys) else set()
        for path in self.foreign:
            rel = os.path.relpath(path, "t")
            if rel.startswith(".."):
                continue
            parts = rel.split("/")
            for i in range(1, len(parts) + 1):
                head = "/".join(parts[:i])
                if head in files or (i == len(parts) and head in dirs):
                    return path
                if head not in dirs:
                    break
        return None

    @rule(place=st.sampled_from(PLACES), name=st.sampled_from(NAMES), inside=st.booleans())
    def drop(self, place: str, name: str, inside: bool) -> None:
        base = "t" if inside else "beside"
        folder = os.path.join(base, place) if place else base
        rel = os.path.join(folder, name)
        ours = name == "meta.json" or rel in self._tree_files()
        if inside and place in self._nodes() and self.value is not None and ours:
            return  # a user replacing the tree's own files: not what this test is about
        if any(
            p == rel or p.startswith(rel + "/") or rel.startswith(p + "/") for p in self.foreign
        ):
            return
        full = os.path.join(self.dir, rel)
        if os.path.lexists(full):
            return
        os.makedirs(os.path.dirname(full), exist_ok=True)
        self.count += 1
        if name == "tree":  # an independent tree saved inside (or beside)
            _tree(float(self.count), frozenset({"a"})).memmap(full)
            for f in ("meta.json", "a.memmap"):
                self.foreign[os.path.join(rel, f)] = Path(full, f).read_bytes()
            return
        data = f"user file {self.count}".encode()
        Path(full).write_bytes(data)
        self.foreign[rel] = data

    def _tree_files(self) -> set[str]:
        out = {os.path.join("t", f"{k}.memmap") for k in self.keys}
        return out | {os.path.join("t", n, "meta.json") for n in self._nodes() if n}

    @invariant()
    def foreign_files_survive(self) -> None:
        for rel, data in self.foreign.items():
            assert Path(self.dir, rel).read_bytes() == data, rel

    @invariant()
    def the_tree_is_the_last_save(self) -> None:
        if self.value is None:
            return
        td = TensorDict.load_memmap(self.root)
        for k in self.keys:
            assert td[tuple(k.split("/"))].tolist() == [self.value] * 2
        hidden = [n for n in os.listdir(self.dir) if n.startswith(".")]
        assert hidden == []


TestKeepsForeignFiles = KeepsForeignFiles.TestCase
TestKeepsForeignFiles.settings = settings(
    max_examples=25,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
