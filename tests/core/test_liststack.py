"""``set_list_to_stack``: tensordict's reading of a list as rows, against tensordict 0.15.3
(whose default mode is on) as the oracle where it is installed."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import BatchSizeError, TensorDict, list_to_stack, set_list_to_stack, tensorclass

td_real = pytest.importorskip("tensordict")


@tensorclass
class _Tagged:
    x: torch.Tensor
    z: list


def test_off_by_default_keeps_one_value() -> None:
    assert not list_to_stack()
    td = TensorDict(a=["p", "q"], batch_size=[2])
    assert td[0]["a"] == ["p", "q"]


@given(st.lists(st.text(max_size=3), min_size=1, max_size=5))
@settings(max_examples=25, deadline=None)
def test_strings_give_one_per_row_as_tensordict(items: list[str]) -> None:
    n = len(items)
    with set_list_to_stack(True):
        ours = TensorDict(a=list(items), batch_size=[n])
    with td_real.set_list_to_stack(True):
        theirs = td_real.TensorDict(a=list(items), batch_size=[n])
    assert [ours[i]["a"] for i in range(n)] == [theirs[i]["a"] for i in range(n)]


def test_nested_lists_fill_two_batch_dims() -> None:
    rows = [[f"{i}{j}" for j in range(3)] for i in range(2)]
    with set_list_to_stack(True):
        td = TensorDict(b=rows, batch_size=[2, 3])
    assert td[1, 2]["b"] == "12" and td[0]["b"] == ["00", "01", "02"]


def test_tensors_stack_and_empty_list_is_a_tensor() -> None:
    with set_list_to_stack(True):
        td = TensorDict(a=[torch.zeros(()), torch.ones(())], batch_size=[2])
        empty = TensorDict()
        empty["key"] = []
    with td_real.set_list_to_stack(True):
        ref = td_real.TensorDict(a=[torch.zeros(()), torch.ones(())], batch_size=[2])
    torch.testing.assert_close(td["a"], ref["a"])
    assert isinstance(empty["key"], torch.Tensor) and empty["key"].shape == (0,)


def test_a_list_of_the_wrong_length_is_refused() -> None:
    with set_list_to_stack(True), pytest.raises(BatchSizeError, match="batch dimension mismatch"):
        TensorDict(a=["x", "y", "z"], batch_size=[2])
    with set_list_to_stack(True), pytest.raises(BatchSizeError, match="batch dimension mismatch"):
        _Tagged(x=torch.ones(3, 4), z=["a", "b", "c"], batch_size=[3, 4])
    with (
        set_list_to_stack(True),
        pytest.raises(BatchSizeError, match="cannot stack the list of tensors"),
    ):
        TensorDict(a=[torch.zeros(2), torch.zeros(3)], batch_size=[2])


def test_no_batch_dims_keeps_the_list_and_the_switch_restores() -> None:
    with set_list_to_stack(True):
        assert list_to_stack()
        td = TensorDict(a=["x", "y"])
        tc = _Tagged(x=torch.ones(2), z=["a", "b"], batch_size=[2])
    assert not list_to_stack()
    assert td["a"] == ["x", "y"] and tc[1].z == "b"


def test_switch_set_for_good_and_repr() -> None:
    switch = set_list_to_stack(True)
    assert repr(switch.clone()) == "set_list_to_stack(True)"
    try:
        switch.set()
        assert list_to_stack()
    finally:
        set_list_to_stack(False).set()
