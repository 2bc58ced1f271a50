"""KeyMethods (tensorbox/_core/methods/keys.py): set_at_, update_at_, get_at, replace.

Oracle: the same write done on plain tensors (``leaf[index] = value``), for a
TensorDict and a tensorclass, with random batch shapes and indices.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from tensorbox import TensorClass, TensorDict
from tensorbox._core.shape import normalize_index
from tensorbox.errors import LockedError, TensorDictKeyError


class Inner(TensorClass):
    c: Tensor
    tag: str


class Outer(TensorClass):
    a: Tensor
    inner: Inner
    s: str


def make(kind: str, n: int = 4, m: int = 3) -> Any:
    a = torch.zeros(n, m, 2)
    if kind == "td":
        inner: Any = TensorDict(c=torch.zeros(n, m, 5), tag="t", batch_size=[n, m, 5])
        return TensorDict(a=a, inner=inner, s="s", batch_size=[n, m])
    return Outer(a, Inner(torch.zeros(n, m, 5), "t", batch_size=[n, m, 5]), "s", batch_size=[n, m])


INDEX = st.sampled_from(
    [0, -1, slice(1, 3), (slice(None), 1), (..., 2), torch.tensor([0, 2]), (1, slice(0, 2))]
)
KINDS = ["td", "tc"]


@pytest.mark.parametrize("kind", KINDS)
@given(index=INDEX, value=st.floats(-3, 3, allow_nan=False))
def test_set_at_matches_tensor_writes(kind: str, index: Any, value: float) -> None:
    obj = make(kind)
    ix = normalize_index(index, 2)  # the index reaches the 2 batch dims only
    expect_a, expect_c = obj.get("a").clone(), obj.get(("inner", "c")).clone()
    expect_a[ix] = value
    expect_c[ix] = value
    assert obj.set_at_("a", value, index) is obj
    obj.set_at_(("inner", "c"), torch.tensor(value), index)
    torch.testing.assert_close(obj.get("a"), expect_a)
    torch.testing.assert_close(obj.get(("inner", "c")), expect_c)
    torch.testing.assert_close(obj.get_at("a", index), expect_a[ix])
    torch.testing.assert_close(obj.get_at(("inner", "c"), index), expect_c[ix])


@pytest.mark.parametrize("kind", KINDS)
@given(index=INDEX)
def test_update_at_matches_tensor_writes(kind: str, index: Any) -> None:
    obj = make(kind)
    ix = normalize_index(index, 2)
    rows = obj[index]
    src = rows.clone().apply(lambda t: t + torch.arange(t.numel()).reshape(t.shape).float())
    expect = {k: obj.get(k).clone() for k in ("a", ("inner", "c"))}
    for k, v in expect.items():
        v[ix] = src.get(k)
    assert obj.update_at_(src, index) is obj
    for k, v in expect.items():
        torch.testing.assert_close(obj.get(k), v)
    # a container restricted by keys_to_update: only the nested entry is written
    obj.update_at_(src.apply(lambda t: t * 0 - 5), index, keys_to_update=[("inner", "c")])
    expect[("inner", "c")][ix] = -5.0
    obj.update_at_(src.apply(lambda t: t * 0 + 9), index, keys_to_update=["a"])
    expect["a"][ix] = 9.0
    for k, v in expect.items():
        torch.testing.assert_close(obj.get(k), v)
    # a dict with nested keys, and keys_to_update keeping only some of them
    obj.update_at_({"a": 7.0, ("inner", "c"): -1.0}, index, keys_to_update=["a"])
    expect["a"][ix] = 7.0
    for k, v in expect.items():
        torch.testing.assert_close(obj.get(k), v)


def test_update_at_and_set_at_write_non_tensor_rows() -> None:
    td = TensorDict(s="a", x=torch.zeros(4), batch_size=[4])
    td.set_at_("s", "b", slice(1, None, 2))
    assert td["s"] == ["a", "b", "a", "b"] and td.get("s").tolist() == ["a", "b", "a", "b"]
    src = torch.stack([TensorDict(s="c", x=torch.ones(()), batch_size=[])] * 2)
    td.copy_at_(src, torch.tensor([0, 3]), fast=False)
    assert td["s"] == ["c", "b", "a", "c"] and td["x"].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert td.get_at("s", slice(0, 2)).tolist() == ["c", "b"]
    tc = make("tc")
    tc.set_at_(("inner", "tag"), "u", 0)
    assert tc.inner.tag[0][0] == ["u"] * 5 and tc.inner.tag[1][0] == ["t"] * 5


@pytest.mark.parametrize("kind", KINDS)
def test_writes_work_when_locked_and_keep_storage(kind: str) -> None:
    obj = make(kind).lock_()
    a = obj.get("a")
    obj.set_at_("a", 1.0, 0)
    obj.update_at_({"a": 2.0}, (slice(None), 1), clone=True)
    assert obj.get("a") is a and a[0, 0].tolist() == [1.0, 1.0] and a[3, 1].tolist() == [2.0] * 2


@pytest.mark.parametrize("kind", KINDS)
def test_write_errors(kind: str) -> None:
    obj = make(kind)
    with pytest.raises(TensorDictKeyError, match=r"set_at_: key 'zz' not found; .* set\(\)"):
        obj.set_at_("zz", 1.0, 0)
    with pytest.raises(TensorDictKeyError, match=r"set_at_: key \('inner', 'q'\) not found"):
        obj.set_at_(("inner", "q"), 1.0, 0)
    with pytest.raises(TensorDictKeyError, match=r"set_at_: key \('a', 'q'\) not found"):
        obj.set_at_(("a", "q"), 1.0, 0)
    before = obj.get("a").clone()
    with pytest.raises(TensorDictKeyError, match=r"update_at_: key 'zz' not found"):
        obj.update_at_({"a": 5.0, "zz": 1.0}, 0)
    assert torch.equal(obj.get("a"), before)  # checked before anything was written
    other = TensorDict(a=torch.ones(3, 2), zz=torch.ones(3), batch_size=[3])
    with pytest.raises(TensorDictKeyError, match=r"update_at_: key 'zz' is not in the destin"):
        obj.update_at_(other, 0)
    with pytest.raises(TypeError, match=r"update_at_: expected a TensorDict, .* got list"):
        obj.update_at_([1, 2], 0)
    assert obj.get_at("zz", 0) is None and obj.get_at(("inner", "zz"), 0, "d") == "d"
    with pytest.raises(IndexError, match="too many indices"):
        obj.set_at_("a", 1.0, (0, 0, 0))


def test_replace_on_tensordict() -> None:
    td = make("td")
    assert td.replace() is td and td.replace({}) is td
    out = td.replace({"a": torch.ones(4, 3, 2), "inner": {"c": torch.ones(4, 3, 5)}}, s="new")
    assert out is not td and type(out) is TensorDict
    assert out["a"].sum() == 24 and out["inner", "c"].sum() == 60 and out["s"] == "new"
    assert out["inner", "tag"] == "t"  # nested containers are merged, not swapped
    assert td["a"].sum() == 0 and td["s"] == "s" and td["inner", "c"].sum() == 0
    zeros = td.clone().apply(lambda t: t + 1)
    assert (td.replace(**zeros)["a"] == 1).all()  # a container's entries as keywords
    assert (td.replace(zeros)["inner", "c"] == 1).all()
    with pytest.raises(TypeError, match="replace takes one mapping or container of entries, got 2"):
        td.replace({}, {})
    with pytest.raises(TypeError, match=r"replace: expected a mapping or a container .* got int"):
        td.replace(3)


def test_replace_on_tensorclass() -> None:
    tc = make("tc")
    repl = tc.clone().apply(lambda t: t + 1)
    repl.s = "other"
    out = tc.replace(repl)
    assert type(out) is Outer and type(out.inner) is Inner and out.s == "other"
    assert (out.a == 1).all() and (out.inner.c == 1).all() and (tc.a == 0).all()
    assert tc.replace(s="kw").s == "kw"  # the dataclass form still works
    assert tc.replace({"s": "d"}, a=torch.ones(4, 3, 2)).a.sum() == 24


@pytest.mark.parametrize("kind", KINDS)
def test_non_tensor_entries(kind: str) -> None:
    obj = make(kind)
    assert obj.is_non_tensor("s") and not obj.is_non_tensor("a")
    assert obj.is_non_tensor(("inner", "tag")) and not obj.is_non_tensor(("inner", "c"))
    assert obj.get_non_tensor("s") == "s" and obj.get_non_tensor("a") is obj.get("a")
    assert obj.get_non_tensor("zz", "d") == "d"
    with pytest.raises(TensorDictKeyError, match="get_non_tensor: key 'zz' not found"):
        obj.get_non_tensor("zz")
    with pytest.raises(TensorDictKeyError, match=r"is_non_tensor: key \('inner', 'zz'\) not found"):
        obj.is_non_tensor(("inner", "zz"))
    assert obj.set_non_tensor("s", [1, 2]) is obj
    assert obj.get_non_tensor("s") == [1, 2] and obj.is_non_tensor("s")


def test_set_non_tensor_nested_and_locked() -> None:
    td = TensorDict(batch_size=[2])
    td.set_non_tensor(("meta", "n"), 5)
    assert td.is_non_tensor(("meta", "n")) and td["meta", "n"] == 5
    with pytest.raises(LockedError):
        td.lock_().set_non_tensor("x", "y")


def test_create_nested_clear_depth() -> None:
    td = TensorDict(a=torch.zeros(3), batch_size=[3], device="cpu")
    assert td.create_nested(("b", "c")) is td
    assert td["b", "c"].batch_size == (3,) and td["b", "c"].device == torch.device("cpu")
    assert td.depth == 0  # an empty nested container holds no entry
    td["b", "c", "d"] = torch.zeros(3)
    assert td.depth == 2
    td.create_nested("b")  # replaces what was there
    assert td.depth == 0 and list(td["b"].keys()) == []
    td.lock_()
    with pytest.raises(LockedError):
        td.create_nested("e")
    with pytest.raises(LockedError):
        td.clear()
    assert td.unlock_().clear() is td and list(td.keys()) == []
    tc = make("tc")
    assert tc.depth == 1 and tc.clear() is tc and list(tc.keys()) == []


def test_depth_is_a_free_field_name() -> None:
    class RGBD(TensorClass):
        rgb: Tensor
        depth: Tensor

    x = RGBD(torch.zeros(2, 3), torch.ones(2), batch_size=[2])
    assert torch.equal(x.depth, torch.ones(2))


@pytest.mark.parametrize("keep", [False, True])
def test_cat_and_stack_tensors(keep: bool) -> None:
    a = torch.arange(24.0).reshape(4, 3, 2)
    td = TensorDict(a=a, b=a + 1, inner={"c": -a}, batch_size=[4, 3])
    assert td.cat_tensors("a", "b", out_key="cat", dim=-1, keep_entries=keep) is td
    torch.testing.assert_close(td["cat"], torch.cat([a, a + 1], -1))
    assert ("a" in td) is keep and ("b" in td) is keep
    td.set("a", a)
    td.stack_tensors("a", ("inner", "c"), out_key=("x", "s"), dim=2, keep_entries=keep)
    torch.testing.assert_close(td["x", "s"], torch.stack([a, -a], 2))
    assert ("a" in td) is keep and (("inner", "c") in td.keys(True)) is keep


def test_tensorclass_merges_into_a_field() -> None:
    tc = make("tc")
    tc.set("a", torch.ones(4, 3, 2))
    tc.cat_tensors("a", "a", out_key="a", dim=-1, keep_entries=True)
    assert tc.a.shape == (4, 3, 4)


def test_merge_errors_lose_nothing() -> None:
    td = TensorDict(a=torch.zeros(2, 1), b=torch.zeros(2, 3), s="x", batch_size=[2])
    with pytest.raises(
        ValueError, match=r"stack_tensors: cannot merge 'a', 'b': stack expects each tensor"
    ):
        td.stack_tensors("a", "b", out_key="c")
    with pytest.raises(TypeError, match=r"cat_tensors: the entry at 's' is a str, not a tensor"):
        td.cat_tensors("a", "s", out_key="c")
    with pytest.raises(TensorDictKeyError, match=r"cat_tensors: key 'zz' not found"):
        td.cat_tensors("a", "zz", out_key="c")
    assert sorted(td.keys()) == ["a", "b", "s"]
    td.cat_tensors("a", "b", out_key="a", dim=1)  # the output may reuse an input's key
    assert sorted(td.keys()) == ["a", "s"] and td["a"].shape == (2, 4)
