"""One-file trees (``archive=True``): layout, zero-copy loads, sub-trees, read-only,
atomic replacement, ZIP64, validation of hostile files, tensordict ``.tdz`` archives."""

from __future__ import annotations

import os
import pickle
import re
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorbox import FormatError, IncompleteTreeError, TensorDict, tensorclass
from tensorbox._storage.archive import crc32 as _crc32
from tensorbox._storage.archive import store as _archive
from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox.cli import main

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "tensordict_0_15_archive"


def sample() -> TensorDict:
    td = TensorDict(
        {
            "obs": torch.arange(12.0).reshape(3, 4),
            "half": torch.full((3, 2), 1.5, dtype=torch.bfloat16),
            "mask": torch.tensor([True, False, True]),
            "cplx": torch.ones(3, dtype=torch.complex64),
            "strided": torch.arange(18).reshape(3, 6)[:, ::2],
            "empty": torch.zeros(3, 0),
            "info": {"step": torch.arange(3), "deep": {"x": torch.ones(3, 1, 1)}},
            "name": "run-1",
            "Weird key/..": torch.zeros(3, dtype=torch.int8),
        },
        batch_size=[3],
    )
    td["tag"] = "shared"
    return td


def assert_same(a: TensorDict, b: TensorDict) -> None:
    assert list(a.keys(True, True)) == list(b.keys(True, True))
    for k in a.keys(True, True):
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), k
        else:
            assert x == y, k


# ---------------------------------------------------------------- layout


def test_round_trip_zip_layout_and_alignment(tmp_path: Path) -> None:
    td = sample()
    path = tmp_path / "m.tbx"
    saved = td.memmap(path, archive=True)
    assert path.is_file() and saved.is_locked and saved.is_memmap()
    assert_same(saved, td)
    assert_same(TensorDict.load_memmap(path), td)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        names = [i.filename for i in zf.infolist()]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
        zf.extractall(tmp_path / "unzipped")
    # The entries are the folder layout: every leaf, then every meta.json, the root's last
    # (beside the central directory, where a reader over a network starts).
    folder = tmp_path / "folder"
    td.memmap(folder)
    files = sorted(
        str(p.relative_to(folder)).replace(os.sep, "/") for p in folder.rglob("*") if p.is_file()
    )
    assert sorted(names) == files
    assert names[-1] == "meta.json" and names.index("info/meta.json") > names.index(
        "info/step.memmap"
    )
    metas = [i for i, n in enumerate(names) if n.endswith("meta.json")]
    assert metas == list(range(len(names) - len(metas), len(names)))
    # unzip gives a folder that loads
    assert_same(TensorDict.load_memmap(tmp_path / "unzipped"), td)
    ar = _archive.Archive(str(path))
    for name, e in ar.entries.items():
        if name.endswith(".memmap"):
            assert ar.index.data_offset(e) % 64 == 0, name


def test_every_leaf_is_a_view_of_one_private_mapping(tmp_path: Path) -> None:
    path = tmp_path / "m.tbx"
    sample().memmap(path, archive=True)
    back = TensorDict.load_memmap(path)
    storages = {
        back[k].untyped_storage().data_ptr()
        for k in back.keys(True, True)
        if isinstance(back[k], torch.Tensor)
    }
    assert len(storages) == 1
    obs = back["obs"]
    assert type(obs) is MemoryMappedTensor and obs.mode == "r" and obs.filename == str(path)
    obs[0, 0] = -1.0  # copy-on-write: this process only
    assert TensorDict.load_memmap(path)["obs"][0, 0].item() == 0.0
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None


