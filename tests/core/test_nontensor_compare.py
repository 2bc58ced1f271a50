"""``==``/``!=`` between a tensor leaf and the same key held as a non-tensor value
(``TensorDict.from_dict(td.to_dict())`` turns numbers held as values into tensors), and
between a tensorclass and ``TensorDict(tc.to_dict())``, which holds its None fields."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import NonTensorData, TensorClass, TensorDict

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


def test_a_tensorclass_equals_the_tensordict_of_its_to_dict_with_none_fields() -> None:
    class Inner(TensorClass):
        x: torch.Tensor
        note: str = None

    class Outer(TensorClass):
        x: torch.Tensor
        y: torch.Tensor = None
        inner: Inner = None

    tc = Outer(x=torch.ones(2), inner=Inner(x=torch.zeros(2), batch_size=[2]), batch_size=[2])
    td = TensorDict(tc.to_dict(), batch_size=[2])
    assert set(td.keys()) == {"x", "y", "inner"}  # the dict's None is an entry of a TensorDict
    assert (tc == td).all() and (td == tc).all() and not (tc != td).any()
    # between two TensorDicts, a None entry is still an entry
    with pytest.raises(KeyError, match=r"different keys \(missing \['a'\], unexpected \[\]\)"):
        _ = TensorDict(a=None) == TensorDict()


def test_tensorclass_against_its_to_dict_matches_tensordict() -> None:
    tensordict = pytest.importorskip("tensordict")
    import tensorbox

    results = []
    for lib in (tensordict, tensorbox):

        class C(lib.TensorClass):
            x: torch.Tensor
            y: torch.Tensor = None
            s: str = None

        c = C(x=torch.ones(2), batch_size=[2])
        d = lib.TensorDict(c.to_dict(), batch_size=[2])
        results.append(((c == d).all(), (d == c).all(), (c != d).any()))
    assert results[0] == results[1] == (True, True, False)
