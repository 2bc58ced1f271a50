"""Hostile or unlucky use of the local live paths (saves over trees, write-through,
``extend_``, archives): each test is an attack that once broke a promise of
docs/persistence.md, and checks the refusal or the state left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from tensorbox import FormatError, TensorDict, pack, unpack
from tests.checkout import checkout_env


def _grow(td: TensorDict, *values: float) -> TensorDict:
    return td.extend_(TensorDict({"a": torch.tensor(values)}, [len(values)]))


def test_extend_refuses_a_file_hard_linked_to_another_tree(tmp_path: Path) -> None:
    # A snapshot by hard links (cp -al, rsnapshot): both trees name the same inodes.
    # Appending to one writes after its committed rows, where the other committed its own.
    TensorDict({"a": torch.arange(2.0)}, [2]).memmap(tmp_path / "t")
    if shutil.which("cp") is None:  # pragma: no cover
        pytest.skip("no cp")
    subprocess.run(["cp", "-al", str(tmp_path / "t"), str(tmp_path / "snap")], check=True)
    t = TensorDict.load_memmap(tmp_path / "t")
    with pytest.raises(RuntimeError, match=r"key 'a', .*t/a\.memmap, has 2 names \(a hard link"):
        _grow(t, 10.0, 11.0)
    assert TensorDict.load_memmap(tmp_path / "t")["a"].tolist() == [0.0, 1.0]
    # What the message advises: a copy saved over the tree gives it files of its own.
    TensorDict.load_memmap(tmp_path / "t").clone().memmap(tmp_path / "t")
    _grow(TensorDict.load_memmap(tmp_path / "t"), 10.0, 11.0)
    snap = TensorDict.load_memmap(tmp_path / "snap")
    _grow(snap, -1.0, -1.0)  # the snapshot's files have one name again
    assert TensorDict.load_memmap(tmp_path / "t")["a"].tolist() == [0.0, 1.0, 10.0, 11.0]
    assert TensorDict.load_memmap(tmp_path / "snap")["a"].tolist() == [0.0, 1.0, -1.0, -1.0]


def test_a_full_disk_during_extend_gives_the_blocks_back(small_tmpfs: Path) -> None:
    td = TensorDict({"a": torch.arange(10.0)}, [10]).memmap(small_tmpfs / "t")
    free = os.statvfs(small_tmpfs).f_bavail
    with pytest.raises(OSError, match=r"extend_: cannot write the rows of key 'a' \(No space"):
        _grow(td, *([1.0] * (3 << 20)))  # 12 MiB on an 8 MiB file system
    assert os.statvfs(small_tmpfs).f_bavail == free  # not a full disk left behind
    assert os.path.getsize(small_tmpfs / "t" / "a.memmap") == 40
    assert td.batch_size == (10,)
    assert TensorDict.load_memmap(small_tmpfs / "t")["a"].tolist() == list(range(10))
    _grow(td, 10.0)  # the disk has room again
    assert TensorDict.load_memmap(small_tmpfs / "t")["a"].tolist() == list(range(11))


@pytest.mark.parametrize("index", [1, slice(0, 2), torch.tensor([2, 0])])
def test_a_row_write_whose_commit_fails_leaves_no_half_row(tmp_path: Path, index: object) -> None:
    # The row's tensors go through the mapping, then its text is committed; another
    # process saved the tree since (keeping the same leaf files), so the commit raises.
    path = tmp_path / "t"
    td = TensorDict({"x": torch.zeros(3), "name": "a", "n": {"z": torch.zeros(3, 2)}}, [3])
    mine = td.memmap(path)
    other = TensorDict.load_memmap(path)
    with other.unlock_():
        other["y"] = torch.ones(3)  # a new generation; x and n/z linked, the same files
    row = TensorDict({"x": torch.tensor(5.0), "name": "b", "n": {"z": torch.ones(2)}}, [])
    with pytest.raises(RuntimeError, match=r"tree at .*t' was saved again since this container"):
        mine[index] = row
    for back in (TensorDict.load_memmap(path), mine):  # neither half of the row: disk, memory
        assert back["x"].tolist() == [0.0, 0.0, 0.0]
        assert back["n", "z"].sum() == 0 and back["name"] == "a"
    again = TensorDict.load_memmap(path)
    again[index] = row  # what the message advises
    assert TensorDict.load_memmap(path)["x"].sum() > 0


def test_a_nul_in_a_key_is_named_as_such_in_tensordict_layout(tmp_path: Path) -> None:
    td = TensorDict({"x\0y": torch.ones(2)}, [2])
    with pytest.raises(ValueError, match=r"key 'x\\x00y' holds a NUL character; tensordict's"):
        td.memmap(tmp_path / "t", format="tensordict")
    assert not os.listdir(tmp_path)  # refused before anything is written
    td.memmap(tmp_path / "t")  # tensorbox's own format takes it
    assert TensorDict.load_memmap(tmp_path / "t")["x\0y"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    ("extra", "entry", "inner"),
    [
        ([("a.memmap/x", b"y")], "a.memmap", "a.memmap/x"),
        ([("q/w", b"1"), ("q/w/e", b"2")], "q/w", "q/w/e"),
    ],
)
def test_unpack_refuses_an_entry_that_is_a_file_and_a_folder(
    tmp_path: Path, extra: list[tuple[str, bytes]], entry: str, inner: str
) -> None:
    TensorDict({"a": torch.arange(3.0)}, [3]).memmap(tmp_path / "src")
    file = tmp_path / "odd.zip"  # written by another zip tool
    with zipfile.ZipFile(file, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in sorted(os.listdir(tmp_path / "src")):
            z.write(tmp_path / "src" / name, name)
        for name, data in extra:
            z.writestr(name, data)
    with pytest.raises(
        FormatError, match=rf"odd\.zip::{entry}: a file, but also a folder of the entry '{inner}'"
    ):
        unpack(str(file), str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["odd.zip", "src"]  # nothing written, nothing left


def test_pack_replaces_an_archive_at_once(tmp_path: Path) -> None:
    TensorDict({"a": torch.arange(3.0)}, [3]).memmap(tmp_path / "t.tbx", archive=True)
    old = TensorDict.load_memmap(tmp_path / "t.tbx")  # a reader of the old archive
    TensorDict({"a": torch.arange(5.0)}, [5]).memmap(tmp_path / "src")
    assert pack(str(tmp_path / "src"), str(tmp_path / "t.tbx")) == (1, 1)
    assert TensorDict.load_memmap(tmp_path / "t.tbx")["a"].tolist() == list(range(5))
    assert old["a"].tolist() == [0.0, 1.0, 2.0]  # renamed in: the old mapping keeps its bytes
    assert sorted(os.listdir(tmp_path)) == ["src", "t.tbx"]
    (tmp_path / "mine").write_bytes(b"not a zip")
    with pytest.raises(FileExistsError, match=r"mine' is a file that is not a zip archive"):
        pack(str(tmp_path / "src"), str(tmp_path / "mine"))
    assert (tmp_path / "mine").read_bytes() == b"not a zip"


_WRITE_ALL = """
import sys, torch
from tensorbox import TensorDict
td = TensorDict.load_memmap(sys.argv[1])
try:
    {op}
except OSError as err:
    print(err)
"""


@pytest.mark.parametrize(
    "op", ["td.zero_()", "td.apply_(lambda x: x.fill_(1))", "td.fill_(('n', 'a'), 1.0)"]
)
def test_in_place_container_writes_on_a_full_disk_raise_not_sigbus(
    small_tmpfs: Path, op: str
) -> None:
    # A sparse dataset (memmap_like) larger than the disk: writing every row through the
    # mappings would kill the process with SIGBUS when the disk fills.
    template = TensorDict({"n": {"a": torch.zeros(1)}}, [1]).expand(3 << 20)
    template.memmap_like(small_tmpfs / "t")  # 12 MiB, sparse, on 8 MiB
    proc = subprocess.run(
        [sys.executable, "-c", _WRITE_ALL.format(op=op), str(small_tmpfs / "t")],
        env=checkout_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # -7: SIGBUS
    assert "no space left on the device to write rows 0..3145727 of key ('n', 'a')" in proc.stdout
