"""Property tests: torch is the oracle for every batch operation on random containers.

For random nested structures, batch sizes and indices (ints, slices, masks, index
tensors and lists, ``...``, ``None``, tuples of these):

* ``td[idx][k]`` equals ``td[k][idx]`` and ``td[idx].batch_size`` equals
  ``torch.empty(batch_size)[idx].shape``; where torch refuses an index, so do we;
* ``td[idx] = value`` writes exactly what torch's ``leaf[idx] = value`` writes;
* ``stack(unbind(td))``, ``cat(split(td))`` and ``cat(chunk(td))`` give ``td`` back;
* shape ops agree with the same op on each leaf;
* stacked non-tensor values follow their rows through all of the above.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import tensorbox
from tensorbox import TensorDict
from tests.strategies import (
    batch_sizes,
    expand_ellipsis,
    indices,
    labelled,
    labels_match,
    leaves,
    tensordicts,
)


def leaf_items(td: TensorDict) -> list[tuple[Any, Any]]:
    return list(td.items(include_nested=True, leaves_only=True))


def assert_same(a: TensorDict, b: TensorDict) -> None:
    """Same batch size, same keys at every depth, equal leaves with equal dtypes."""
    assert a.batch_size == b.batch_size
    assert a.keys(True) == b.keys(True)
    for key, va in leaf_items(a):
        vb = b[key]
        if isinstance(va, torch.Tensor):
            assert va.dtype == vb.dtype, key
            assert va.shape == vb.shape, key
            assert torch.equal(va, vb), key
        else:
            assert va == vb, key
    for key in a.keys(True):
        if isinstance(a[key], TensorDict):
            assert a[key].batch_size == b[key].batch_size, key


@st.composite
def td_and_index(draw: st.DrawFn, nontensor: bool = True) -> tuple[TensorDict, Any]:
    td = draw(tensordicts(nontensor=nontensor))
    return td, draw(indices(td.batch_size))


def torch_shape_after(batch_size: torch.Size, idx: Any) -> torch.Size | None:
    try:
        return torch.empty(batch_size)[idx].shape
    except (IndexError, RuntimeError, ValueError, TypeError):
        return None


# ------------------------------------------------------------------ indexing


@given(td_and_index())
def test_index_commutes_with_key_lookup(case: tuple[TensorDict, Any]) -> None:
    td, idx = case
    expected_bs = torch_shape_after(td.batch_size, idx)
    if expected_bs is None:
        with pytest.raises((IndexError, RuntimeError, ValueError)):
            td[idx]
        return
    out = td[idx]
    assert out.batch_size == expected_bs
    leaf_idx = expand_ellipsis(idx, td.batch_dims)
    for key, value in leaf_items(td):
        if isinstance(value, torch.Tensor):
            expected = value[leaf_idx]
            assert out[key].shape == expected.shape, key
            assert torch.equal(out[key], expected), key
        else:
            assert out[key] == value, key  # shared non-tensor values are untouched
    for key in td.keys(True):
        if isinstance(td[key], TensorDict):
            nested = out[key]
            assert nested.batch_size[: len(expected_bs)] == expected_bs


@st.composite
def td_and_row_index(draw: st.DrawFn) -> tuple[TensorDict, Any]:
    """The indices with a short path (int, slice, 1-D integer tensor or list, 1-D mask)."""
    td = draw(tensordicts(batch_size=draw(batch_sizes(min_dims=1)), nontensor=True))
    n = td.batch_size[0]
    rows = st.lists(st.integers(-n, n - 1), max_size=8) if n else st.just([])
    kind = draw(st.sampled_from(["int", "slice", "long", "int32", "list", "mask"]))
    if kind == "int":
        return td, draw(st.integers(-n, n - 1)) if n else 0
    if kind == "slice":
        bound = st.none() | st.integers(-n - 2, n + 2)
        return td, slice(draw(bound), draw(bound), draw(st.none() | st.integers(1, 3)))
    if kind == "mask":
        return td, torch.tensor(
            draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=torch.bool
        )
    values = draw(rows)
    if kind == "list":
        return td, values
    return td, torch.tensor(values, dtype=torch.long if kind == "long" else torch.int32)


@given(td_and_row_index())
def test_row_index_short_paths_match_torch(case: tuple[TensorDict, Any]) -> None:
    td, idx = case
    expected_bs = torch_shape_after(td.batch_size, idx)
    if expected_bs is None:
        with pytest.raises(IndexError):
            td[idx]
        return
    out = td[idx]
    assert out.batch_size == expected_bs
    for key, value in leaf_items(td):
        if isinstance(value, torch.Tensor):
            assert torch.equal(out[key], value[idx]), key
    if isinstance(idx, list) or (isinstance(idx, torch.Tensor) and idx.dtype != torch.bool):
        assert_same(td.__getitems__(idx), out)


@given(batch_sizes(min_dims=1).flatmap(lambda bs: st.tuples(st.just(bs), indices(bs))))
def test_index_moves_stacked_labels_with_their_rows(case: tuple[torch.Size, Any]) -> None:
    bs, idx = case
    td = labelled(bs)
    assume(torch_shape_after(bs, idx) is not None)
    out = td[idx]
    assert out.batch_size == torch_shape_after(bs, idx)
    assert labels_match(out)


@given(td_and_index(nontensor=False))
def test_setitem_writes_what_torch_writes(case: tuple[TensorDict, Any]) -> None:
    td, idx = case
    assume(torch_shape_after(td.batch_size, idx) is not None)
    target = td.clone()
    snapshot = td.clone()
    # New values for the selected rows: every leaf plus a per-leaf offset.
    value = td[idx].apply(lambda t: ~t if t.dtype is torch.bool else t + 100)
    target[idx] = value
    leaf_idx = expand_ellipsis(idx, td.batch_dims)
    for key, leaf in leaf_items(td):
        expected = leaf.clone()
        expected[leaf_idx] = value[key]
        assert torch.equal(target[key], expected), key
    # Writing into the clone never reaches the container it was cloned from.
    assert_same(td, snapshot)


@given(td_and_index(nontensor=False))
def test_setitem_scalar(case: tuple[TensorDict, Any]) -> None:
    td, idx = case
    assume(torch_shape_after(td.batch_size, idx) is not None)
    target = td.clone()
    target[idx] = 1
    leaf_idx = expand_ellipsis(idx, td.batch_dims)
    for key, leaf in leaf_items(td):
        expected = leaf.clone()
        expected[leaf_idx] = 1
        assert torch.equal(target[key], expected), key


@given(tensordicts(batch_size=None, nontensor=True).filter(lambda t: t.batch_dims > 0))
def test_getitems_equals_index_tensor(td: TensorDict) -> None:
    n = td.batch_size[0]
    rows = [i % n for i in range(0, 3 * n, 2)] if n else []
    assert_same(td.__getitems__(rows), td[torch.tensor(rows, dtype=torch.long)])


# ------------------------------------------------------- unbind/split/stack/cat


@st.composite
def td_and_dim(draw: st.DrawFn, nontensor: bool = True) -> tuple[TensorDict, int]:
    bs = draw(batch_sizes(min_dims=1))
    td = draw(tensordicts(batch_size=bs, nontensor=nontensor))
    return td, draw(st.integers(-td.batch_dims, td.batch_dims - 1))


@given(td_and_dim())
def test_stack_of_unbind_is_identity(case: tuple[TensorDict, int]) -> None:
    td, dim = case
    assume(td.batch_size[dim] > 0)  # torch.stack of nothing is an error
    parts = td.unbind(dim)
    assert len(parts) == td.batch_size[dim]
    assert all(p.batch_size == torch.empty(td.batch_size).unbind(dim)[0].shape for p in parts)
    assert_same(torch.stack(parts, dim), td)


@given(td_and_dim(), st.integers(1, 3))
def test_cat_of_split_is_identity(case: tuple[TensorDict, int], size: int) -> None:
    td, dim = case
    parts = td.split(size, dim)
    ref = torch.empty(td.batch_size).split(size, dim)
    assert [p.batch_size for p in parts] == [r.shape for r in ref]
    assert_same(torch.cat(parts, dim), td)


@given(td_and_dim(), st.integers(1, 4))
def test_cat_of_chunk_is_identity(case: tuple[TensorDict, int], chunks: int) -> None:
    td, dim = case
    parts = torch.chunk(td, chunks, dim)
    ref = torch.empty(td.batch_size).chunk(chunks, dim)
    assert [p.batch_size for p in parts] == [r.shape for r in ref]
    assert_same(torch.cat(parts, dim), td)


@given(batch_sizes(min_dims=1, max_size=3), st.data())
def test_stacked_labels_follow_unbind_stack_split_cat(bs: torch.Size, data: st.DataObject) -> None:
    td = labelled(bs)
    dim = data.draw(st.integers(0, len(bs) - 1))
    if bs[dim]:
        parts = td.unbind(dim)
        assert all(labels_match(p) for p in parts)
        assert labels_match(torch.stack(parts, dim))
    halves = td.split(2, dim)
    assert all(labels_match(p) for p in halves)
    assert labels_match(torch.cat(halves, dim))


# --------------------------------------------------------------- shape ops


def _leaf_op_matches(td: TensorDict, out: TensorDict, leaf_op: Any) -> None:
    for key, leaf in leaf_items(td):
        if isinstance(leaf, torch.Tensor):
            expected = leaf_op(leaf)
            assert out[key].shape == expected.shape, key
            assert torch.equal(out[key], expected), key


@given(td_and_dim(), st.data())
def test_shape_ops_match_torch_on_each_leaf(case: tuple[TensorDict, int], data: Any) -> None:
    td, dim = case
    bs, bd = td.batch_size, td.batch_dims
    ref = torch.empty(bs)

    perm = data.draw(st.permutations(range(bd)))
    out = td.permute(*perm)
    assert out.batch_size == ref.permute(*perm).shape
    _leaf_op_matches(td, out, lambda t: t.permute(*perm, *range(bd, t.ndim)))

    other = data.draw(st.integers(0, bd - 1))
    # A negative dim counts from the last *batch* dim, not from the leaf's last dim.
    _leaf_op_matches(td, td.transpose(dim, other), lambda t: t.transpose(dim % bd, other))
    assert td.transpose(dim, other).batch_size == ref.transpose(dim, other).shape

    udim = data.draw(st.integers(-bd - 1, bd))
    out = td.unsqueeze(udim)
    assert out.batch_size == ref.unsqueeze(udim).shape
    pos = udim if udim >= 0 else udim + bd + 1
    _leaf_op_matches(td, out, lambda t: t.unsqueeze(pos))
    assert_same(out.squeeze(udim), td)

    out = td.reshape(-1)
    assert out.batch_size == ref.reshape(-1).shape
    _leaf_op_matches(td, out, lambda t: t.reshape(-1, *t.shape[bd:]))
    assert_same(out.reshape(bs), td)

    out = td.flatten(0, dim)
    assert out.batch_size == ref.flatten(0, dim).shape
    _leaf_op_matches(td, out, lambda t: t.flatten(0, dim % bd))
    d = dim % bd
    assert_same(out.unflatten(0, bs[: d + 1]), td)

    out = td.squeeze()
    assert out.batch_size == ref.squeeze().shape

    out = td.expand(2, *bs)
    assert out.batch_size == ref.expand(2, *bs).shape
    _leaf_op_matches(td, out, lambda t: t.expand(2, *t.shape))


@given(batch_sizes(min_dims=2, max_size=3), st.data())
def test_stacked_labels_follow_shape_ops(bs: torch.Size, data: st.DataObject) -> None:
    td = labelled(bs)
    perm = data.draw(st.permutations(range(len(bs))))
    assert labels_match(td.permute(*perm))
    assert labels_match(td.transpose(0, -1))
    assert labels_match(td.reshape(-1))
    assert labels_match(td.flatten(0, 1))
    assert labels_match(td.unsqueeze(1))
    assert labels_match(td.expand(2, *bs))


# --------------------------------------------------------------- errors


@given(tensordicts(nontensor=True), leaves(torch.Size([7])))
def test_mismatched_batch_size_is_refused_with_key_and_shapes(
    td: TensorDict, value: torch.Tensor
) -> None:
    assume(td.batch_dims > 0 and td.batch_size[0] != 7)
    with pytest.raises(tensorbox.BatchSizeError, match=r"key \('new', 'leaf'\) has shape \(7"):
        td.set(("new", "leaf"), value)
    with pytest.raises(tensorbox.BatchSizeError, match=rf"batch_size \({td.batch_size[0]},"):
        TensorDict({"x": value}, batch_size=td.batch_size)


@given(tensordicts())
def test_index_longer_than_batch_dims_is_an_index_error(td: TensorDict) -> None:
    idx = (slice(None),) * (td.batch_dims + 1)
    with pytest.raises(IndexError, match="too many indices"):
        td[idx]
    with pytest.raises(IndexError, match="too many indices"):
        td[idx] = 0


@given(tensordicts(), st.sampled_from(["zz", ("a", "zz"), ("zz", "a")]))
def test_missing_keys_are_named(td: TensorDict, key: Any) -> None:
    assume(key not in td)
    with pytest.raises(tensorbox.TensorDictKeyError, match="not found"):
        td[key]
    assert td.get(key) is None
    assert td.get(key, 5) == 5


# ------------------------------------------------------- round trips


@given(tensordicts(nontensor=True))
def test_pickle_round_trip(td: TensorDict) -> None:
    assert_same(pickle.loads(pickle.dumps(td)), td)


@given(tensordicts(nontensor=True))
def test_flatten_keys_round_trip(td: TensorDict) -> None:
    flat = td.flatten_keys(".")
    assert all(isinstance(k, str) for k in flat.keys(include_nested=True))
    back = flat.unflatten_keys(".")
    # Nested levels come back with the parent's batch size (flat keys cannot say more).
    for key, value in leaf_items(td):
        got = back[key]
        assert torch.equal(got, value) if isinstance(value, torch.Tensor) else got == value


@given(tensordicts(nontensor=True))
def test_clone_equals_and_is_independent(td: TensorDict) -> None:
    c = td.clone()
    assert_same(c, td)
    for key, leaf in leaf_items(c):
        if isinstance(leaf, torch.Tensor) and leaf.numel():
            assert leaf.data_ptr() != td[key].data_ptr(), key
    assert (c == td).all()
