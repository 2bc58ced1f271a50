"""Row writes create the keys and fields they carry, as tensordict does: zeros (or None)
in the rows not written; refused on a locked container; committed on a saved tree."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import LockedError, TensorDict, TensorDictKeyError, tensorclass


@tensorclass
class Node:
    x: torch.Tensor
    inner: Node | None = None


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            st.just(n), st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True)
        )
    ),
    st.sampled_from([(), (3,), (2, 2)]),
    st.sampled_from([torch.float32, torch.int64, torch.bool]),
)
def test_a_new_key_is_zeros_outside_the_written_rows(
    case: tuple[int, list[int]], feat: tuple[int, ...], dtype: torch.dtype
) -> None:
    n, rows = case
    td = TensorDict(a=torch.zeros(n), batch_size=[n])
    value = torch.ones((len(rows), *feat), dtype=dtype)
    td[torch.tensor(rows)] = {"a": torch.ones(len(rows)), "new": {"b": value}}
    oracle = torch.zeros((n, *feat), dtype=dtype)
    oracle[torch.tensor(rows)] = value  # torch's own row write as the oracle
    assert torch.equal(td["new", "b"], oracle)
    assert td["new"].batch_size == torch.Size([n])


def test_new_keys_of_every_kind() -> None:
    td = TensorDict(a=torch.zeros(4, 2), batch_size=[4])
    other = TensorDict(
        a=torch.ones(2, 2),
        b=torch.ones(2, 3, dtype=torch.int64),
        n={"c": torch.ones(2, 5)},
        s="hi",
        batch_size=[2],
    )
    td[1:3] = other
    assert td["b"].sum(-1).tolist() == [0, 3, 3, 0] and td["b"].dtype is torch.int64
    assert td["n", "c"].shape == (4, 5) and td["n"].batch_size == (4,)
    assert td["s"] == [None, "hi", "hi", None]


def test_an_optional_nested_tensorclass_field_is_created() -> None:
    s = Node(x=torch.zeros(5), batch_size=[5])
    assert s.inner is None
    s[2:4] = Node(x=torch.ones(2), inner=Node(x=torch.ones(2, 3), batch_size=[2]), batch_size=[2])
    assert isinstance(s.inner, Node) and s.inner.batch_size == (5,)
    assert s.inner.x.sum(-1).tolist() == [0, 0, 3, 3, 0]
    assert s.inner.inner is None


def test_tensordicts_pre_allocate_case() -> None:
    @tensorclass
    class Box:
        X: object

    m1 = Box(Box(Box(X=None, batch_size=[4]), batch_size=[4]), batch_size=[4])
    m2 = Box(Box(Box(X=torch.randn(2), batch_size=[]), batch_size=[]), batch_size=[])
    m1[0] = m2
    assert (m1[0].X.X.X == m2.X.X.X).all() and (m1.X.X.X[1:] == 0).all()


def test_a_locked_container_refuses_and_keeps_its_rows() -> None:
    td = TensorDict(a=torch.zeros(4), batch_size=[4]).lock_()
    with pytest.raises(LockedError, match="cannot set 'b': the TensorDict is locked"):
        td[1:3] = {"a": torch.ones(2), "b": torch.ones(2)}
    assert td["a"].sum() == 0 and td.get("b", None) is None  # no row written either
    td[1:3] = {"a": torch.ones(2)}  # existing keys only: a row write, allowed
    assert td["a"].tolist() == [0, 1, 1, 0]


def test_a_tensorclass_takes_declared_fields_only() -> None:
    s = Node(x=torch.zeros(3), batch_size=[3])
    with pytest.raises(TensorDictKeyError, match="Node has no field 'y'"):
        s[0:1] = TensorDict(x=torch.ones(1), y=torch.ones(1), batch_size=[1])
    assert s.x.sum() == 0


def test_a_jagged_key_is_not_created_by_rows() -> None:
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nt = torch.nested.nested_tensor([torch.ones(1), torch.ones(2)], layout=torch.jagged)
    with pytest.raises(TensorDictKeyError, match="cannot create jagged key 'j' by a row write"):
        td[0:2] = {"j": nt}


def test_a_new_key_on_a_saved_tree_is_committed(tmp_path: Path) -> None:
    saved = TensorDict(a=torch.zeros(4), batch_size=[4]).memmap(tmp_path / "t")
    with pytest.raises(LockedError, match="cannot set 'b'"):
        saved[0:2] = {"b": torch.ones(2)}
    with saved.unlock_():
        saved[0:2] = {"a": torch.ones(2), "b": torch.ones(2, 3), "s": "x"}
    back = TensorDict.load_memmap(tmp_path / "t")
    assert back["b"].sum(-1).tolist() == [3, 3, 0, 0] and back["a"].tolist() == [1, 1, 0, 0]
    assert back["s"] == ["x", "x", None, None]
