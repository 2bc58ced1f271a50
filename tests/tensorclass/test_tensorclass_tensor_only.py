"""tensor_only=True tensorclasses, and from_dataclass."""

from __future__ import annotations

import dataclasses
from collections import UserDict

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import TensorClass, TensorDict, from_dataclass, is_tensorclass, tensorclass


class Point(TensorClass["tensor_only"]):
    x: torch.Tensor
    y: torch.Tensor | None = None
    extra: TensorDict | None = None


@given(st.one_of(st.integers(-5, 5), st.floats(-1, 1), st.lists(st.integers(0, 9), max_size=3)))
def test_tensor_fields_convert_like_torch(value: object) -> None:
    p = Point(value, value)
    expected = torch.as_tensor(value)
    assert isinstance(p.x, torch.Tensor) and torch.equal(p.x, expected)
    p.y = value
    assert isinstance(p.y, torch.Tensor) and torch.equal(p.y, expected)


def test_mappings_become_tensordicts_and_containers_are_kept() -> None:
    p = Point(0, extra=UserDict({"n": UserDict({"t": torch.ones(())})}))
    assert isinstance(p.extra, TensorDict) and p.extra["n", "t"] == 1
    locked = TensorDict({"t": torch.ones(())}).lock_()
    p.extra = locked
    assert p.extra is locked and p.y is None


def test_spellings_of_the_option() -> None:
    @tensorclass(tensor_only=True)
    class A:
        a: torch.Tensor

    class B(TensorClass, tensor_only=True):
        b: torch.Tensor

    class C(B):  # inherited
        c: torch.Tensor

    assert isinstance(A(1).a, torch.Tensor) and isinstance(C(1, 2).c, torch.Tensor)
    assert C.__tc_tensor_only__ and not TensorClass.__tc_tensor_only__


def test_bad_annotations_and_flags_are_refused() -> None:
    with pytest.raises(TypeError, match=r"Bad\.name: a tensor_only tensorclass takes fields"):

        class Bad(TensorClass["tensor_only"]):
            name: torch.Tensor | str

    with pytest.raises(TypeError, match="tensor_only=True cannot be combined with nocast=True"):
        tensorclass(tensor_only=True, nocast=True)
    with pytest.raises(TypeError, match="cannot be combined with autocast=True"):

        class Mixed(TensorClass, tensor_only=True, autocast=True):
            a: torch.Tensor


@dataclasses.dataclass
class Sample:
    x: torch.Tensor
    tag: str = "t"
    ids: list[int] = dataclasses.field(default_factory=list)


def test_from_dataclass_type_and_instance() -> None:
    S = from_dataclass(Sample)
    assert is_tensorclass(S) and S.__name__ == "Sample_tc" and from_dataclass(S) is S
    s = S(torch.zeros(2), batch_size=[2])
    assert s.tag == "t" and s.ids == [] and S(torch.zeros(1)).ids is not s.ids
    inst = from_dataclass(Sample(torch.zeros(3, 2), "u"), batch_size=[3])
    assert inst.batch_size == (3,) and inst.tag == "u" and type(inst).__name__ == "Sample_tc"
    into = from_dataclass(Sample(torch.zeros(3)), dest_cls=S, auto_batch_size=True)
    assert type(into) is S and into.batch_size == (3,)
    frozen = from_dataclass(Sample, frozen=True)(torch.zeros(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.tag = "v"


def test_from_dataclass_refusals() -> None:
    with pytest.raises(TypeError, match="expects a dataclass or an instance of one, got a int"):
        from_dataclass(3)
    with pytest.raises(TypeError, match="never turns a class into a tensorclass in place"):
        from_dataclass(Sample, inplace=True)
    with pytest.raises(TypeError, match="pass batch_size or auto_batch_size=True, not both"):
        from_dataclass(Sample(torch.zeros(1)), batch_size=[1], auto_batch_size=True)
    with pytest.raises(TypeError, match="dest_cls must be a tensorclass"):
        from_dataclass(Sample(torch.zeros(1)), dest_cls=Sample)
