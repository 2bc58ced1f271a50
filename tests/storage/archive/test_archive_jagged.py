"""Jagged leaves in one-file archives: saved, loaded, packed, unpacked, checked.

The oracles are the folder form of the same tree (loaded with the folder reader) and
a Python list of row tensors.
"""

from __future__ import annotations

import json
import pickle
import struct
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict
from tensorbox._storage.archive.convert import pack, unpack
from tensorbox._storage.memmap_tensor import MemoryMappedTensor
from tensorbox.cli import main
from tensorbox.errors import FormatError
from tests.core.test_jagged import make_rows, njt, same_rows


def _tree(rows: list[torch.Tensor], odt: torch.dtype = torch.int64) -> TensorDict:
    n = len(rows)
    return TensorDict(
        {"x": njt(rows, odt), "n": torch.arange(n), "sub": {"y": njt(rows, odt)}, "tag": "a"},
        batch_size=[n],
    )


def _ids_dropped(raw: bytes) -> Any:
    """``meta.json`` without the generation ids (drawn per save)."""
    doc = json.loads(raw)
    for e in doc["entries"].values():
        for f in (e, e.get("values"), e.get("offsets")):
            if isinstance(f, dict):
                f.pop("id", None)
    return doc


@settings(max_examples=20)
@given(
    lengths=st.lists(st.integers(0, 4), max_size=6),
    feature=st.sampled_from([(), (2,)]),
    odt=st.sampled_from([torch.int64, torch.int32]),
    seed=st.integers(0, 2**16),
)
def test_archive_round_trip_matches_folder_and_rows(
    lengths: list[int], feature: tuple[int, ...], odt: torch.dtype, seed: int
) -> None:
    rows = make_rows(lengths, feature, seed)
    td = _tree(rows, odt)
    with tempfile.TemporaryDirectory() as d:
        saved = td.memmap(f"{d}/a.tbx", archive=True)
        td.memmap(f"{d}/f")
        folder = TensorDict.load_memmap(f"{d}/f")
        for got in (saved, TensorDict.load_memmap(f"{d}/a.tbx")):
            for key in ("x", ("sub", "y")):
                same_rows(got[key], rows)
                same_rows(got[key], list(folder[key].unbind()))
                assert got[key].offsets().dtype == odt
            assert torch.equal(got["n"], folder["n"]) and got["tag"] == "a"
        with zipfile.ZipFile(f"{d}/a.tbx") as zf:
            assert zf.testzip() is None
            for name in ("meta.json", "sub/meta.json"):
                raw = zf.read(name)
                assert _ids_dropped(raw) == _ids_dropped(Path(d, "f", name).read_bytes())
            assert json.loads(zf.read("meta.json"))["version"] == 3
            # byte for byte: each entry is the folder's file
            for name in ("x.values.memmap", "x.offsets.memmap", "sub/y.offsets.memmap"):
                assert zf.read(name) == Path(d, "f", name).read_bytes()


def test_jagged_leaves_are_views_of_the_one_mapping(tmp_path: Path) -> None:
    td = _tree(make_rows([2, 0, 3], (2,), 0))
    saved = td.memmap(tmp_path / "a.tbx", archive=True)
    for t in (saved, TensorDict.load_memmap(tmp_path / "a.tbx")):
        storage = t["n"].untyped_storage()
        for part in (t["x"]._values, t["x"]._offsets, t["sub", "y"]._values):
            assert isinstance(part, MemoryMappedTensor)
            assert part.untyped_storage() is storage  # no copy: the archive's mapping


def test_sub_tree_and_pickle(tmp_path: Path) -> None:
    rows = make_rows([1, 0, 4], (), 1)
    _tree(rows).memmap(tmp_path / "a.tbx", archive=True)
    sub = TensorDict.load_memmap(f"{tmp_path / 'a.tbx'}::sub")
    same_rows(sub["y"], rows)
    same_rows(pickle.loads(pickle.dumps(sub))["y"], rows)


def test_compressed_jagged_entries_load_by_copying(tmp_path: Path) -> None:
    rows = make_rows([3, 0, 2, 5], (2,), 2)
    td = _tree(rows)
    saved = td.memmap(tmp_path / "c.tbx", archive=True, compression="deflate")
    with zipfile.ZipFile(tmp_path / "c.tbx") as zf:
        assert zf.getinfo("x.values.memmap").compress_type == zipfile.ZIP_DEFLATED
        assert zf.getinfo("x.offsets.memmap").compress_type == zipfile.ZIP_DEFLATED
    loaded = TensorDict.load_memmap(tmp_path / "c.tbx", verify=True)
    for t in (saved, loaded):
        same_rows(t["x"], rows)
        same_rows(t["sub", "y"], rows)
        assert not isinstance(t["x"]._values, MemoryMappedTensor)  # a copy


def test_pack_unpack_round_trip_a_jagged_tree(tmp_path: Path) -> None:
    rows = make_rows([2, 0, 0, 3], (), 3)
    _tree(rows).memmap(tmp_path / "f")
    assert pack(str(tmp_path / "f"), str(tmp_path / "p.tbx")) == (2, 3)
    same_rows(TensorDict.load_memmap(tmp_path / "p.tbx")["sub", "y"], rows)
    assert unpack(str(tmp_path / "p.tbx"), str(tmp_path / "u")) == (2, 7)
    for name in ("meta.json", "sub/meta.json", "x.values.memmap", "sub/y.offsets.memmap"):
        assert (tmp_path / "u" / name).read_bytes() == (tmp_path / "f" / name).read_bytes()
    back = TensorDict.load_memmap(tmp_path / "u")
    same_rows(back["x"], rows)
    same_rows(back["sub", "y"], rows)


