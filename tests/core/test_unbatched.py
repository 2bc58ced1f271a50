"""UnbatchedTensor: a tensor a container holds as one value for the whole batch."""

from __future__ import annotations

import math
import operator
import pickle
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import TensorClass, TensorDict, UnbatchedTensor
from tensorbox.errors import BatchSizeError


def make(bs: tuple[int, ...] = (3, 4)) -> tuple[TensorDict, torch.Tensor]:
    table = torch.randn(7, 2)
    return TensorDict(x=torch.zeros(*bs, 5), ub=UnbatchedTensor(table), batch_size=bs), table


OPS = {
    "index": lambda td: td[0],
    "slice": lambda td: td[:, 1:],
    "mask": lambda td: td[torch.tensor([True, False, True])],
    "reshape": lambda td: td.reshape(-1),
    "permute": lambda td: td.permute(1, 0),
    "unsqueeze": lambda td: td.unsqueeze(0),
    "expand": lambda td: td.expand(2, 3, 4),
    "unbind": lambda td: td.unbind(1)[0],
    "split": lambda td: td.split(1, 0)[1],
    "stack": lambda td: torch.stack([td, td], 1),
    "cat": lambda td: torch.cat([td, td], 0),
    "clone": lambda td: td.clone(),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_batch_ops_pass_it_through(op: str) -> None:
    td, table = make()
    out = OPS[op](td)
    ub = out["ub"]
    assert type(ub) is UnbatchedTensor and ub.data_ptr() == table.data_ptr()
    assert ub.shape == table.shape and ub.batch_size == out.batch_size
    assert out.get("ub").batch_size == out.batch_size
    assert dict(out.items())["ub"].batch_size == out.batch_size


def test_nested_and_tensorclass_reads_report_their_level() -> None:
    table = torch.arange(3)
    td = TensorDict(n=TensorDict(ub=UnbatchedTensor(table), batch_size=[2, 5]), batch_size=[2])
    assert td["n", "ub"].batch_size == (2, 5) and td[1]["n", "ub"].batch_size == (5,)
    assert dict(td.items(include_nested=True))[("n", "ub")].batch_size == (2, 5)

    class C(TensorClass):
        x: torch.Tensor
        table: torch.Tensor

    c = C(torch.zeros(4), UnbatchedTensor(table), batch_size=[4])
    assert type(c.table) is UnbatchedTensor and c[1:].table.batch_size == (3,)
    assert c.table.data_ptr() == table.data_ptr()
    c.table = UnbatchedTensor(torch.ones(9))
    assert c.table.shape == (9,)
    with pytest.raises(BatchSizeError, match="does not start with the batch_size"):
        c.x = torch.ones(9)


def test_joining_different_tables_warns_and_keeps_the_first() -> None:
    a = TensorDict(ub=UnbatchedTensor(torch.zeros(5)), batch_size=[3])
    b = TensorDict(ub=UnbatchedTensor(torch.ones(5)), batch_size=[3])
    with pytest.warns(UserWarning, match="different data storage; the result keeps the first"):
        out = torch.stack([a, b])
    assert out["ub"].sum() == 0
    same = TensorDict(ub=UnbatchedTensor(a["ub"]), batch_size=[3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.cat([a, same])


def test_auto_batch_size_ignores_it_and_saving_refuses_it(tmp_path: object) -> None:
    td = TensorDict(a=UnbatchedTensor(0), b=torch.randn(2, 3)).auto_batch_size_()
    assert td.batch_size == (2, 3) and td["a"] == 0
    with pytest.raises(TypeError, match="key 'a'"):
        td.memmap(tmp_path)


@given(st.lists(st.integers(-9, 9), max_size=4))
def test_it_is_an_ordinary_tensor_outside(values: list[int]) -> None:
    data = torch.tensor(values, dtype=torch.int64)
    ut = UnbatchedTensor(data)
    assert isinstance(ut, torch.Tensor) and ut.data_ptr() == data.data_ptr()
    assert ut.tolist() == values and type(ut + 1) is torch.Tensor
    assert str(ut) == str(data) and repr(ut) == f"UnbatchedTensor({data!r})"
    np.testing.assert_array_equal(np.asarray(ut), np.asarray(data))
    back = pickle.loads(pickle.dumps(UnbatchedTensor(data, batch_size=[2])))
    assert type(back) is UnbatchedTensor and back.batch_size == (2,) and back.tolist() == values


@pytest.mark.parametrize("fn", [int, float, bool, operator.index, math.floor, lambda x: f"{x:.2f}"])
def test_python_conversions_match_torch(fn: object) -> None:
    data = torch.tensor(3)
    assert fn(UnbatchedTensor(data)) == fn(data)  # type: ignore[operator]
