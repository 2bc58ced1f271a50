"""``==``/``!=`` between a tensor leaf and the same key held as a non-tensor value
(``TensorDict.from_dict(td.to_dict())`` turns numbers held as values into tensors)."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import NonTensorData, TensorDict

small = st.integers(-1000, 1000)


@given(small, small)
def test_tensor_against_value_compares_numbers(a: int, b: int) -> None:
    as_value = TensorDict(n=NonTensorData(a), batch_size=[])
    as_tensor = TensorDict(n=torch.tensor(b), batch_size=[])
    want = torch.eq(torch.tensor(a), torch.tensor(b))
    assert torch.equal((as_tensor == as_value)["n"], want)
    assert torch.equal((as_value == as_tensor)["n"], want)
    assert torch.equal((as_value != as_tensor)["n"], ~want)


def test_round_trip_through_to_dict_compares_equal() -> None:
    td = TensorDict({"1": 1, "nested": {"int": NonTensorData(3), "s": NonTensorData("x")}})
    again = TensorDict.from_dict(td.to_dict(), auto_batch_size=True)
    assert (again == td).all() and not (again != td).any()


def test_value_that_is_no_number_is_unequal() -> None:
    as_value = TensorDict(n=NonTensorData("three"), batch_size=[])
    as_tensor = TensorDict(n=torch.tensor([3, 3]), batch_size=[])
    assert (as_tensor == as_value)["n"].tolist() == [False, False]
    assert (as_tensor != as_value)["n"].tolist() == [True, True]
