"""The one temp-then-rename rule (``tensorbox._storage.atomic.replacing``) and the writers
built on it: the new content whole or the old one, never a temporary left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict
from tensorbox._storage.atomic import replace_folder, replacing


def _listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@settings(max_examples=30, deadline=None)
@given(old=st.binary(max_size=64), new=st.binary(max_size=64), fail=st.booleans())
def test_a_file_is_the_old_or_the_new_and_no_temporary_stays(
    tmp_path_factory: pytest.TempPathFactory, old: bytes, new: bytes, fail: bool
) -> None:
    folder = tmp_path_factory.mktemp("f")
    path = folder / "x.bin"
    path.write_bytes(old)
    try:
        with replacing(str(path)) as tmp:
            Path(tmp).write_bytes(new)
            if fail:
                raise RuntimeError("the writer failed")
    except RuntimeError:
        assert fail
    assert path.read_bytes() == (old if fail else new)
    assert _listing(folder) == ["x.bin"]


def test_a_folder_in_the_way_is_refused_by_default(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "kept").write_text("old")
    with pytest.raises(IsADirectoryError), replacing(str(tmp_path / "x")) as tmp:
        Path(tmp).write_text("new")
    assert (tmp_path / "x" / "kept").read_text() == "old"
    assert _listing(tmp_path) == ["x"]


def test_replace_folder_replaces_a_folder_whole(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "old").write_text("old")
    with replacing(str(tmp_path / "x"), rename=replace_folder) as tmp:
        os.mkdir(tmp)
        Path(tmp, "new").write_text("new")
    assert _listing(tmp_path / "x") == ["new"]
    assert _listing(tmp_path) == ["x"]


def test_replace_folder_puts_the_old_folder_back_when_the_rename_fails(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "old").write_text("old")
    with pytest.raises(FileNotFoundError), replacing(str(tmp_path / "x"), rename=replace_folder):
        pass  # the block wrote nothing: there is nothing to rename in
    assert _listing(tmp_path / "x") == ["old"]
    assert _listing(tmp_path) == ["x"]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_tabular_files_get_the_usual_permissions(tmp_path: Path, fmt: str) -> None:
    """The temporary was made by ``mkstemp`` (mode 0600), and the written file kept it."""
    pytest.importorskip("pyarrow")
    data = TensorDict({"x": torch.arange(3)}, [3])
    path = tmp_path / f"t.{fmt}"
    getattr(data, f"to_{fmt}")(str(path))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert _listing(tmp_path) == [path.name]
