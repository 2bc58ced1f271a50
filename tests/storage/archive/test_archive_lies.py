"""Archives cannot lie: sizes that disagree or claim bytes an entry does not hold, and
compressed entries that claim more than the limits, are refused before anything is mapped,
allocated or written, by load, ``verify --read`` and ``unpack`` alike."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import pytest
import torch

from tensorbox import FormatError, TensorDict
from tensorbox._storage.archive import zip as _zip
from tensorbox._storage.archive.convert import unpack
from tensorbox.cli import main


def _saved(tmp_path: Path, compression: str | None = None) -> tuple[Path, bytes]:
    path = tmp_path / "m.tbx"
    td = TensorDict({"a": torch.arange(4.0), "n": {"b": torch.ones(2, 2)}}, [])
    td.memmap(path, archive=True, compression=compression)
    return path, path.read_bytes()


def _records(raw: bytes) -> dict[bytes, tuple[int, int]]:
    """name -> (central record offset, local header offset)."""
    out, at = {}, 0
    while (at := raw.find(b"PK\x01\x02", at)) >= 0:
        nlen = struct.unpack_from("<H", raw, at + 28)[0]
        out[raw[at + 46 : at + 46 + nlen]] = (at, struct.unpack_from("<I", raw, at + 42)[0])
        at += 4
    return out


def _set_meta_shape(raw: bytearray, shape: list[int]) -> None:
    """Rewrite the root meta.json's shape of 'a' (same length), with its CRC-32 in both
    headers: a consistent lie about the tensor, as an attacker would write it."""
    cd, local = _records(bytes(raw))[b"meta.json"]
    nlen, xlen = struct.unpack_from("<HH", raw, local + 26)
    data = local + 30 + nlen + xlen
    size = struct.unpack_from("<I", raw, cd + 20)[0]
    text = bytes(raw[data : data + size])
    old = b'"shape":[4]'
    new = json.dumps({"shape": shape}, separators=(",", ":"))[1:-1].encode()
    assert old in text and len(new) == len(old)
    text = text.replace(old, new)
    raw[data : data + size] = text
    crc = zlib.crc32(text)
    struct.pack_into("<I", raw, cd + 16, crc)
    struct.pack_into("<I", raw, local + 14, crc)


def _refused_everywhere(path: Path, tmp_path: Path, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        TensorDict.load_memmap(path)
    with pytest.raises(FormatError, match=match):
        TensorDict.load_memmap(path, verify=True)
    assert main(["verify", "--read", str(path)]) == 1
    out = tmp_path / "out"
    with pytest.raises(FormatError, match=match):
        unpack(str(path), str(out))
    assert main(["unpack", str(path), str(out)]) == 1
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_a_stored_entry_claiming_more_than_it_holds_is_refused(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    bad = bytearray(raw)
    cd, _ = _records(raw)[b"a.memmap"]
    _set_meta_shape(bad, [9])  # 36 bytes: the next entry's header would follow the 16
    struct.pack_into("<I", bad, cd + 24, 36)  # the central directory's uncompressed size
    path.write_bytes(bad)
    _refused_everywhere(path, tmp_path, r"entry 'a\.memmap': stored \(not compressed\), yet")


def test_a_claim_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    bad = bytearray(raw)
    cd, _ = _records(raw)[b"a.memmap"]
    _set_meta_shape(bad, [7])
    huge = len(raw) * 4
    struct.pack_into("<I", bad, cd + 20, huge)
    struct.pack_into("<I", bad, cd + 24, huge)
    path.write_bytes(bad)
    _refused_everywhere(path, tmp_path, r"a\.memmap is \d+ bytes, but float32 of shape \[7\]")


def test_local_and_central_sizes_must_agree(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    bad = bytearray(raw)
    _, local = _records(raw)[b"a.memmap"]
    struct.pack_into("<II", bad, local + 18, 8, 8)  # the local header says 8 bytes
    path.write_bytes(bad)
    _refused_everywhere(path, tmp_path, r"entry 'a\.memmap': its local header says 8 bytes")


def test_overlapping_entries_are_refused_by_every_reader(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path)
    bad = bytearray(raw)
    recs = _records(raw)
    struct.pack_into("<I", bad, recs[b"n/b.memmap"][0] + 42, recs[b"a.memmap"][1])
    path.write_bytes(bad)
    _refused_everywhere(path, tmp_path, r"entry '(n/b|a)\.memmap': overlaps entry")


def _bomb(tmp_path: Path, method: str, claim: int) -> Path:
    """An archive whose compressed 'a' claims ``claim`` bytes (its meta.json agrees)."""
    path, raw = _saved(tmp_path, method)
    n = claim // 4
    cdm, lm = _records(raw)[b"meta.json"]
    nlen, xlen = struct.unpack_from("<HH", raw, lm + 26)
    data = lm + 30 + nlen + xlen
    size = struct.unpack_from("<I", raw, cdm + 20)[0]
    text = bytes(raw[data : data + size]).replace(b'"shape":[4]', b'"shape":[%d]' % n)
    # The archive written again by hand, with the longer meta.json and the claim.
    entries = []
    for name, (c, lo) in sorted(_records(raw).items(), key=lambda kv: kv[1][1]):
        nl, xl = struct.unpack_from("<HH", raw, lo + 26)
        cs = struct.unpack_from("<I", raw, c + 20)[0]
        us = struct.unpack_from("<I", raw, c + 24)[0]
        meth = struct.unpack_from("<H", raw, c + 10)[0]
        body = raw[lo + 30 + nl + xl : lo + 30 + nl + xl + cs]
        crc = struct.unpack_from("<I", raw, c + 16)[0]
        if name == b"meta.json":
            body, us, crc = text, len(text), zlib.crc32(text)
            cs = us
        if name == b"a.memmap":
            us = claim
        entries.append((name, meth, body, cs, us, crc))
    out, central = bytearray(), bytearray()
    for name, meth, body, cs, us, crc in entries:
        off = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, meth, 0, 0, crc, cs, us, len(name), 0)
        out += name + body
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII",
            0x02014B50,
            20,
            20,
            0,
            meth,
            0,
            0,
            crc,
            cs,
            us,
            len(name),
            0,
            0,
            0,
            0,
            0,
            off,
        )
        central += name
    end = struct.pack(
        "<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), len(out), 0
    )
    path.write_bytes(bytes(out + central + end))
    return path


@pytest.mark.parametrize("method", ["bzip2", "deflate", "lzma"])
def test_a_decompression_bomb_is_refused_before_allocating(
    tmp_path: Path, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _bomb(tmp_path, method, 1 << 30)  # a few dozen bytes that claim 1 GiB
    with pytest.raises(FormatError, match=r"entry 'a\.memmap': declares 1073741824 bytes .*ratio"):
        TensorDict.load_memmap(path)
    assert main(["verify", "--read", str(path)]) == 1
    monkeypatch.setenv("TENSORBOX_ZIP_MAX_BYTES", str(1 << 20))
    with pytest.raises(FormatError, match=r"over the limit of 1048576; .* TENSORBOX_ZIP_MAX_BYTES"):
        TensorDict.load_memmap(path)
    monkeypatch.setenv("TENSORBOX_ZIP_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match=r"TENSORBOX_ZIP_MAX_BYTES='lots': expected a positive"):
        TensorDict.load_memmap(path)


def test_the_limits_can_be_raised_for_trusted_archives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zeros = TensorDict({"z": torch.zeros(1 << 19)}, [])  # 2 MiB of zeros: bzip2 beats 1100:1
    path = tmp_path / "z.tbx"
    zeros.memmap(path, archive=True, compression="bzip2")  # written as deflate: it loads
    assert TensorDict.load_memmap(path)["z"].abs().sum().item() == 0
    assert _zip.read_index(path.read_bytes(), str(path)).entries["z.memmap"].method == 8
    raw = bytearray(path.read_bytes())  # the same entry in bzip2, as another writer makes it
    packed = _zip.compress([bytes(1 << 21)], _zip.BZIP2)
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    _zip.write_zip(fd, [("meta.json", _meta_of(raw, path), False), ("z.memmap", packed, True)])
    os.close(fd)
    with pytest.raises(FormatError, match=r"a ratio over the limit of 1100:1"):
        TensorDict.load_memmap(path)
    monkeypatch.setenv("TENSORBOX_ZIP_MAX_RATIO", "1000000")
    assert TensorDict.load_memmap(path)["z"].abs().sum().item() == 0


def _meta_of(raw: bytearray, path: Path) -> bytes:
    index = _zip.read_index(bytes(raw), str(path))
    return index.read(index.entries["meta.json"])


def test_an_lzma_dictionary_larger_than_the_entry_is_not_allocated(tmp_path: Path) -> None:
    path, raw = _saved(tmp_path, "lzma")
    bad = bytearray(raw)
    _, local = _records(raw)[b"a.memmap"]
    nlen, xlen = struct.unpack_from("<HH", raw, local + 26)
    props = local + 30 + nlen + xlen + 4
    struct.pack_into("<I", bad, props + 1, 0xFFFFFFFF)  # a 4 GiB dictionary
    path.write_bytes(bad)
    assert TensorDict.load_memmap(path)["a"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_check_inflate_is_the_one_limit() -> None:
    e = _zip.ZipEntry("x", 0, 10, 1 << 21, _zip.BZIP2, 0, 0, b"x", 100)
    with pytest.raises(FormatError, match=r"f, entry 'x': declares 2097152 bytes uncompressed"):
        _zip.check_inflate(e, "f")


def test_an_empty_zip_is_no_tree_locally_or_at_a_url(tmp_path: Path) -> None:
    import uuid

    fsspec = pytest.importorskip("fsspec")
    empty = b"PK\x05\x06" + bytes(18)  # a valid zip of no entries: its end record alone
    (tmp_path / "e.tdz").write_bytes(empty)
    url = f"memory://tbx-empty/{uuid.uuid4().hex}.tdz"
    fsspec.filesystem("memory").pipe(url.removeprefix("memory:/"), empty)
    for where in (str(tmp_path / "e.tdz"), url):
        with pytest.raises(FormatError, match=r"e?\.tdz::meta\.json is missing: not a saved"):
            TensorDict.load_memmap(where)
