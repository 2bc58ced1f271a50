"""Every tree tensordict 0.14/0.15 writes loads: tensorclasses at any depth (as the class
registered here, else a TensorDict keeping the saved type name), recursive
tensorclasses, and lazy stacks (a dense stack, or an error saying what to do).

Trees come from the real tensordict when it is installed, and from the checked-in copy
``tests/fixtures/tensordict_nested_trees`` (written by ``tests/tensordict_trees.py``)
either way."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest
import torch

from tensorbox import FormatError, TensorDict, tensorclass
from tensorbox._storage.persist import saved_type
from tests.tensordict_trees import write_trees

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "tensordict_nested_trees"


@tensorclass
class LegacyLeafTC:
    y: torch.Tensor


@tensorclass
class LegacyNodeTC:
    x: torch.Tensor
    name: str = "n"
    child: Optional[LegacyNodeTC] = None  # noqa: UP045 - the form users write


@pytest.fixture(params=["checked_in", "tensordict"])
def trees(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    if request.param == "checked_in":
        return DATA
    pytest.importorskip("tensordict")
    write_trees(tmp_path / "trees")
    return tmp_path / "trees"


def test_a_tensorclass_inside_a_tensordict(trees: Path) -> None:
    td = TensorDict.load_memmap(trees / "tc_in_td")
    assert type(td) is TensorDict and td["a"].tolist() == [0, 1, 2]
    assert isinstance(td["n"], LegacyLeafTC) and td["n"].batch_size == (3,)
    assert td["n"].y.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


def test_a_recursive_tensorclass_loads_as_the_registered_class(trees: Path) -> None:
    for back in (
        LegacyNodeTC.load_memmap(trees / "recursive"),
        TensorDict.load_memmap(trees / "recursive"),
    ):
        assert isinstance(back, LegacyNodeTC) and isinstance(back.child, LegacyNodeTC)
        assert back.name == "root" and back.child.name == "kid"
        assert back.x.tolist() == [0.0, 0.0] and back.child.x.tolist() == [1.0, 1.0]
        assert back.child.child is None


def test_an_unregistered_tensorclass_keeps_its_saved_name(trees: Path) -> None:
    back = TensorDict.load_memmap(trees / "unknown_tc")
    assert type(back) is TensorDict and back["z"].tolist() == [0, 1, 2, 3]
    assert (saved_type(back) or "").endswith(":LegacyNobodyTC")


def test_lazy_stacks_load_as_dense_stacks(trees: Path) -> None:
    same = TensorDict.load_memmap(trees / "lazy_same")
    assert same.batch_size == (2,) and same["a"].tolist() == [[0.0] * 3, [1.0] * 3]
    assert same["b", "c"].tolist() == [[0.0] * 2, [1.0] * 2]
    nested = TensorDict.load_memmap(trees / "lazy_in_td")
    assert nested["s"].batch_size == (2,)
    assert nested["s", "a"].tolist() == [[2.0] * 3, [3.0] * 3]


def test_a_lazy_stack_is_a_copy_so_r_plus_is_refused(trees: Path) -> None:
    with pytest.raises(FormatError, match=r"lazy stack loads as a dense copy.*mode='r'"):
        TensorDict.load_memmap(trees / "lazy_same", mode="r+")
    copy = TensorDict.load_memmap(trees / "lazy_same", mode="r")
    assert copy["a"].sum() == 3.0


def test_a_ragged_lazy_stack_says_what_to_do(trees: Path) -> None:
    with pytest.raises(FormatError, match=r"do not stack densely.*load each element on its own"):
        TensorDict.load_memmap(trees / "lazy_ragged")
    one = TensorDict.load_memmap(trees / "lazy_ragged" / "1")
    assert one["a"].tolist() == [1.0] * 4
