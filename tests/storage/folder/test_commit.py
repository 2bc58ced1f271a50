"""Nothing lost: whole-tree commits, generation ids, values checked first, hostile files, disks."""

from __future__ import annotations

import errno
import json
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from tensorbox import NonTensorData, TensorDict
from tensorbox._storage import commit as _commit
from tensorbox._storage import folder, persist
from tensorbox._storage.fileref import FileRef, restore, shareable
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox.cli import main
from tensorbox.errors import FormatError, IncompleteTreeError


def _tree(v: float, n: int = 4) -> TensorDict:
    return TensorDict(
        {"a": torch.full((n,), v), "b": {"c": torch.full((n, 2), v)}, "v": NonTensorData(v)}, [n]
    )


def _check(td: TensorDict, v: float) -> None:
    assert td["a"].tolist() == [v] * td.batch_size[0]
    assert (td["b", "c"] == v).all() and td["v"] == v


def _hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# ---------------------------------------------------------------- commits


def test_overwrite_swaps_the_whole_tree_and_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    inode = os.stat(root).st_ino
    _tree(2.0).memmap(root)
    _check(TensorDict.load_memmap(root), 2.0)
    assert os.stat(root).st_ino != inode  # a new directory took the old one's place
    assert _hidden(tmp_path) == [] and sorted(os.listdir(tmp_path)) == ["t"]


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP])
def test_file_systems_without_exchange_commit_by_two_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    def refuse(a: str, b: str) -> None:
        raise OSError(code, os.strerror(code), a)

    monkeypatch.setattr(_commit, "exchange", refuse)
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    opened = TensorDict.load_memmap(root)
    _tree(2.0).memmap(root)
    _check(TensorDict.load_memmap(root), 2.0)
    _check(opened, 1.0)  # still maps the old files
    assert _hidden(tmp_path) == []


def test_other_exchange_errors_leave_the_old_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(a: str, b: str) -> None:
        raise OSError(errno.EACCES, "denied", a)

    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    monkeypatch.setattr(_commit, "exchange", refuse)
    with pytest.raises(PermissionError, match="denied"):
        _tree(2.0).memmap(root)
    _check(TensorDict.load_memmap(root), 1.0)
    assert _hidden(tmp_path) == []


