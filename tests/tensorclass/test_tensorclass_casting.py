"""tensordict's casting switches (``autocast=True``, ``nocast=True``), the class flags,
frozen instances, a class's own ``__setattr__``, and the errors of fields and ``device``."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import TensorClass, TensorDict, from_dataclass, tensorclass
from tensorbox.errors import FieldNameError


class Inner(TensorClass, autocast=True):
    x: torch.Tensor
    note: str


class Cast(TensorClass, autocast=True):
    tensor: torch.Tensor
    integer: int
    string: str
    floating: float
    flag: bool
    array: np.ndarray
    anything: Any
    td: TensorDict
    inner: Inner
    maybe: Optional[Inner] = None  # noqa: UP045  (the spelling under test)
    again: Cast = None


def _cast(**changes: Any) -> Cast:
    values: dict[str, Any] = dict(
        tensor=1,
        integer=torch.tensor(3),
        string=7,
        floating=2,
        flag=1,
        array=[1, 2],
        anything=1.5,
        td={"a": torch.zeros(())},
        inner={"x": 1.0, "note": 5},
    )
    return Cast(**(values | changes))


def test_autocast_casts_to_each_annotation() -> None:
    c = _cast()
    assert isinstance(c.tensor, torch.Tensor) and c.tensor.item() == 1
    assert c.integer == 3 and type(c.integer) is int
    assert c.string == "7" and c.floating == 2.0 and type(c.floating) is float
    assert c.flag is True
    assert isinstance(c.array, np.ndarray) and c.array.tolist() == [1, 2]
    assert isinstance(c.anything, torch.Tensor)  # no single type: a number becomes a tensor
    assert type(c.td) is TensorDict and c.td["a"].shape == ()
    assert type(c.inner) is Inner and c.inner.note == "5" and isinstance(c.inner.x, torch.Tensor)
    assert Cast._autocast and not Cast._nocast and not TensorClass._autocast


def test_autocast_on_assignment_and_errors() -> None:
    c = _cast()
    c.integer = torch.tensor(9)
    assert c.integer == 9 and type(c.integer) is int
    c.tensor = 2.5
    assert c.tensor.dtype == torch.float32
    c.anything = "text"
    assert c.anything == "text"
    with pytest.raises(
        TypeError, match=r"Cast.tensor is annotated Tensor \(autocast=True\); 'str'"
    ):
        c.tensor = "str"
    with pytest.raises(TypeError, match=r"Cast.integer is annotated int .*'x' \(a str\)"):
        c.integer = "x"


def test_autocast_union_keeps_a_mapping_and_self_reference_casts() -> None:
    c = _cast(maybe={"x": torch.zeros(()), "note": "n"})
    assert isinstance(c.maybe, dict) and c.maybe["note"] == "n"  # a union casts nothing
    c.again = {"tensor": 0}  # a string annotation naming the class itself, fields left out
    assert type(c.again) is Cast and c.again.integer is None


def test_autocast_mapping_takes_the_batch_size() -> None:
    @tensorclass(autocast=True)
    class Node:
        x: torch.Tensor
        child: Node = None

    n = Node(x=torch.zeros(4), child={"x": torch.ones(4)}, batch_size=[4])
    assert type(n.child) is Node and n.child.batch_size == (4,)


@given(st.integers(-(2**31), 2**31), st.floats(allow_nan=False, allow_infinity=False))
def test_autocast_numbers_match_torch(i: int, f: float) -> None:
    class Nums(TensorClass, autocast=True):
        a: torch.Tensor
        b: torch.Tensor
        n: int
        g: float

    x = Nums(a=i, b=f, n=torch.tensor(i), g=torch.tensor(f, dtype=torch.float64))
    assert torch.equal(x.a, torch.as_tensor(i)) and torch.equal(x.b, torch.as_tensor(f))
    assert x.n == i and x.g == f


def test_nocast_stores_values_as_given() -> None:
    class Keep(TensorClass, nocast=True):
        a: int
        b: torch.Tensor

    k = Keep(True, np.ones(2))
    assert k.a is True and isinstance(k.b, np.ndarray)
    k.b = 3
    assert k.b == 3 and type(k.b) is int
    assert Keep._nocast and not Keep._autocast
    assert Keep(1, torch.zeros(2)).b.shape == (2,)  # tensors stay tensors


def test_option_bases_and_inheritance() -> None:
    class A(TensorClass["autocast"]):
        a: int

    class N(TensorClass["nocast", "frozen"]):
        a: int

    class Sub(A):
        b: str

    assert A._autocast and A(torch.ones(())).a == 1
    assert N._nocast and N._frozen and type(N(np.int64(1)).a) is np.int64
    assert Sub._autocast and Sub(a=torch.tensor(2), b=3).b == "3"
    assert not TensorClass._nocast and not TensorClass._frozen


def test_from_dataclass_passes_the_switches() -> None:
    @dataclasses.dataclass
    class D:
        a: int
        b: torch.Tensor
        c: str

    auto = from_dataclass(D, autocast=True)
    x = auto(a=torch.tensor(1), b=0, c=0)
    assert auto._autocast and x.a == 1 and isinstance(x.b, torch.Tensor) and x.c == "0"
    keep = from_dataclass(D, nocast=True)
    assert keep._nocast and keep(a=0, b=0, c=0).b == 0


def test_frozen_is_locked_and_hashable() -> None:
    @tensorclass(frozen=True)
    class F:
        y: torch.Tensor

    f = F(torch.zeros(2), batch_size=[2])
    assert f.is_locked and {f: 1}[f] == 1
    with pytest.raises(dataclasses.FrozenInstanceError, match="frozen F"):
        f.y = torch.ones(2)

    @tensorclass
    class G:
        y: torch.Tensor

    g = G(torch.zeros(2))
    assert not g.is_locked
    with pytest.raises(TypeError, match="unhashable"):
        hash(g)


def test_own_setattr_sees_init() -> None:
    seen: list[str] = []

    class S(TensorClass):
        a: torch.Tensor
        b: torch.Tensor

        def __setattr__(self, name: str, value: Any) -> None:
            seen.append(name)
            super().__setattr__(name, value + 1 if name == "b" else value)

    s = S(a=torch.zeros(3), b=torch.zeros(3))
    assert seen == ["a", "b"] and (s.b == 1).all()
    s.a = torch.ones(3)
    assert seen[-1] == "a"


def test_field_named_like_a_method_and_device_setter() -> None:
    with pytest.raises(AttributeError, match="field 'reshape' clashes with the method"):

        class Bad(TensorClass):
            reshape: torch.Tensor

    with pytest.raises(FieldNameError, match="clashes"):

        @tensorclass
        class Bad2:
            apply: torch.Tensor

    td = TensorDict(x=torch.zeros(2), batch_size=[2])
    with pytest.raises(RuntimeError, match=r"device cannot be set with TensorDict.device = "):
        td.device = torch.device("cpu")
    c = _cast()
    with pytest.raises(RuntimeError, match=r"use .to\(device\)"):
        c.device = "cpu"


def test_tensor_default_is_copied_per_instance() -> None:
    class D(TensorClass):
        x: torch.Tensor = None
        y: torch.Tensor = torch.ones(3, 4)

    a, b = D(batch_size=[3]), D(batch_size=[3])
    assert a.x is None and torch.equal(a.y, torch.ones(3, 4))
    a.y.add_(1)  # an in-place write to one instance's default
    assert torch.equal(b.y, torch.ones(3, 4)) and torch.equal(D().y, torch.ones(3, 4))
    with pytest.raises(RuntimeError, match=r"D\.y: shape \(3, 4\) does not start with"):
        D(batch_size=[4])


def test_mapping_value_is_kept_as_given() -> None:
    from collections import UserDict

    class M(TensorClass):
        meta: Any

    value = UserDict({"k": "v"})
    plain = {"k": "v"}
    assert M(meta=value).meta is value and M(meta=plain).meta is plain