def test_show_and_verify_an_archive_with_jagged_leaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree(make_rows([2, 0, 3], (), 0)).memmap(tmp_path / "a.tbx", archive=True)
    assert main(["show", str(tmp_path / "a.tbx")]) == 0
    out = capsys.readouterr().out
    assert "(format tensorbox v3, archive)" in out
    assert "├── 'x': jagged float32 [3, *] 52 B  [x.values.memmap, x.offsets.memmap]" in out
    assert main(["verify", "--read", str(tmp_path / "a.tbx")]) == 0
    assert capsys.readouterr().out == "ok: 2 nodes, 3 tensors, 128 B\n"


def test_selected_rows_save_as_their_own_leaf(tmp_path: Path) -> None:
    rows = make_rows([2, 0, 3, 1], (2,), 4)
    td = TensorDict(x=njt(rows), batch_size=[4])
    for i, idx in enumerate((slice(1, None), torch.tensor([3, 0]), slice(None, None, 2))):
        want = [rows[j] for j in range(4)[idx]] if isinstance(idx, slice) else [rows[3], rows[0]]
        saved = td[idx].memmap(tmp_path / f"{i}.tbx", archive=True)
        same_rows(saved["x"], want)
        same_rows(TensorDict.load_memmap(tmp_path / f"{i}.tbx")["x"], want)


def _data_start(raw: bytes, info: zipfile.ZipInfo) -> int:
    name_len, extra_len = struct.unpack(
        "<HH", raw[info.header_offset + 26 : info.header_offset + 30]
    )
    return info.header_offset + 30 + name_len + extra_len


def test_checksums_of_both_parts_are_recorded_and_checked(tmp_path: Path) -> None:
    td = TensorDict(x=njt(make_rows([2, 0, 3], (), 0)), batch_size=[3])
    td.memmap(tmp_path / "a.tbx", archive=True, checksum=True)
    with zipfile.ZipFile(tmp_path / "a.tbx") as zf:
        entry = json.loads(zf.read("meta.json"))["entries"]["x"]
        info = zf.getinfo("x.values.memmap")
    assert len(entry["values"]["sha256"]) == len(entry["offsets"]["sha256"]) == 64
    TensorDict.load_memmap(tmp_path / "a.tbx", verify=True)
    raw = bytearray((tmp_path / "a.tbx").read_bytes())
    raw[_data_start(bytes(raw), info)] ^= 1
    (tmp_path / "b.tbx").write_bytes(raw)
    with pytest.raises(
        FormatError, match=r"b\.tbx::x\.values\.memmap: CRC-32 [0-9a-f]{8} does not"
    ):
        TensorDict.load_memmap(tmp_path / "b.tbx", verify=True)


# ---------------------------------------------------------------- damaged archives


def _damaged(tmp_path: Path, offsets: list[int]) -> Path:
    """An archive (packed: entries aligned) whose ``x`` offsets are ``offsets``."""
    TensorDict(x=njt(make_rows([2, 0, 3], (), 0)), batch_size=[3]).memmap(tmp_path / "f")
    torch.tensor(offsets, dtype=torch.int64).numpy().tofile(tmp_path / "f" / "x.offsets.memmap")
    pack(str(tmp_path / "f"), str(tmp_path / "a.tbx"))
    return tmp_path / "a.tbx"


@pytest.mark.parametrize(
    ("offsets", "match"),
    [
        ([1, 2, 2, 5], r"a\.tbx::x\.offsets\.memmap: the offsets start at 1, expected 0"),
        ([0, 2, 2, 4], r"a\.tbx::x\.offsets\.memmap: the offsets end at 4, but the values hold 5"),
        ([0, 3, 2, 5], r"a\.tbx::x\.offsets\.memmap: the offsets decrease at row 1 \(3 then 2\)"),
    ],
)
def test_damaged_offsets_raise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], offsets: list[int], match: str
) -> None:
    path = _damaged(tmp_path, offsets)
    with pytest.raises(FormatError, match=match):
        TensorDict.load_memmap(path)
    assert main(["verify", str(path)]) == 0  # sizes only, as for folders
    capsys.readouterr()
    assert main(["verify", "--read", str(path)]) == 1
    assert "damaged: " in capsys.readouterr().err


def test_a_short_offsets_entry_raises(tmp_path: Path) -> None:
    TensorDict(x=njt(make_rows([2, 0, 3], (), 0)), batch_size=[3]).memmap(tmp_path / "f")
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        for name in ("meta.json", "x.values.memmap"):
            zf.writestr(name, (tmp_path / "f" / name).read_bytes())
        zf.writestr("x.offsets.memmap", (tmp_path / "f" / "x.offsets.memmap").read_bytes()[:24])
    with pytest.raises(
        FormatError,
        match=r"a\.zip::x\.offsets\.memmap is 24 bytes, but int64 of shape \[4\] needs 32: the "
        r"entry is truncated",
    ):
        TensorDict.load_memmap(tmp_path / "a.zip")


def test_a_jagged_entry_needs_version_3(tmp_path: Path) -> None:
    TensorDict(x=njt(make_rows([1], (), 0)), batch_size=[1]).memmap(tmp_path / "f")
    meta = json.loads((tmp_path / "f" / "meta.json").read_text())
    meta["version"] = 2
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        zf.writestr("meta.json", json.dumps(meta))
        for name in ("x.values.memmap", "x.offsets.memmap"):
            zf.writestr(name, (tmp_path / "f" / name).read_bytes())
    with pytest.raises(
        FormatError, match=r"a\.zip::meta\.json: entry 'x' is a 'jagged' entry, which format"
    ):
        TensorDict.load_memmap(tmp_path / "a.zip")