def test_tensorclass_and_subtree(tmp_path: Path) -> None:
    @tensorclass
    class Pair:
        a: torch.Tensor
        b: TensorDict

    pair = Pair(a=torch.arange(4), b=TensorDict({"c": torch.ones(4, 2)}, [4]), batch_size=[4])
    path = tmp_path / "p.tbx"
    saved = pair.save(path, archive=True)
    assert type(saved) is Pair and torch.equal(saved.a, pair.a)
    back = Pair.load_memmap(path)
    assert type(back) is Pair and torch.equal(back.b["c"], torch.ones(4, 2))
    sub = TensorDict.load_memmap(f"{path}::b")
    assert sub.batch_size == torch.Size([4]) and torch.equal(sub["c"], torch.ones(4, 2))
    deep = TensorDict.load_memmap(f"{path}::b/")
    assert list(deep.keys()) == ["c"]


def test_subtree_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.tbx"
    sample().memmap(path, archive=True)
    assert TensorDict.load_memmap(f"{path}::info/deep")["x"].shape == (3, 1, 1)
    with pytest.raises(FileNotFoundError, match="no sub-directory 'nope' in the archive"):
        TensorDict.load_memmap(f"{path}::nope")
    with pytest.raises(FormatError, match=r"'\.\./x' is not a sub-directory path inside"):
        TensorDict.load_memmap(f"{path}::../x")


def test_load_options(tmp_path: Path) -> None:
    path = tmp_path / "m.tbx"
    td = sample()
    td.memmap(path, archive=True, checksum=True, fsync=True, num_threads=1)
    back = TensorDict.load_memmap(path, device="cpu", verify=True)
    assert_same(back, td)
    assert isinstance(back["obs"], MemoryMappedTensor)  # still mapped (copy-on-write)
    back["obs"].zero_()  # stays in this process, as in tensordict
    assert_same(TensorDict.load_memmap(path), td)
    assert_same(TensorDict.load_memmap(path, mode="r"), td)
    # a leaf pickles by reference to the archive and comes back the same
    again = pickle.loads(pickle.dumps(TensorDict.load_memmap(path)["info", "step"]))
    assert torch.equal(again, td["info", "step"])


# ---------------------------------------------------------------- read-only


def test_archives_are_read_only(tmp_path: Path) -> None:
    path = tmp_path / "m.tbx"
    td = sample()
    td.memmap(path, archive=True)
    with pytest.raises(ValueError, match=r"is an archive, which opens read-only: mode='r\+'"):
        TensorDict.load_memmap(path, mode="r+")
    with pytest.raises(ValueError, match="mode 'w' is not one of"):
        TensorDict.load_memmap(path, mode="w")
    with pytest.raises(FileExistsError, match=r"is a file \(an archive\?\): a folder cannot"):
        td.memmap_(path)
    with pytest.raises(FileExistsError, match="archives are read-only"):
        td.memmap(path)
    with pytest.raises(FileExistsError, match="unpack it"):
        td.memmap_like(path)
    with pytest.raises(FileExistsError, match="already holds a saved tree"):
        td.memmap(path, archive=True, existsok=False)
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError, match=r"cannot write an archive at .* it is a directory"):
        td.memmap(tmp_path / "dir", archive=True)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is a file that is not a zip archive"):
        td.memmap(tmp_path / "notes.txt", archive=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    with pytest.raises(ValueError, match="archive=True needs a file path"):
        td.memmap(None, archive=True)


def test_save_again_replaces_and_a_failed_save_keeps_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.tbx"
    old = sample().memmap(path, archive=True)
    new = TensorDict({"x": torch.ones(2)}, [2])

    def boom(fd: int, *args: object, **kwargs: object) -> int:
        os.write(fd, b"PK\x03\x04 half written")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_zip, "write_zip", boom)
    with pytest.raises(OSError, match="No space left"):
        new.memmap(path, archive=True)
    assert os.listdir(tmp_path) == ["m.tbx"]
    assert_same(TensorDict.load_memmap(path), sample())
    monkeypatch.undo()
    # what a killed save leaves (its temporary file) is removed by the next save
    (tmp_path / ".m.tbx.tbx-new-0123456789abcdef").write_bytes(b"PK partial")
    new.memmap(path, archive=True)
    assert os.listdir(tmp_path) == ["m.tbx"]
    assert list(TensorDict.load_memmap(path).keys()) == ["x"]
    assert torch.equal(old["obs"], sample()["obs"])  # the old mapping still reads the old file


