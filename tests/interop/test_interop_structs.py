"""Structured arrays, namedtuples and dataclasses, with numpy as the oracle."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensorbox import TensorDict

FIELD_DTYPES = ["i1", "i4", "i8", "u1", "f2", "f4", "f8", "?"]


@given(
    st.lists(st.sampled_from(FIELD_DTYPES), min_size=1, max_size=4),
    st.integers(0, 5),
    st.data(),
)
def test_struct_array_round_trip_against_numpy(dtypes, n, data):
    dtype = np.dtype([(f"f{i}", d) for i, d in enumerate(dtypes)], align=True)
    arr = data.draw(hnp.arrays(dtype, n))
    td = TensorDict.from_struct_array(arr)
    assert td.batch_size == (n,)
    for name in dtype.names:
        assert np.array_equal(td[name].numpy(), arr[name], equal_nan=arr[name].dtype.kind == "f")
    back = td.to_struct_array()
    for name in dtype.names:
        assert np.array_equal(back[name], arr[name], equal_nan=arr[name].dtype.kind == "f")


def test_struct_array_shares_memory_and_keeps_strings():
    arr = np.array(
        [("Rex", 9, 81.0), ("Fido", 3, 27.0)],
        dtype=[("name", "U10"), ("age", "i4"), ("weight", "f4")],
    )
    td = TensorDict.from_struct_array(arr)
    arr["age"] += 1
    assert td["age"].tolist() == [10, 4] and td[1]["name"] == "Fido"
    assert (td.to_struct_array() == arr).all()
    with pytest.raises(TypeError, match="expected a numpy structured array, got ndarray"):
        TensorDict.from_struct_array(np.zeros(3))


def test_namedtuple_and_dataclass():
    td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.ones(3)}}, [3])
    nt = td.to_namedtuple()
    assert type(nt).__name__ == "GenericDict" and torch.equal(nt.n.b, torch.ones(3))
    back = TensorDict.from_namedtuple(nt, auto_batch_size=True)
    assert back.batch_size == (3,) and torch.equal(back["n", "b"], torch.ones(3))
    mx = torch.max(torch.tensor([[1.0, 3.0], [2.0, 0.0]]), dim=1)
    assert TensorDict.from_namedtuple(mx)["indices"].tolist() == [1, 0]

    @dataclasses.dataclass
    class Inner:
        y: torch.Tensor

    @dataclasses.dataclass
    class Outer:
        x: torch.Tensor
        inner: Inner

    d = TensorDict.from_dataclass(Outer(torch.zeros(2), Inner(torch.ones(2))), batch_size=[2])
    assert torch.equal(d["inner", "y"], torch.ones(2))
    with pytest.raises(TypeError, match="expected a dataclass instance, got int"):
        TensorDict.from_dataclass(3)
    Point = collections.namedtuple("Point", "x y")
    assert TensorDict.from_any(Point(torch.zeros(1), torch.ones(1)))["y"].tolist() == [1.0]
    with pytest.raises(TypeError, match="cannot make a container of a set"):
        TensorDict.from_any({1})
