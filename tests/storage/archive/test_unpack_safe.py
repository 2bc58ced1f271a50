"""``unpack`` leaves nothing behind when it fails, refuses names deeper or longer than its
limits, and replaces an existing folder only when asked (``force=True``, ``--force``)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
import torch

from tensorbox import FormatError, TensorDict
from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.archive.convert import MAX_NAME_BYTES, MAX_NAME_PARTS, unpack
from tensorbox.cli import main


def _archive(tmp_path: Path, extra: list[tuple[str, bytes]]) -> Path:
    """A saved archive with ``extra`` entries added (names a tree does not use)."""
    src = tmp_path / "src.tbx"
    TensorDict({"a": torch.arange(4.0), "n": {"b": torch.ones(2)}}, []).memmap(src, archive=True)
    index = _zip.read_index(src.read_bytes(), str(src))
    items = [(name, index.read(e), name.endswith(".memmap")) for name, e in index.entries.items()]
    path = tmp_path / "x.tbx"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        _zip.write_zip(fd, items + [(n, d, False) for n, d in extra])
    finally:
        os.close(fd)
    return path


def _flip_last_data_byte(path: Path, name: bytes) -> None:
    raw = bytearray(path.read_bytes())
    at = 0
    while True:
        at = raw.index(b"PK\x01\x02", at)
        nlen = struct.unpack_from("<H", raw, at + 28)[0]
        if raw[at + 46 : at + 46 + nlen] == name:
            break
        at += 4
    local = struct.unpack_from("<I", raw, at + 42)[0]
    size = struct.unpack_from("<I", raw, at + 20)[0]
    nl, xl = struct.unpack_from("<HH", raw, local + 26)
    raw[local + 30 + nl + xl + size - 1] ^= 0xFF
    path.write_bytes(raw)


def test_a_failed_unpack_leaves_nothing_behind(tmp_path: Path) -> None:
    path = _archive(tmp_path, [("notes/README.txt", b"hello"), ("z.memmap", b"\x00" * 8)])
    _flip_last_data_byte(path, b"z.memmap")  # found while writing, after the others
    out = tmp_path / "out"
    with pytest.raises(FormatError, match=r"x\.tbx::z\.memmap: CRC-32 [0-9a-f]{8} does not"):
        unpack(str(path), str(out))
    assert main(["unpack", str(path), str(out)]) == 1
    assert sorted(os.listdir(tmp_path)) == ["src.tbx", "x.tbx"]  # no hidden staging folder


def test_an_entry_too_deep_or_too_long_is_a_format_error(tmp_path: Path) -> None:
    deep = "/".join(["d"] * 3000) + "/x"
    path = _archive(tmp_path, [(deep, b"x")])
    with pytest.raises(
        FormatError, match=rf"an entry name of 3001 parts .* {MAX_NAME_PARTS} parts"
    ):
        unpack(str(path), str(tmp_path / "out"))
    assert main(["unpack", str(path), str(tmp_path / "out")]) == 1
    long = "/".join(["n" * 200] * 25)
    path = _archive(tmp_path, [(long, b"x")])
    with pytest.raises(FormatError, match=rf"and {MAX_NAME_BYTES} bytes"):
        unpack(str(path), str(tmp_path / "out"))
    ok = "/".join(["d"] * (MAX_NAME_PARTS - 1)) + "/x"  # at the limit: written
    path = _archive(tmp_path, [(ok, b"x")])
    unpack(str(path), str(tmp_path / "out"))
    assert Path(tmp_path, "out", *ok.split("/")).read_bytes() == b"x"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_an_existing_folder_is_replaced_only_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _archive(tmp_path, [])
    out = tmp_path / "out"
    TensorDict({"old": torch.zeros(1)}, []).memmap(out)
    (out / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match=r"cannot unpack into '.*out': a folder is there"):
        unpack(str(path), str(out))
    assert main(["unpack", str(path), str(out)]) == 1
    assert "Pass force=True (--force)" in capsys.readouterr().err
    assert list(TensorDict.load_memmap(out).keys()) == ["old"]
    assert main(["unpack", "--force", str(path), str(out)]) == 0
    assert TensorDict.load_memmap(out)["a"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert (out / "mine.txt").read_text() == "keep"  # the save rule: only the tree's files go
    assert not (out / "old.memmap").exists()
    other = tmp_path / "proj"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    unpack(str(path), str(other), force=True)  # not a tree: all of it kept
    assert (other / "notes.txt").read_text() == "mine"
    assert TensorDict.load_memmap(other)["a"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_verify_read_says_what_it_did_not_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    td = TensorDict({"a": torch.zeros(2), "b": torch.ones(2)}, [2])
    td.memmap(tmp_path / "plain")
    td.memmap(tmp_path / "summed", checksum=True)
    assert main(["verify", "--read", str(tmp_path / "plain")]) == 0
    assert "note: 2 of 2 tensors have no checksums recorded: bytes not verified" in (
        capsys.readouterr().out
    )
    assert main(["verify", "--read", str(tmp_path / "summed")]) == 0
    assert "no checksums" not in capsys.readouterr().out
