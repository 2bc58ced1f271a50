"""Schema growth: a tensorclass may gain fields with defaults, or lose fields, between a
save and a load. Each test saves with one version of a class and loads with the next,
re-defined under the same qualified name (what a program upgraded between runs sees)."""

from __future__ import annotations

import pytest
import torch

from tensorbox import TensorClass, TensorDict
from tensorbox.errors import FormatError


def _rec(version: str) -> type:
    """``Rec`` as each version of a program defines it (one qualified name for all)."""
    if version == "v1":

        class Rec(TensorClass):
            x: torch.Tensor
            old: torch.Tensor
            name: str = "a"

    elif version == "added":  # gained two fields with defaults

        class Rec(TensorClass):  # type: ignore[no-redef]
            x: torch.Tensor
            old: torch.Tensor
            name: str = "a"
            score: torch.Tensor | None = None
            tag: str = "new"

    elif version == "removed":  # lost ``old``

        class Rec(TensorClass):  # type: ignore[no-redef]
            x: torch.Tensor
            name: str = "a"

    else:  # gained a field without a default

        class Rec(TensorClass):  # type: ignore[no-redef]
            x: torch.Tensor
            old: torch.Tensor
            extra: torch.Tensor
            name: str = "a"

    return Rec


def _save(tmp_path, archive: bool = False) -> str:
    rec = _rec("v1")(x=torch.arange(6).reshape(3, 2), old=torch.ones(3), name="n", batch_size=[3])
    path = str(tmp_path / ("t.tbz" if archive else "t"))
    rec.memmap(path, archive=archive)
    return path


@pytest.mark.parametrize("archive", [False, True])
def test_added_field_takes_its_default(tmp_path, archive):
    path = _save(tmp_path, archive)
    new = _rec("added")
    got = new.load_memmap(path)
    assert type(got) is new
    assert got.x.tolist() == [[0, 1], [2, 3], [4, 5]] and got.name == "n"
    assert got.score is None and got.tag == "new"


@pytest.mark.parametrize("archive", [False, True])
def test_removed_field_raises_naming_it(tmp_path, archive):
    path = _save(tmp_path, archive)
    new = _rec("removed")
    with pytest.raises(
        FormatError,
        match=r"meta\.json: the saved .*Rec.* holds \['old'\], which "
        r"is not a field of .*Rec any more: pass strict=False",
    ):
        new.load_memmap(path)


@pytest.mark.parametrize("archive", [False, True])
def test_removed_field_left_out_with_strict_false(tmp_path, archive):
    path = _save(tmp_path, archive)
    new = _rec("removed")
    got = new.load_memmap(path, strict=False)
    assert type(got) is new and "old" not in list(got.keys())
    assert got.x.tolist() == [[0, 1], [2, 3], [4, 5]] and got.name == "n"
    assert new.load(path, strict=False).name == "n"


def test_removed_field_in_a_nested_class_raises(tmp_path):
    inner_v1 = _rec("v1")

    class Outer(TensorClass):
        rec: inner_v1  # type: ignore[valid-type]

    Outer(
        rec=inner_v1(x=torch.zeros(2, 1), old=torch.zeros(2), batch_size=[2]), batch_size=[2]
    ).memmap(tmp_path / "o")
    _rec("removed")  # the registry now resolves the nested node's type to the new class
    with pytest.raises(FormatError, match=r"rec.*meta\.json: .*holds \['old'\]"):
        Outer.load_memmap(tmp_path / "o")
    got = Outer.load_memmap(tmp_path / "o", strict=False)
    assert "old" not in list(got.rec.keys()) and got.rec.x.shape == (2, 1)


def test_a_tensordict_load_still_reads_everything(tmp_path):
    path = _save(tmp_path)
    _rec("removed")
    td = TensorDict.load_memmap(path)  # asked for plain data: nothing is dropped
    assert sorted(td.keys()) == ["name", "old", "x"]


def test_new_required_field_is_refused(tmp_path):
    path = _save(tmp_path)
    new = _rec("required")
    with pytest.raises(
        FormatError, match=r"does not fit .*Rec: .*required field 'extra' is missing"
    ):
        new.load_memmap(path)
    with pytest.raises(FormatError, match=r"required field 'extra' is missing"):
        new.load_memmap(path, strict=False)