# ---------------------------------------------------------------- ZIP64


def test_zip64_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The limits lowered: every size, offset and count takes the ZIP64 path.
    monkeypatch.setattr(_zip, "ZIP64_LIMIT", 40)
    monkeypatch.setattr(_zip, "ZIP64_COUNT", 3)
    td = sample()
    path = tmp_path / "m.tbx"
    td.memmap(path, archive=True)
    raw = path.read_bytes()
    assert b"PK\x06\x06" in raw and b"PK\x06\x07" in raw
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        assert zf.read("obs.memmap") == td["obs"].numpy().tobytes()
    monkeypatch.undo()
    assert_same(TensorDict.load_memmap(path, verify=True), td)


@pytest.mark.slow
def test_more_than_65535_entries(tmp_path: Path) -> None:
    td = TensorDict({f"k{i}": torch.tensor([i]) for i in range(66_000)}, [1])
    path = tmp_path / "many.tbx"
    td.memmap(path, archive=True)
    with zipfile.ZipFile(path) as zf:
        assert len(zf.infolist()) == 66_001
    back = TensorDict.load_memmap(path)
    assert back["k65999"].item() == 65999 and len(back.keys()) == 66_000


def test_crc32_combine_matches_zlib() -> None:
    @given(st.binary(max_size=300), st.binary(max_size=300))
    def check(a: bytes, b: bytes) -> None:
        assert _zip.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)

    check()


def test_large_leaves_are_cut_into_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_zip, "_UNIT", 1000)
    monkeypatch.setattr(_zip, "_SMALL", 100)
    td = TensorDict(
        {
            "big": torch.randn(10_000),
            "small": torch.arange(5),
            "strided": torch.arange(3000).reshape(100, 30)[:, ::3],
            "cut": torch.arange(30_000),
        },
        [],
    )
    path = tmp_path / "m.tbx"
    td.memmap(path, archive=True, num_threads=3)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
    assert_same(TensorDict.load_memmap(path, verify=True), td)


# ---------------------------------------------------------------- validation


