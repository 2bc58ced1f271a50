"""tensordict names user code calls: the compat methods, row views, lazy stacks, padding
and the keyword variants of shape ops (``docs/migrating.md``)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import (
    BatchSizeError,
    LazyStackedTensorDict,
    LockedError,
    TensorDict,
    lazy_stack,
    pad,
    pad_sequence,
)
from tensorbox.errors import BatchDimError


def _td() -> TensorDict:
    return TensorDict(
        {"a": torch.randn(4, 3, 2), "n": {"b": torch.randn(4, 3)}, "s": "text"},
        batch_size=[4, 3],
    )


# ------------------------------------------------------------------ compat methods


def test_check_batch_size() -> None:
    td = _td()
    assert td._check_batch_size() is None
    td._tensordict["n"]._tensordict["b"] = torch.zeros(5)  # a broken tree, built by hand
    assert td._check_batch_size(raise_exception=False) is False
    with pytest.raises(BatchSizeError, match=r"entry \('n', 'b'\) has shape \(5,\)"):
        td._check_batch_size()


def test_check_device_and_has_non_tensor() -> None:
    td = TensorDict(a=torch.zeros(2), batch_size=[2], device="cpu")
    assert td._check_device() is None and td._check_device(raise_exception=False) is True
    assert not td._has_non_tensor
    assert _td()._has_non_tensor


def test_values_list() -> None:
    td = _td()
    assert len(td._values_list(True, True)) == 2  # the tensor leaves
    assert len(td._values_list(True, False)) == 4
    got = td._values_list(True, True, sorting_keys=[("n", "b"), "a"])
    assert got[0] is td["n", "b"] and got[1] is td["a"]
    with pytest.raises(KeyError, match="sorting_keys is not here"):
        td._values_list(True, True, sorting_keys=["zz"])


@pytest.mark.parametrize("inplace", [False, True])
def test_fast_apply(inplace: bool) -> None:
    td = _td()
    ref = td.apply(lambda x: x + 1)
    out = td._fast_apply(lambda x: x + 1, inplace=inplace, num_threads=2, checked=False)
    assert (out is td) == inplace
    assert (out == ref).all()
    named = _td()._fast_apply(lambda k, x: x * 0 + len(k), named=True, nested_keys=True)
    assert (named["n", "b"] == 2).all() and (named["a"] == 1).all()
    empty = TensorDict(a=torch.zeros(2), batch_size=[2])
    assert empty._fast_apply(lambda x: None, filter_empty=True) is None
    with pytest.raises(TypeError, match=r"call_on_nested=True\) is not supported"):
        td._fast_apply(lambda x: x, call_on_nested=True)


# ------------------------------------------------------------------------ row views


@pytest.mark.parametrize(
    "idx", [1, slice(1, 3), torch.tensor([0, 3]), torch.tensor([True, False, False, True]), [2]]
)
def test_sub_tensordict_writes_reach_the_source(idx: object) -> None:
    td = _td()
    sub = td._get_sub_tensordict(idx)
    assert sub.batch_size == td[idx].batch_size
    sub.update(td[idx].apply(lambda x: x * 0 + 2))
    assert (td[idx]["a"] == 2).all() and (td[idx]["n", "b"] == 2).all()
    sub["a"] = torch.full_like(td[idx]["a"], 3.0)
    assert (td[idx]["a"] == 3).all()
    sub.set_(("n", "b"), torch.full_like(td[idx]["n", "b"], 4.0))
    assert (td[idx]["n", "b"] == 4).all()


def test_sub_tensordict_new_key_and_later_reads() -> None:
    td = TensorDict(a=torch.zeros(5, 2), batch_size=[5])
    first = td._get_sub_tensordict(0)
    rows = td._get_sub_tensordict(slice(2, 4))
    rows.set("c", torch.ones(2, 3))
    assert td["c"].shape == (5, 3)
    assert td["c"][2:4].eq(1).all() and td["c"][[0, 1, 4]].eq(0).all()
    assert first["c"].eq(0).all()  # a key the source gained after the view was made
    with pytest.raises(RuntimeError, match="cannot replace 'c' through rows"):
        rows.set("c", torch.ones(2, 3))
    with pytest.raises(RuntimeError, match="cannot set the batch size of rows"):
        rows.batch_size = [1]
    with pytest.raises(BatchSizeError, match="does not start with the batch size"):
        rows.set("d", torch.ones(3))
    assert type(rows + 1) is TensorDict
    assert rows.get_parent_tensordict() is td


def test_sub_tensordict_of_a_locked_source() -> None:
    td = TensorDict(a=torch.zeros(3), batch_size=[3]).lock_()
    sub = td._get_sub_tensordict(1)
    sub["a"] = torch.tensor(1.0)  # in place: allowed on a locked source
    assert td["a"].tolist() == [0.0, 1.0, 0.0]
    with pytest.raises(LockedError, match="source of these rows is locked"):
        sub["new"] = torch.tensor(1.0)


# ----------------------------------------------------------------------- lazy stacks


def test_lazy_stack_heterogeneous() -> None:
    a = TensorDict({"x": torch.zeros(2, 3), "n": {"y": torch.zeros(2)}}, batch_size=[2])
    b = TensorDict({"x": torch.ones(2, 5), "n": {"y": torch.ones(2)}}, batch_size=[2])
    s = LazyStackedTensorDict.lazy_stack([a, b], 0)
    assert isinstance(s, TensorDict) and s.batch_size == (2, 2)
    assert s[0] is a and s.tensordicts[1] is b and s.unbind(0) == (a, b)
    assert s.get(("n", "y")).tolist() == [[0.0, 0.0], [1.0, 1.0]]
    with pytest.raises(RuntimeError, match="Failed to stack tensors within a tensordict"):
        s.get("x")
    with pytest.raises(RuntimeError, match="cannot densify the lazy stack"):
        s.contiguous()
    with pytest.raises(RuntimeError, match="stack_dim to be 0"):
        lazy_stack([a, b], 1).get_nestedtensor("x")
    c = s.clone()
    assert isinstance(c, LazyStackedTensorDict) and c[0] is not a
    with pytest.raises(NotImplementedError, match="repeat"):
        s.repeat(1, 1, inplace=True)


def test_lazy_stack_dense_agrees_with_torch_stack() -> None:
    tds = [_td(), _td()]
    for dim in (0, 1, -1):
        s = lazy_stack(tds, dim)
        dense = torch.stack(tds, dim)
        assert s.batch_size == dense.batch_size
        assert (s.densify() == dense).all()
        assert (s.get("a") == dense["a"]).all()


def test_lazy_stack_writes_go_to_members() -> None:
    a, b = TensorDict(batch_size=[3]), TensorDict(batch_size=[3])
    s = lazy_stack([a, b], 1)
    s["x"] = torch.arange(6.0).reshape(3, 2)
    assert a["x"].tolist() == [0.0, 2.0, 4.0] and b["x"].tolist() == [1.0, 3.0, 5.0]
    s.append(TensorDict(x=torch.zeros(3), batch_size=[3]))
    assert s.batch_size == (3, 3)
    with pytest.raises(BatchSizeError, match="same batch size"):
        lazy_stack([a, TensorDict(batch_size=[4])])
    s.lock_()
    with pytest.raises(LockedError, match="locked lazy stack"):
        s.append(TensorDict(x=torch.zeros(3), batch_size=[3]))
    assert isinstance(_td().to_lazystack(1), LazyStackedTensorDict)


# --------------------------------------------------------------------------- padding


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    data=st.data(),
)
def test_pad_matches_torch(shape: list[int], data: st.DataObject) -> None:
    n = data.draw(st.integers(1, len(shape)))
    sizes = data.draw(st.lists(st.integers(-1, 3), min_size=2 * n, max_size=2 * n))
    if any(shape[i] + sizes[2 * i] + sizes[2 * i + 1] < 0 for i in range(n)):
        return
    x = torch.randn(*shape, 2)
    flat: list[int] = [0, 0]  # the feature dim
    for d in reversed(range(len(shape))):
        flat += sizes[2 * d : 2 * d + 2] if d < n else [0, 0]
    out = pad(TensorDict(x=x, batch_size=shape), sizes, value=7.0)
    assert torch.equal(out["x"], F.pad(x, flat, value=7.0))
    assert out._check_batch_size() is None


def test_pad_inplace_and_errors() -> None:
    td = _td()
    nested = td["n"]
    out = td.pad([0, 1, 1, 0], inplace=True)
    assert out is td and td["n"] is nested and td.batch_size == (5, 4)
    with pytest.raises(BatchDimError, match="one \\(before, after\\) pair"):
        pad(td, [0])
    with pytest.raises(BatchSizeError, match="negative output size"):
        td.pad([-10, 0], inplace=True)
    assert td.batch_size == (5, 4)


def test_pad_sequence() -> None:
    tds = [
        TensorDict({"a": torch.ones(2, 3), "n": {"c": torch.ones(2)}}, batch_size=[2]),
        TensorDict({"a": torch.full((4, 3), 2.0), "n": {"c": torch.ones(4)}}, batch_size=[4]),
    ]
    out = pad_sequence(tds, return_mask=True, padding_value=-1.0)
    assert out.batch_size == (2, 4) and out["a"].shape == (2, 4, 3)
    assert out["a"][0, 2:].eq(-1).all() and out["a"][1].eq(2).all()
    assert out["masks", "a"].tolist() == [[True, True, False, False], [True] * 4]
    assert out["masks", "n", "c"].shape == (2, 4)
    wide = pad_sequence(
        [
            TensorDict(a=torch.ones(2, 3), batch_size=[2]),
            TensorDict(a=torch.ones(2, 5), batch_size=[2]),
        ],
        pad_dim=1,
    )
    assert wide["a"].shape == (2, 2, 5) and wide["a"][0, :, 3:].eq(0).all()


# ------------------------------------------------------------------- keyword variants


def test_shape_ops_inplace() -> None:
    td = TensorDict(
        a=torch.arange(24.0).reshape(4, 6), n={"b": torch.zeros(4, 6, 2)}, batch_size=[4, 6]
    )
    ref = td.reshape(24)
    nested = td["n"]
    assert td.reshape(24, inplace=True) is td and td["n"] is nested
    assert torch.equal(td["a"], ref["a"])
    assert td.unflatten(0, (4, 6), inplace=True).batch_size == (4, 6)
    rolled = td.roll(1, 0)
    assert torch.equal(td.roll(1, 0, inplace=True)["a"], rolled["a"])
    assert td.repeat(2, 1, inplace=True).batch_size == (8, 6)
    view = TensorDict(a=torch.zeros(4, 6)[:, ::2], batch_size=[4, 3])
    assert view.contiguous(inplace=True)["a"].is_contiguous()


def test_view_dtype_type_and_like_device() -> None:
    td = TensorDict(a=torch.zeros(2, 3), i=torch.arange(2), batch_size=[2])
    v = td.view(torch.uint8, batch_size=[])
    assert v["a"].shape == (2, 12) and v["i"].dtype == torch.uint8
    assert td.type(torch.int32)["a"].dtype == torch.int32
    assert torch.empty_like(td, device="meta").device == torch.device("meta")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "copy construct from a tensor" advice
        n = td.new_tensor(torch.zeros(3))
    assert n.batch_size == (3,) and n["i"].dtype == torch.int64


def test_autograd_grad_over_containers() -> None:
    td = TensorDict(a=torch.randn(3), n={"b": torch.randn(3, 2)}, batch_size=[3])
    x = td.requires_grad_()
    y = x * 2
    g = torch.autograd.grad(y, x, torch.ones_like(y))
    assert isinstance(g, TensorDict) and (g == 2).all()


def test_in_place_writes_through_views() -> None:
    td = TensorDict({"a": torch.zeros(4, 3), "n": {"b": torch.zeros(4)}}, batch_size=[4])
    sub = td._get_sub_tensordict(torch.tensor([0, 2]))
    sub.fill_("a", 7)
    sub.masked_fill_(torch.tensor([True, False]), 4.0)
    assert td["a"][:, 0].tolist() == [4.0, 0.0, 7.0, 0.0]
    s = lazy_stack([td.clone(), td.clone()])
    s.fill_("a", 3)
    s.set_(("n", "b"), torch.full((2, 4), 8.0))
    s.masked_fill_(torch.tensor([[True] * 4, [False] * 4]), 5.0)
    assert s.tensordicts[0]["a"].eq(5).all() and s.tensordicts[1]["a"].eq(3).all()
    assert s.tensordicts[1]["n", "b"].eq(8).all()
    s[:, 1] = TensorDict({"a": torch.ones(2, 3), "n": {"b": torch.ones(2)}}, [2])
    assert s.tensordicts[1]["a"][:, 0].tolist() == [3.0, 1.0, 3.0, 3.0]
    s.zero_()
    assert all(t["a"].eq(0).all() for t in s.tensordicts)
    rows = s._get_sub_tensordict(0)  # rows of a lazy stack: written into its member
    rows.update({"new": torch.ones(4)})
    assert s.tensordicts[0]["new"].tolist() == [1.0] * 4 and s.tensordicts[1]["new"].eq(0).all()
