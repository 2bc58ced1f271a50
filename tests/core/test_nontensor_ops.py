"""Non-tensor values under container operators, as tensordict treats them: ``|`` and ``^``
combine two values (one bool per batch element), and a function held as a value is called
by ``apply``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import NonTensorData, NonTensorStack, TensorDict

# ------------------------------------------------- | and ^ of non-tensor values


def _flags(a: object, b: object, mod: object = None) -> tuple[object, object]:
    lib = mod or __import__("tensorbox")
    x = lib.TensorDict(
        {"n": {"v": lib.NonTensorData(a)}, "t": torch.ones(2, dtype=torch.bool)}, batch_size=[2]
    )
    y = lib.TensorDict(
        {"n": {"v": lib.NonTensorData(b)}, "t": torch.ones(2, dtype=torch.bool)}, batch_size=[2]
    )
    return x, y


@given(st.booleans(), st.booleans())
@settings(max_examples=20, deadline=None)
def test_or_and_xor_combine_non_tensor_values(a: bool, b: bool) -> None:
    x, y = _flags(a, b)
    assert (x | y)["n", "v"].tolist() == [a | b] * 2
    assert (x ^ y)["n", "v"].tolist() == [a ^ b] * 2
    assert (x ^ y)["t"].dtype == torch.bool


def test_xor_of_a_container_with_itself_is_false_for_a_true_value() -> None:
    td = TensorDict({"nested": {"bool": NonTensorData(True)}, "one": 1})
    assert not (td ^ td).get(("nested", "bool"))
    assert (td | td).get(("nested", "bool"))


def test_or_of_per_row_values_is_per_row() -> None:
    x = TensorDict(v=NonTensorStack(True, False, False), batch_size=[3])
    y = TensorDict(v=NonTensorStack(False, False, True), batch_size=[3])
    assert (x | y)["v"].tolist() == [True, False, True]
    assert (x ^ x)["v"].tolist() == [False, False, False]


def test_equal_values_without_the_operator_stay_as_they_are() -> None:
    # a tag beside masks: tensordict raises TypeError (str | str); the tag is kept here
    x, y = _flags("train", "train")
    assert (x | y)["n", "v"] == "train" and (x ^ y).get(("n", "v")).data == "train"
    per_row = TensorDict(v=NonTensorStack("a", "b"), batch_size=[2])
    assert (per_row | per_row)["v"] == ["a", "b"]
    mixed = TensorDict(v=NonTensorStack("a", True), batch_size=[2])
    with pytest.raises(TypeError, match=r"key \('v',\) holds values some of which have no \|"):
        mixed | mixed


def test_or_of_values_without_the_operator_raises_naming_the_key() -> None:
    x, y = _flags("a", "b")
    with pytest.raises(TypeError, match=r"key \('n', 'v'\) holds the values 'a' and 'b'"):
        x | y
    with pytest.raises(TypeError, match=r"str \^ str is not defined"):
        x ^ y


@pytest.mark.parametrize("a, b", [(True, True), (True, False), (3, 5)])
def test_or_and_xor_of_values_match_tensordict(a: object, b: object) -> None:
    tensordict = pytest.importorskip("tensordict")
    for mod in (None, tensordict):
        x, y = _flags(a, b, mod)
        got = [(x | y).get(("n", "v")), (x ^ y).get(("n", "v"))]
        if mod is None:
            mine = got
        else:
            assert [t.tolist() for t in mine] == [t.tolist() for t in got]
            assert [t.dtype for t in mine] == [t.dtype for t in got]


# ------------------------------------------------------ a function held as a value


def test_apply_calls_a_function_held_in_another_input() -> None:
    td0 = TensorDict({"a": 0, "b": 0})
    td1 = TensorDict({"a": 1, "b": 1})
    funcs = TensorDict({"a": lambda x, y: x - y, "b": lambda x, y: x + y})
    td = td0.apply(lambda x, y, func: func(x, y), td1, funcs)
    assert td["a"] == -1 and td["b"] == 1


def test_calling_a_non_tensor_value_calls_what_it_holds() -> None:
    assert NonTensorData(lambda *a, **k: (a, k))(1, z=2) == ((1,), {"z": 2})
    with pytest.raises(TypeError, match="'str' object is not callable"):
        NonTensorData("text")()


def test_metadata_takes_a_type_parameter_as_in_tensordict() -> None:
    from tensorbox import MetaData, TensorClass

    class C(TensorClass):
        custom_data: MetaData[str]

    c = C(custom_data=MetaData[str]("abc"))
    # a stacked MetaData stays one value, as tensordict's
    assert c.custom_data == "abc" and torch.stack([c, c]).custom_data == "abc"
    assert torch.stack([c, C(custom_data=MetaData("x"))]).custom_data == ["abc", "x"]
    assert isinstance(MetaData("x"), MetaData[str]) and MetaData[str]("y").data == "y"
