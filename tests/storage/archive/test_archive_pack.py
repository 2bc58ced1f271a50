"""``pack``: a grown tree's committed bytes only, and ``--compression``."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict
from tensorbox._storage.archive.convert import pack
from tensorbox.cli import main
from tests.core.test_jagged import make_rows, njt, same_rows


def _grown(tmp_path: Path) -> tuple[Path, list[torch.Tensor]]:
    """A folder tree grown by ``extend_``: its files are longer than its tensors."""
    rows = make_rows([2, 0, 3], (2,), 0)
    more = make_rows([1, 4], (2,), 1)
    TensorDict(
        {"x": njt(rows), "obs": torch.arange(6.0).reshape(3, 2), "sub": {"id": torch.arange(3)}},
        batch_size=[3],
    ).memmap(tmp_path / "f")
    tree = TensorDict.load_memmap(tmp_path / "f", mode="r+")
    tree.extend_(
        TensorDict(
            {"x": njt(more), "obs": torch.ones(2, 2), "sub": {"id": torch.tensor([3, 4])}},
            batch_size=[2],
        )
    )
    return tmp_path / "f", rows + more


# committed bytes of each leaf file of the grown tree: 10 rows of 2 float32 values,
# 6 int64 offsets, 5x2 float32, 5 int64
_COMMITTED = {
    "x.values.memmap": 10 * 2 * 4,
    "x.offsets.memmap": 6 * 8,
    "obs.memmap": 5 * 2 * 4,
    "sub/id.memmap": 5 * 8,
}


def _check_loads_equal(path: Path, folder: Path, rows: list[torch.Tensor]) -> None:
    got, want = TensorDict.load_memmap(path), TensorDict.load_memmap(folder)
    assert got.batch_size == want.batch_size == (5,)
    same_rows(got["x"], rows)
    assert torch.equal(got["obs"], want["obs"]) and torch.equal(got["sub", "id"], want["sub", "id"])


def test_pack_of_a_grown_tree_writes_committed_bytes_only(tmp_path: Path) -> None:
    folder, rows = _grown(tmp_path)
    for name, size in _COMMITTED.items():
        assert os.path.getsize(folder / name) > size  # the tails extend_ keeps for growth
    assert main(["pack", str(folder), str(tmp_path / "p.tbx")]) == 0
    with zipfile.ZipFile(tmp_path / "p.tbx") as zf:
        assert zf.testzip() is None
        for name, size in _COMMITTED.items():
            assert zf.getinfo(name).file_size == size
            assert zf.read(name) == (folder / name).read_bytes()[:size]
        assert zf.read("meta.json") == (folder / "meta.json").read_bytes()
    _check_loads_equal(tmp_path / "p.tbx", folder, rows)
    assert main(["unpack", str(tmp_path / "p.tbx"), str(tmp_path / "u")]) == 0
    for name, size in _COMMITTED.items():
        assert os.path.getsize(tmp_path / "u" / name) == size
    _check_loads_equal(tmp_path / "u", folder, rows)


def test_an_archive_save_of_a_grown_tree_writes_committed_bytes_only(tmp_path: Path) -> None:
    folder, rows = _grown(tmp_path)
    TensorDict.load_memmap(folder).memmap(tmp_path / "a.tbx", archive=True)
    with zipfile.ZipFile(tmp_path / "a.tbx") as zf:
        assert {n: zf.getinfo(n).file_size for n in _COMMITTED} == _COMMITTED
    _check_loads_equal(tmp_path / "a.tbx", folder, rows)


@pytest.mark.parametrize("name", ["deflate", "bzip2", "lzma", "stored"])
def test_pack_compression(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    folder, rows = _grown(tmp_path)
    file = tmp_path / "c.tbx"
    assert main(["pack", "--compression", name, str(folder), str(file)]) == 0
    assert capsys.readouterr().out == f"packed 2 nodes, 3 tensors into {file}\n"
    method = {"deflate": 8, "bzip2": 12, "lzma": 14, "stored": 0}[name]
    with zipfile.ZipFile(file) as zf:
        assert zf.getinfo("meta.json").compress_type == zipfile.ZIP_STORED
        for leaf, size in _COMMITTED.items():
            assert zf.getinfo(leaf).compress_type == method
            assert zf.getinfo(leaf).file_size == size
    _check_loads_equal(file, folder, rows)
    assert main(["verify", "--read", str(file)]) == 0


@pytest.mark.parametrize("tree", ["tensordict_0_15_tree", "tensorbox_v1_golden"])
def test_pack_compression_of_older_trees(tmp_path: Path, tree: str) -> None:
    src = (
        Path(__file__).resolve().parents[2] / "fixtures" / tree
    )  # the golden tree's meta.json holds a NaN
    nodes, _ = pack(str(src), str(tmp_path / "c.tbx"), compression="deflate")
    assert nodes >= 1
    with zipfile.ZipFile(tmp_path / "c.tbx") as zf:
        leaves = [i for i in zf.infolist() if i.filename.endswith(".memmap")]
        assert leaves and all(i.compress_type == zipfile.ZIP_DEFLATED for i in leaves)
    got, want = TensorDict.load_memmap(tmp_path / "c.tbx"), TensorDict.load_memmap(src)
    assert (got == want).all()


def test_pack_an_unknown_compression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = _grown(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["pack", "--compression", "zstd", str(folder), str(tmp_path / "c.tbx")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert re_search(
        r"argument --compression: 'zstd' is not a compression tensorbox writes; choose one "
        r"of bzip2, deflate, deflated, lzma, stored",
        err,
    )
    assert not (tmp_path / "c.tbx").exists()
    with pytest.raises(ValueError, match=r"compression='zstd' is not a compression tensorbox"):
        pack(str(folder), str(tmp_path / "c.tbx"), compression="zstd")


def re_search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


def test_pack_and_unpack_take_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    import tensorbox

    td = TensorDict({"a": torch.zeros(1 << 14), "n": {"b": torch.ones(1 << 14)}}, [1 << 14])
    td.memmap(tmp_path / "t")
    with caplog.at_level(logging.INFO, logger="tensorbox"):
        assert tensorbox.pack(str(tmp_path / "t"), str(tmp_path / "t.tdz"), progress=True) == (2, 2)
        assert tensorbox.unpack(str(tmp_path / "t.tdz"), str(tmp_path / "u"), progress=True) == (
            2,
            4,
        )
    err = capsys.readouterr().err.splitlines()
    # the bar (tqdm's or the plain line), then the summary line that stays
    assert any(line.startswith("pack: 128.0 KiB in 2 files, ") for line in err), err
    assert any(line.startswith("unpack: 128.5 KiB in 4 files, ") for line in err), (
        err
    )  # + meta.json
    logged = [r.getMessage() for r in caplog.records if r.name == "tensorbox"]
    assert any(m.startswith("pack: 128.0 KiB") for m in logged), logged
    # progress=False: no bar, no line on stderr (the summary still goes to the logger)
    tensorbox.pack(str(tmp_path / "t"), str(tmp_path / "q.tdz"), progress=False)
    tensorbox.unpack(str(tmp_path / "q.tdz"), str(tmp_path / "q"), progress=False)
    assert capsys.readouterr().err == ""
    assert torch.equal(TensorDict.load_memmap(tmp_path / "q")["n", "b"], td["n", "b"])


def test_pack_lays_the_meta_json_entries_out_last(tmp_path: Path) -> None:
    folder = tmp_path / "tree"
    nested = {"b": torch.zeros(3), "m": {"c": torch.arange(3)}}
    TensorDict({"a": torch.ones(3), "n": nested}, [3]).memmap(folder)
    pack(str(folder), str(tmp_path / "p.tdz"))
    with zipfile.ZipFile(tmp_path / "p.tdz") as zf:
        names = zf.namelist()
    # as a save lays them: the leaves, then each meta.json, children first, the root's last
    assert names[-3:] == ["n/m/meta.json", "n/meta.json", "meta.json"]
    assert not any(n.endswith("meta.json") for n in names[:-3])