def test_a_fallback_commit_killed_between_its_renames_is_put_back(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    # What a kill between the two renames leaves: the old tree aside, the lock file.
    os.rename(root, tmp_path / ".t.tbx-old-0123")
    (tmp_path / ".t.tbx-lock").touch()
    _check(TensorDict.load_memmap(root), 1.0)  # the reader puts it back
    assert _hidden(tmp_path) == [".t.tbx-lock"]
    os.rename(root, tmp_path / ".t.tbx-old-4567")
    _tree(2.0).memmap(root)  # so does the next save, before it saves
    _check(TensorDict.load_memmap(root), 2.0)
    assert _hidden(tmp_path) == []


def test_a_reader_waits_for_a_fallback_commit_in_progress(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    got: list[TensorDict] = []
    with _commit.writing(str(root)):
        os.rename(root, tmp_path / ".t.tbx-old-0123")
        reader = threading.Thread(target=lambda: got.append(TensorDict.load_memmap(root)))
        reader.start()
        time.sleep(0.2)
        assert not got  # waiting for the writer, not failing
        os.rename(tmp_path / ".t.tbx-old-0123", root)
    reader.join(5)
    _check(got[0], 1.0)


def test_a_save_that_fails_midway_leaves_the_old_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    real, calls = folder.write_file, [0]

    def fail_second(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(folder, "write_file", fail_second)
    with pytest.raises(OSError, match="No space left"):
        _tree(2.0).memmap(root)
    _check(TensorDict.load_memmap(root), 1.0)
    assert _hidden(tmp_path) == []


def test_readers_hold_back_only_the_swap(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    fd = _commit.read_lock(str(root))  # a reader in the middle of a load
    done = threading.Event()
    saver = threading.Thread(target=lambda: (_tree(2.0).memmap(root), done.set()))
    saver.start()
    time.sleep(0.3)
    assert not done.is_set()  # the new tree is built, the swap waits for the reader
    _check(TensorDict.load_memmap(tmp_path / ".." / tmp_path.name / "t"), 1.0)
    _commit.read_unlock(fd)
    saver.join(5)
    assert done.is_set()
    _check(TensorDict.load_memmap(root), 2.0)


def test_threads_saving_to_one_path_take_turns(tmp_path: Path) -> None:
    root = tmp_path / "t"
    errors: list[BaseException] = []

    def save(v: float) -> None:
        try:
            for _ in range(5):
                _tree(v, 64).memmap(root)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=save, args=(float(v),)) for v in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    td = TensorDict.load_memmap(root)
    _check(td, float(td["v"]))
    assert _hidden(tmp_path) == []


def test_user_files_in_the_tree_are_carried_over(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    (root / "README.txt").write_text("mine")
    (root / "b" / "notes").mkdir()
    (root / "b" / "notes" / "n.txt").write_text("mine too")
    (root / "stray.memmap").write_bytes(b"x")  # named like a leaf, but no meta.json lists it
    _tree(2.0).memmap(root)
    assert (root / "README.txt").read_text() == "mine"
    assert (root / "b" / "notes" / "n.txt").read_text() == "mine too"
    assert (root / "stray.memmap").read_bytes() == b"x"
    TensorDict({"x": torch.zeros(1)}, [1]).memmap(root)  # the node "b" is gone, not its notes
    assert (root / "b" / "notes" / "n.txt").read_text() == "mine too"
    assert not (root / "b" / "meta.json").exists() and not (root / "b" / "c.memmap").exists()


def test_a_symlink_in_the_old_tree_never_leads_the_save_outside(tmp_path: Path) -> None:
    other = tmp_path / "other"
    _tree(5.0).memmap(other)
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    for p in (root / "b").iterdir():
        p.unlink()
    (root / "b").rmdir()
    (root / "b").symlink_to("../other")
    (root / "x.memmap").symlink_to(other / "a.memmap")
    _tree(2.0).memmap(root)
    _check(TensorDict.load_memmap(other), 5.0)
    assert (other / "meta.json").exists() and (other / "b" / "meta.json").exists()
    _check(TensorDict.load_memmap(root), 2.0)


def test_a_file_at_the_path_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("mine")
    with pytest.raises(NotADirectoryError, match=r"cannot save a tree at '.*f': a file is there"):
        _tree(1.0).memmap(tmp_path / "f")
    with pytest.raises(NotADirectoryError, match=r"cannot save a tree at '.*f/sub': '.*f' is a"):
        _tree(1.0).memmap(tmp_path / "f" / "sub")
    assert sorted(os.listdir(tmp_path)) == ["f"] and (tmp_path / "f").read_text() == "mine"


def test_a_save_needs_its_parent_writable(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores permissions")
    parent = tmp_path / "ro"
    parent.mkdir()
    (parent / "t").mkdir()
    parent.chmod(0o555)
    try:
        with pytest.raises(PermissionError, match="needs write permission on"):
            _tree(1.0).memmap(parent / "t")
    finally:
        parent.chmod(0o755)


# ---------------------------------------------------------------- identity


def test_a_stale_in_place_save_writes_its_own_bytes(tmp_path: Path) -> None:
    root = tmp_path / "t"
    a = _tree(1.0).memmap(root)
    _tree(2.0).memmap(root)  # another save replaces the tree under `a`
    a.memmap_(root)  # must save a's data, not keep the other save's files
    _check(TensorDict.load_memmap(root), 1.0)
    _check(a, 1.0)


def test_an_in_place_save_keeps_files_and_their_ids(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    td = TensorDict.load_memmap(root)
    ids = json.loads((root / "meta.json").read_text())["entries"]["a"]["id"]
    leaf = td["a"]
    td.memmap_(root)
    assert td["a"] is leaf
    assert json.loads((root / "meta.json").read_text())["entries"]["a"]["id"] == ids
    td["a"][0] = 7.0  # still the tree's file
    assert TensorDict.load_memmap(root)["a"][0] == 7.0


def test_a_pickled_reference_is_refused_after_the_tree_is_saved_over(tmp_path: Path) -> None:
    root = tmp_path / "t"
    td = _tree(1.0).memmap(root)
    ref = pickle.dumps(td["a"])
    kept = pickle.dumps(td[1:])
    assert len(kept) < 2000  # references, not data
    assert pickle.loads(ref).tolist() == [1.0] * 4
    ident = shareable(td["a"]).ident  # type: ignore[union-attr]
    del td
    for v in (2.0, 3.0):  # twice: ext4 hands the freed inode to the next file
        _tree(v).memmap(root)
    with pytest.raises(FormatError, match=r"a.memmap was replaced after a tensor mapping it was"):
        pickle.loads(ref)
    with pytest.raises(FormatError, match="saved over"):
        pickle.loads(kept)
    # Even when the new file has the old inode number, the id tells them apart.
    forged = shareable(TensorDict.load_memmap(root)["a"])
    assert type(forged) is FileRef
    stale = forged._replace(ident=ident, gen="0" * 32)
    with pytest.raises(FormatError, match="the file's id is now"):
        restore(stale)


def test_a_reference_outside_a_tree_falls_back_to_the_inode(tmp_path: Path) -> None:
    m = MemoryMappedTensor.from_tensor(torch.arange(3), filename=tmp_path / "x.memmap")
    ref = shareable(m)
    assert type(ref) is FileRef and ref.gen is None
    assert restore(ref).tolist() == [0, 1, 2]
    with pytest.raises(FormatError, match="was replaced after a tensor mapping it was pickled"):
        restore(ref._replace(ident=(ref.ident[0], ref.ident[1] + 1)))  # type: ignore[index]


# ---------------------------------------------------------------- values first


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("huge", ValueError, r"key 'bad': an int of 16610 bits has more than \d+ digits"),
        ("deep", ValueError, "key 'bad': the value nests lists and dicts more than 200 deep"),
        ({1: 2}, TypeError, "key 'bad': dict key 1 of type int cannot be saved"),
    ],
)
def test_a_value_that_cannot_be_saved_leaves_the_old_tree(
    tmp_path: Path, value: object, error: type, match: str
) -> None:
    if value == "huge":
        value = 10**5000
    elif value == "deep":
        value = []
        for _ in range(1500):
            value = [value]
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    bad = _tree(2.0)
    bad["bad"] = NonTensorData(value)
    with pytest.raises(error, match=match):
        bad.memmap(root)
    _check(TensorDict.load_memmap(root), 1.0)
    assert _hidden(tmp_path) == []


def _chain(depth: int) -> TensorDict:
    td = TensorDict({"x": torch.zeros(1)}, [])
    for _ in range(depth):
        td = TensorDict({"n": td}, [])
    return td


def test_what_saves_loads_at_the_depth_limit(tmp_path: Path) -> None:
    _chain(200).memmap(tmp_path / "ok")
    back = TensorDict.load_memmap(tmp_path / "ok")
    assert back[("n",) * 200 + ("x",)].tolist() == [0.0]
    with pytest.raises(ValueError, match="is a node nested 201 deep; a saved tree nests at most"):
        _chain(201).memmap(tmp_path / "deep")
    assert not (tmp_path / "deep").exists() and _hidden(tmp_path) == []


def test_json_values_at_the_limits_round_trip(tmp_path: Path) -> None:
    deep: object = 1
    for _ in range(200):
        deep = [deep]
    td = TensorDict({"deep": NonTensorData(deep), "big": NonTensorData(10**4000)}, [])
    td.memmap(tmp_path)
    back = TensorDict.load_memmap(tmp_path)
    assert back["deep"] == deep and back["big"] == 10**4000


# ---------------------------------------------------------------- hostile files


def _hostile(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)
    return root


def test_a_fifo_instead_of_meta_json_is_refused_without_blocking(tmp_path: Path) -> None:
    root = _hostile(tmp_path)
    (root / "meta.json").unlink()
    os.mkfifo(root / "meta.json")
    start = time.monotonic()
    with pytest.raises(FormatError, match=r"meta.json is not a regular file"):
        TensorDict.load_memmap(root)
    with pytest.raises(FormatError, match=r"meta.json is not a regular file"):
        persist.load_memmap(TensorDict, root, verify=True)
    assert main(["show", str(root)]) == 1 and main(["verify", str(root)]) == 1
    assert time.monotonic() - start < 5
    # Not a tree any more (its meta.json is not one): a save refuses it, and never
    # opens the FIFO.
    with pytest.raises(
        FileExistsError, match=r".(json|memmap)' is not a file of the saved tree there"
    ):
        _tree(2.0).memmap(root)
    assert (root / "meta.json").is_fifo() and (root / "a.memmap").exists()


def test_a_fifo_or_device_instead_of_a_leaf_is_refused(tmp_path: Path) -> None:
    root = _hostile(tmp_path)
    (root / "a.memmap").unlink()
    os.mkfifo(root / "a.memmap")
    with pytest.raises(FormatError, match=r"a.memmap is not a regular file"):
        TensorDict.load_memmap(root)
    (root / "a.memmap").unlink()
    (root / "a.memmap").symlink_to("/dev/zero")
    with pytest.raises(FormatError, match=r"a.memmap is a symlink to '/dev/zero', outside"):
        TensorDict.load_memmap(root)
    (root / "meta.json").unlink()
    (root / "meta.json").symlink_to("/dev/zero")
    with pytest.raises(FormatError, match=r"meta.json cannot be read"):
        TensorDict.load_memmap(root)


def test_a_pickled_reference_to_a_fifo_is_refused(tmp_path: Path) -> None:
    m = MemoryMappedTensor.from_tensor(torch.arange(3), filename=tmp_path / "x.memmap")
    ref = shareable(m)
    os.unlink(tmp_path / "x.memmap")
    os.mkfifo(tmp_path / "x.memmap")
    with pytest.raises(FormatError, match=r"x.memmap is not a regular file"):
        restore(ref)


# ---------------------------------------------------------------- disks


def test_memmap_like_is_sparse_and_row_writes_reserve(tmp_path: Path) -> None:
    datum = TensorDict({"x": torch.zeros(1, 1024)}, [1])
    datum.expand(256).memmap_like(tmp_path / "full", sparse=False)
    assert os.stat(tmp_path / "full" / "x.memmap").st_blocks * 512 >= 256 * 4096
    like = datum.expand(256).memmap_like(tmp_path / "sparse")  # sparse, as tensordict
    assert os.stat(tmp_path / "sparse" / "x.memmap").st_blocks * 512 < 256 * 4096
    like[8:16] = TensorDict({"x": torch.ones(8, 1024)}, [8])
    blocks = os.stat(tmp_path / "sparse" / "x.memmap").st_blocks * 512
    assert 8 * 4096 <= blocks < 256 * 4096  # the rows written, not the whole file
    assert TensorDict.load_memmap(tmp_path / "sparse")["x"][8:16].eq(1).all()


def test_a_full_disk_during_a_row_write_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    like = TensorDict({"n": {"x": torch.zeros(1, 4)}}, [1]).expand(100).memmap_like(tmp_path / "t")

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(
        OSError, match=r"no space left on the device to write rows 3\.\.5 of key \('n', 'x'\)"
    ):
        like[3:6] = TensorDict({"n": {"x": torch.ones(3, 4)}}, [3])
    assert not like["n", "x"].any()  # nothing was written


def test_a_full_disk_is_an_error_at_creation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "t"
    _tree(1.0).memmap(root)

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(
        OSError, match=r"no space left to reserve 16 bytes for key 'a' at .*pass sparse=True"
    ):
        _tree(2.0).memmap_like(root, sparse=False)
    _check(TensorDict.load_memmap(root), 1.0)
    assert _hidden(tmp_path) == []
    like = persist.memmap_like(_tree(2.0), root)  # sparse (the default) reserves nothing now
    assert like["a"].tolist() == [0.0] * 4


def test_a_full_tmpfs_fails_at_creation_and_keeps_the_old_tree(small_tmpfs: Path) -> None:
    root = small_tmpfs / "t"
    _tree(1.0).memmap(root)
    datum = TensorDict({"x": torch.zeros(1, 1 << 20)}, [1])
    with pytest.raises(
        OSError, match=r"no space left to reserve 16777216 bytes for key 'x' at .*/t/x"
    ):
        datum.expand(4).memmap_like(root, sparse=False)
    with pytest.raises(OSError, match="No space left on device"):
        TensorDict({"x": torch.ones(4, 1 << 20)}, [4]).memmap(root)
    _check(TensorDict.load_memmap(root), 1.0)
    assert sorted(os.listdir(small_tmpfs)) == ["t"]


# ---------------------------------------------------------------- checksums


def test_checksums_find_flipped_bytes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "t"
    persist.memmap(_tree(1.0), root, checksum=True)
    entries = json.loads((root / "meta.json").read_text())["entries"]
    assert len(entries["a"]["sha256"]) == 64
    _check(persist.load_memmap(TensorDict, root, verify=True), 1.0)
    assert main(["verify", "--read", str(root)]) == 0
    with open(root / "b" / "c.memmap", "r+b") as f:
        f.seek(5)
        f.write(b"\xff")
    assert main(["verify", str(root)]) == 0  # without --read, only sizes are checked
    assert main(["verify", "--read", str(root)]) == 1
    assert "c.memmap: the bytes do not match the SHA-256" in capsys.readouterr().err
    with pytest.raises(FormatError, match=r"c.memmap: the bytes do not match the SHA-256"):
        persist.load_memmap(TensorDict, root, verify=True)
    # Off by default; an in-place save records them again when asked.
    _tree(1.0).memmap(tmp_path / "u")
    assert "sha256" not in json.loads((tmp_path / "u" / "meta.json").read_text())["entries"]["a"]
    td = TensorDict.load_memmap(root)
    persist.memmap_(td, root, checksum=True)
    assert persist.load_memmap(TensorDict, root, verify=True)["b", "c"].shape == (4, 2)


# ---------------------------------------------------------------- the fault test

_HAMMER = r"""
import sys, time, torch
from tensorbox import TensorDict, NonTensorData
role, path, seconds, ident = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
end = time.monotonic() + seconds
runs = torn = mixed = failed = 0
if role == "write":
    k = 0
    while time.monotonic() < end:
        v = float(ident * 1_000_000 + k)
        n = 64 + (k % 5) * 16  # shapes change too
        TensorDict({"a": torch.full((n,), v), "b": {"c": torch.full((n, 3), v)},
                    "v": NonTensorData(v)}, [n]).memmap(path)
        k += 1
        runs += 1
else:
    while time.monotonic() < end:
        runs += 1
        try:
            td = TensorDict.load_memmap(path)
            a, c, v = td["a"].unique(), td["b", "c"].unique(), td["v"]
        except Exception as err:
            failed += 1
            print("failed:", repr(err), file=sys.stderr)
            continue
        if len(a) != 1 or len(c) != 1:
            torn += 1
        elif not (a.item() == c.item() == v and len(td["a"]) == len(td["b", "c"])):
            mixed += 1
print(runs, torn, mixed, failed)
"""


@pytest.mark.heavy
def test_two_writers_and_a_reader_never_see_a_torn_or_mixed_tree(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(0.0, 64).memmap(root)
    seconds = "2.5"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _HAMMER, role, str(root), seconds, str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, role in enumerate(("write", "write", "read"))
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append([int(x) for x in out.split()])
    (w1, *_), (w2, *_), (reads, torn, mixed, failed) = results
    print(f"saves {w1}+{w2}, loads {reads}: torn {torn}, mixed {mixed}, failed {failed}")
    assert w1 > 0 and w2 > 0 and reads > 0
    assert (torn, mixed, failed) == (0, 0, 0)
    td = TensorDict.load_memmap(root)
    _check(td, float(td["v"]))
    assert _hidden(tmp_path) == []


def test_a_deep_copy_of_a_mapped_tree_is_a_copy(tmp_path: Path) -> None:
    import copy

    td = _tree(1.0).memmap(tmp_path / "t")
    twin = copy.deepcopy(td)
    twin["a"].add_(1)
    _check(TensorDict.load_memmap(tmp_path / "t"), 1.0)


def test_incomplete_trees_of_version_1_writers_are_still_refused(tmp_path: Path) -> None:
    _tree(1.0).memmap(tmp_path)
    (tmp_path / "meta.json").unlink()
    with pytest.raises(IncompleteTreeError, match="did not finish"):
        TensorDict.load_memmap(tmp_path)


@pytest.mark.parametrize("num_threads", [0, 4])
def test_the_root_meta_json_is_written_last(tmp_path, monkeypatch, num_threads) -> None:
    """A stage with a meta.json at its top is a finished tree: a save killed before its
    swap leaves one that recovery takes apart whole (not nodes whose meta.json is missing,
    whose files it would take for a user's)."""
    order: list[str] = []
    real = folder.write_new_meta

    def record(path, *args, **kw):
        order.append(os.path.basename(path))  # the node's directory in the stage
        return real(path, *args, **kw)

    monkeypatch.setattr(folder, "write_new_meta", record)
    nested = {f"n{i}": {"m": {"x": torch.zeros(2)}} for i in range(6)}
    TensorDict(nested, [2]).memmap(tmp_path / "t", num_threads=num_threads)
    assert len(order) == 13 and order[-1].startswith(".t.tbx-new-"), order  # the root
    assert not any(o.startswith(".t.tbx-new-") for o in order[:-1]), order


def test_a_save_killed_writing_its_top_meta_json_leaves_nothing(tmp_path) -> None:
    """Killed after creating the stage's top meta.json, before its last byte: the stage
    (still marked as being built) goes whole; none of its files reaches the live tree,
    even one the live tree does not have."""
    root = tmp_path / "t"
    TensorDict({"a": torch.ones(2), "n": {"x": torch.ones(2)}}, [2]).memmap(root)
    stage = Path(_commit.new_stage(str(root)))
    (stage / "n").mkdir()
    (stage / "a.memmap").write_bytes(b"\0" * 8)
    (stage / "new.memmap").write_bytes(b"\0" * 8)
    (stage / "n" / "x.memmap").write_bytes(b"\0" * 8)
    (stage / "meta.json").write_bytes(b'{"format": "tensorbox", "entr')  # cut short
    (tmp_path / ".t.tbx-lock").touch()  # what a killed writer leaves
    TensorDict.load_memmap(root).extend_(
        TensorDict({"a": torch.ones(1), "n": {"x": torch.ones(1)}}, [1])
    )
    assert _hidden(tmp_path) == []
    assert sorted(os.listdir(root)) == ["a.memmap", "meta.json", "n"]
    assert TensorDict.load_memmap(root)["n", "x"].tolist() == [1.0, 1.0, 1.0]


def test_a_folder_swapped_out_then_killed_keeps_every_file(tmp_path) -> None:
    """A save over a user's folder (no tree there) killed after the swap, before the
    folder's files were moved into the new tree: they sit under the staging name with
    no meta.json. The next writer moves them in; none is deleted."""
    root = tmp_path / "t"
    TensorDict({"a": torch.ones(2)}, [2]).memmap(root)  # the new tree, swapped in
    old = tmp_path / ".t.tbx-new-0123456789abcdef"  # the user's folder, swapped out
    (old / "notes").mkdir(parents=True)
    (old / "readme.txt").write_text("mine")
    (old / "notes" / "n.txt").write_text("also mine")
    (tmp_path / ".t.tbx-lock").touch()
    with _commit.writing(str(root)):
        pass
    assert _hidden(tmp_path) == []
    assert (root / "readme.txt").read_text() == "mine"
    assert (root / "notes" / "n.txt").read_text() == "also mine"
    assert TensorDict.load_memmap(root)["a"].tolist() == [1.0, 1.0]


def test_a_save_killed_with_its_stage_finished_leaves_nothing(tmp_path) -> None:
    """Recovery after a kill between the last meta.json and the swap: the finished stage
    goes, the live tree stays as it was, and no file of the stage reaches it."""
    root = tmp_path / "t"
    TensorDict({"n": {"x": torch.ones(2)}}, [2]).memmap(root)
    stage = Path(_commit.new_stage(str(root)))
    TensorDict({"n": {"x": torch.zeros(2), "y": torch.zeros(2)}}, [2]).memmap(tmp_path / "s")
    for p in (tmp_path / "s").rglob("*"):
        dest = stage / p.relative_to(tmp_path / "s")
        dest.mkdir() if p.is_dir() else dest.write_bytes(p.read_bytes())
    (tmp_path / ".t.tbx-lock").touch()  # what a killed writer leaves
    TensorDict({"z": torch.ones(2)}, [2]).memmap(tmp_path / "other")
    with _commit.writing(str(root)):
        pass
    assert _hidden(tmp_path) == []
    assert sorted(os.listdir(root / "n")) == ["meta.json", "x.memmap"]
    assert TensorDict.load_memmap(root)["n", "x"].tolist() == [1.0, 1.0]