def _saved(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "m.tbx"
    TensorDict({"a": torch.arange(4.0), "n": {"b": torch.ones(2, 2)}}, []).memmap(
        path, archive=True
    )
    return path, path.read_bytes()


def _entry(raw: bytes, name: bytes) -> tuple[int, int]:
    """(central record offset, local header offset) of ``name``."""
    at = 0
    while True:
        at = raw.index(b"PK\x01\x02", at)
        nlen = struct.unpack_from("<H", raw, at + 28)[0]
        if raw[at + 46 : at + 46 + nlen] == name:
            return at, struct.unpack_from("<I", raw, at + 42)[0]
        at += 4


def _zip_index(path: Path) -> _zip.ZipIndex:
    return _zip.read_index(path.read_bytes(), str(path))


def test_truncated_archive(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    for cut in (0, 10, len(raw) // 2, len(raw) - 1):
        path.write_bytes(raw[:cut])
        with pytest.raises(FormatError, match=r"m\.tbx.*(too short|no zip end record|truncated)"):
            TensorDict.load_memmap(path)


def test_offset_outside_the_file(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    cd, _ = _entry(raw, b"a.memmap")
    bad = bytearray(raw)
    struct.pack_into("<I", bad, cd + 42, len(raw) + 100)
    path.write_bytes(bad)
    with pytest.raises(FormatError, match=r"m\.tbx, entry 'a\.memmap': its offset \d+ points past"):
        TensorDict.load_memmap(path)


def test_overlapping_entries(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    cd_a, local_a = _entry(raw, b"a.memmap")
    cd_b, _ = _entry(raw, b"n/b.memmap")
    bad = bytearray(raw)
    struct.pack_into("<I", bad, cd_b + 42, local_a)  # b's header is a's
    path.write_bytes(bad)
    with pytest.raises(FormatError, match=r"entry '(n/b|a)\.memmap': overlaps entry"):
        TensorDict.load_memmap(path)
    bad = bytearray(raw)
    struct.pack_into("<I", bad, cd_a + 20, 10_000)  # a claims more bytes than it has
    struct.pack_into("<I", bad, cd_a + 24, 10_000)
    path.write_bytes(bad)
    with pytest.raises(FormatError, match=r"a\.memmap is 10000 bytes, but float32 of shape \[4\]"):
        TensorDict.load_memmap(path)
    with pytest.raises(
        FormatError, match=r"entry 'a\.memmap': its 10000 bytes at offset \d+ overlap"
    ):
        _zip_index(path).data_offset(_zip_index(path).entries["a.memmap"])


def test_bad_crc_on_meta_json(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    at = raw.rindex(b'"format"')  # the root's meta.json: the last entry
    path.write_bytes(raw[:at] + b'"formaT"' + raw[at + 8 :])
    with pytest.raises(
        FormatError, match=r"m\.tbx, entry 'meta\.json': CRC-32 [0-9a-f]{8} does not"
    ):
        TensorDict.load_memmap(path)


def test_bad_crc_on_data_found_by_verify(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    _, local = _entry(raw, b"a.memmap")
    bad = bytearray(raw)
    data = local + 30 + struct.unpack_from("<H", raw, local + 26)[0]
    data += struct.unpack_from("<H", raw, local + 28)[0]
    bad[data] ^= 0xFF
    path.write_bytes(bad)
    TensorDict.load_memmap(path)  # not read until used: loads
    with pytest.raises(FormatError, match=r"m\.tbx::a\.memmap: CRC-32 [0-9a-f]{8} does not match"):
        TensorDict.load_memmap(path, verify=True)


def test_unsupported_compression_and_encryption(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    cd, local = _entry(raw, b"a.memmap")
    bad = bytearray(raw)
    struct.pack_into("<H", bad, cd + 10, 93)  # zstandard, in both headers
    struct.pack_into("<H", bad, local + 8, 93)
    path.write_bytes(bad)
    with pytest.raises(FormatError, match=r"entry 'a\.memmap': compressed with zip method 93"):
        TensorDict.load_memmap(path)
    bad = bytearray(raw)
    struct.pack_into("<H", bad, cd + 8, 1)
    path.write_bytes(bad)
    with pytest.raises(FormatError, match=r"entry 'a\.memmap': encrypted"):
        TensorDict.load_memmap(path)


def test_hostile_names_and_missing_entries(tmp_path: Path) -> None:
    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("../meta.json", b"{}")
    with pytest.raises(FormatError, match=r"entry '\.\./meta\.json': not a plain relative path"):
        TensorDict.load_memmap(path)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("other.txt", b"hi")
    with pytest.raises(IncompleteTreeError, match=r"evil\.zip::meta\.json is missing"):
        TensorDict.load_memmap(path)
    tree = tmp_path / "tree"
    TensorDict({"a": torch.ones(2)}, []).memmap(tree)
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(tree / "meta.json", "meta.json")
    with pytest.raises(FormatError, match=r"evil\.zip::a\.memmap is missing"):
        TensorDict.load_memmap(path)
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(tree / "meta.json", "meta.json")
        zf.writestr("a.memmap", b"\0" * 4)
    with pytest.raises(
        FormatError, match=r"a\.memmap is 4 bytes, but float32 of shape \[2\] needs 8"
    ):
        TensorDict.load_memmap(path)
    path.write_bytes(b"not a zip at all, but long enough to look for an end record")
    with pytest.raises(FormatError, match=r"evil\.zip: no zip end record"):
        TensorDict.load_memmap(path)


def test_foreign_zip_tools_unaligned_and_deflated(tmp_path: Path) -> None:
    """``zip -r`` of a folder: unaligned or compressed entries load by copying."""
    tree = tmp_path / "tree"
    td = sample()
    td.memmap(tree)
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        path = tmp_path / f"t{method}.zip"
        with zipfile.ZipFile(path, "w", compression=method) as zf:
            for p in sorted(tree.rglob("*")):
                if p.is_file():
                    zf.write(p, str(p.relative_to(tree)))
        assert_same(TensorDict.load_memmap(path, verify=True), td)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_mutated_archives_load_the_same_or_raise(tmp_path: Path, data: st.DataObject) -> None:
    path = tmp_path / "m.tbx"
    td = TensorDict({"a": torch.arange(4.0), "n": {"b": torch.ones(2, 2)}, "s": "x"}, [])
    if not path.exists():
        td.memmap(path, archive=True)
    raw = bytearray(path.read_bytes())
    mutated = tmp_path / "mut.tbx"
    if data.draw(st.booleans()):
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(raw) - 1))
            raw[at] ^= data.draw(st.integers(1, 255))
    else:
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    mutated.write_bytes(raw)
    try:
        back = TensorDict.load_memmap(mutated, verify=True)
    except FormatError:
        return
    assert_same(back, td)


# ---------------------------------------------------------------- tensordict archives


@pytest.mark.parametrize("name", ["stored", "deflate", "bzip2", "lzma"])
def test_tensordict_archives(name: str) -> None:
    td = TensorDict.load_memmap(DATA / f"{name}.tdz", verify=True)
    assert list(td.keys()) == ["obs", "nested", "note", "Weird key/x", "tags"]
    assert torch.equal(td["obs"], torch.arange(12.0).reshape(3, 4))
    assert td["nested", "half"].dtype == torch.bfloat16
    assert td["nested", "mask"].tolist() == [True, False, True]
    assert td["note"] == "hello" and td["tags"] == ["a", "b", "c"]
    assert td["Weird key/x"].flatten().tolist() == [0, 1, 2]
    # stored entries are views of the mapping; compressed ones are copies
    assert isinstance(td["obs"], MemoryMappedTensor) == (name == "stored")
    sub = TensorDict.load_memmap(f"{DATA / f'{name}.tdz'}::nested")
    assert sub["mask"].tolist() == [True, False, True]


@pytest.mark.heavy
def test_written_by_tensordict_when_installed(tmp_path: Path) -> None:
    tensordict = pytest.importorskip("tensordict")
    td = tensordict.TensorDict({"a": torch.arange(3.0), "b": {"c": torch.ones(3)}}, [3])
    td.save(tmp_path / "t.tdz", archive=True)
    back = TensorDict.load_memmap(tmp_path / "t.tdz")
    assert back["a"].tolist() == [0.0, 1.0, 2.0] and back["b", "c"].tolist() == [1.0] * 3


# ---------------------------------------------------------------- command line


def test_cli_pack_unpack_show_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    td = sample()
    folder = tmp_path / "tree"
    td.memmap(folder)
    file = tmp_path / "tree.tbx"
    assert main(["pack", str(folder), str(file)]) == 0
    assert capsys.readouterr().out == f"packed 3 nodes, 9 tensors into {file}\n"
    with zipfile.ZipFile(file) as zf:  # byte for byte: every file of the folder, as is
        files = [p for p in folder.rglob("*") if p.is_file()]
        assert sorted(zf.namelist()) == sorted(
            str(p.relative_to(folder)).replace(os.sep, "/") for p in files
        )
        for p in files:
            assert zf.read(str(p.relative_to(folder)).replace(os.sep, "/")) == p.read_bytes()
    assert main(["verify", "--read", str(file)]) == 0
    assert capsys.readouterr().out == "ok: 3 nodes, 9 tensors, 198 B\n"
    assert main(["show", f"{file}::info"]) == 0
    out = capsys.readouterr().out
    assert "(format tensorbox v2, archive)" in out and "└── 'deep': TensorDict" in out
    assert "├── 'step': int64 [3] 24 B  [step.memmap]" in out
    again = tmp_path / "again"
    assert main(["unpack", str(file), str(again)]) == 0
    assert capsys.readouterr().out == f"unpacked 12 files (3 nodes) into {again}\n"
    for p in files:
        assert (again / p.relative_to(folder)).read_bytes() == p.read_bytes()
    assert_same(TensorDict.load_memmap(again), td)
    # unpacking over a tree replaces it whole; a sub-tree unpacks alone
    assert main(["unpack", f"{file}::info", str(again)]) == 1  # a tree is there
    assert "a folder is there and not empty" in capsys.readouterr().err
    assert main(["unpack", "--force", f"{file}::info", str(again)]) == 0
    capsys.readouterr()
    assert list(TensorDict.load_memmap(again).keys()) == ["step", "deep"]
    assert sorted(os.listdir(tmp_path)) == ["again", "tree", "tree.tbx"]


def test_cli_damaged_archives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, raw = _saved(tmp_path)
    _, local = _entry(raw, b"a.memmap")
    data = local + 30 + sum(struct.unpack_from("<HH", raw, local + 26))
    bad = bytearray(raw)
    bad[data] ^= 1
    path.write_bytes(bad)
    assert main(["verify", str(path)]) == 0  # the structure is sound
    capsys.readouterr()
    assert main(["verify", "--read", str(path)]) == 1
    assert re.search(
        r"^damaged: .*m\.tbx::a\.memmap: CRC-32 \w{8} does not match", capsys.readouterr().err
    )
    target = tmp_path / "out"
    assert main(["unpack", str(path), str(target)]) == 1
    assert "damaged: " in capsys.readouterr().err and not target.exists()
    assert sorted(os.listdir(tmp_path)) == ["m.tbx"]
    assert main(["unpack", str(tmp_path / "nope.tbx"), str(target)]) == 1
    assert "error: no archive at" in capsys.readouterr().err


def test_cli_tensordict_forms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    legacy = Path(__file__).resolve().parents[2] / "fixtures" / "tensordict_0_15_tree"
    file = tmp_path / "legacy.tbx"
    assert main(["pack", str(legacy), str(file)]) == 0  # converted to a tensorbox tree
    assert "(format tensorbox v2, archive)" in (
        main(["show", str(file)]) or capsys.readouterr().out
    )
    assert_same(TensorDict.load_memmap(file), TensorDict.load_memmap(legacy))
    assert main(["unpack", str(DATA / "deflate.tdz"), str(tmp_path / "td")]) == 0
    capsys.readouterr()
    assert_same(
        TensorDict.load_memmap(tmp_path / "td"), TensorDict.load_memmap(DATA / "stored.tdz")
    )
    assert main(["show", str(DATA / "bzip2.tdz")]) == 0
    assert "(format tensordict v1, archive)" in capsys.readouterr().out


def test_fast_crc32_matches_zlib(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _crc32._load_crc32()
    data = torch.randint(0, 256, (300_000,), dtype=torch.uint8).numpy()
    for view in (memoryview(data), memoryview(data)[5:], memoryview(bytes(data[:70_000]))):
        assert fast(view) == zlib.crc32(view)
        assert fast(view, 12345) == zlib.crc32(view, 12345)
    # without libdeflate: zlib's
    import ctypes

    def missing(name: str) -> None:
        raise OSError(name)

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert _crc32._load_crc32() is zlib.crc32


def test_concurrent_opens_share_one_parsed_index(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "m.tbx"
    td = sample()
    td.memmap(path, archive=True)
    _zip._INDEXES.clear()
    subs = ["", "::info", "::info/deep"] * 8
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(lambda s: TensorDict.load_memmap(f"{path}{s}"), subs))
    assert [list(x.keys()) for x in loaded[:3]] == [list(td.keys()), ["step", "deep"], ["x"]]
    assert len(_zip._INDEXES) == 1  # parsed once (or a few times at once), kept once
