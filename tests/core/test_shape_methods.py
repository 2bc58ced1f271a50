"""ShapeMethods (tensorbox/_core/methods/shape.py): the batch-shape ops.

Property tests with torch as the oracle: for random batch and feature shapes, every
leaf of the result equals the torch op applied to that leaf over the batch dims, for
a TensorDict and a tensorclass, and nested containers with a longer batch size and
per-row non-tensor values move with the rows (checked through a row-number oracle).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from tensorbox import TensorClass, TensorDict

FEATS = st.lists(st.integers(1, 2), max_size=2).map(tuple)
BATCH = st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)


class Box(TensorClass):
    a: Tensor
    n: TensorDict
    s: str


def _rows(bs: tuple[int, ...]) -> Tensor:
    return torch.arange(math.prod(bs)).reshape(bs)


def make(kind: str, bs: tuple[int, ...], feat: tuple[int, ...]) -> Any:
    """A container whose ``s`` holds one string per row, ``"r<row number>"``."""
    g = torch.Generator().manual_seed(len(bs) * 10 + len(feat))
    a = torch.rand(*bs, *feat, generator=g)
    # the nested container has one more batch dim than its parent
    n = TensorDict(c=torch.rand(*bs, 2, 3, generator=g), batch_size=[*bs, 2])
    obj: Any = (
        TensorDict(a=a, n=n, s="", batch_size=bs)
        if kind == "td"
        else Box(a=a, n=n, s="", batch_size=bs)
    )
    for i, pos in enumerate(
        torch.cartesian_prod(*(torch.arange(b) for b in bs)).reshape(-1, len(bs))
    ):
        obj[tuple(pos.tolist())] = {"s": f"r{i}"}
    return obj


def _labels(rows: Tensor) -> Any:
    return [_labels(r) for r in rows] if rows.ndim else f"r{rows.item()}"


def check(
    obj: Any,
    out: Any,
    oracle: Callable[[Tensor, int], Tensor],
) -> None:
    """``out`` matches ``oracle(leaf, batch_dims)`` on every leaf and on the row labels."""
    assert type(out) is type(obj)
    bd = len(obj.batch_size)
    a = oracle(obj.get("a"), bd)
    torch.testing.assert_close(out.get("a"), a)
    torch.testing.assert_close(out.get(("n", "c")), oracle(obj.get(("n", "c")), bd))
    new_bd = a.ndim - (obj.get("a").ndim - bd)
    assert out.batch_size == a.shape[:new_bd]
    assert out.get("n").batch_size == torch.Size([*a.shape[:new_bd], 2])
    rows = oracle(_rows(tuple(obj.batch_size)), bd)
    got = out["s"]
    if rows.ndim == 0 or len(set(rows.reshape(-1).tolist())) > 1:
        assert got == _labels(rows)


def _norm(d: int, bd: int) -> int:
    return d + bd if d < 0 else d


def _dim(bd: int) -> st.SearchStrategy[int]:
    return st.integers(-bd, bd - 1)


KINDS = ["td", "tc"]


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data(), bs=BATCH, feat=FEATS)
def test_swapaxes_movedim(kind: str, data: Any, bs: tuple[int, ...], feat: Any) -> None:
    obj = make(kind, bs, feat)
    bd = len(bs)
    a, b = data.draw(_dim(bd)), data.draw(_dim(bd))
    check(obj, obj.swapaxes(a, b), lambda t, _: t.swapaxes(_norm(a, bd), _norm(b, bd)))
    check(obj, torch.swapdims(obj, a, b), lambda t, _: t.swapdims(_norm(a, bd), _norm(b, bd)))
    k = data.draw(st.integers(1, bd))
    src = data.draw(st.permutations(range(-bd, 0)).map(lambda p: p[:k]))
    dst = data.draw(st.permutations(range(bd)).map(lambda p: p[:k]))
    ns = [_norm(s, bd) for s in src]
    check(obj, obj.movedim(src, dst), lambda t, _: torch.movedim(t, ns, dst))
    check(obj, torch.moveaxis(obj, src[0], dst[0]), lambda t, _: torch.moveaxis(t, ns[0], dst[0]))


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data(), bs=BATCH, feat=FEATS)
def test_flips_and_rot90(kind: str, data: Any, bs: tuple[int, ...], feat: Any) -> None:
    obj = make(kind, bs, feat)
    bd = len(bs)
    check(obj, obj.flipud(), lambda t, _: torch.flipud(t))
    dims = data.draw(st.lists(_dim(bd), min_size=1, max_size=bd, unique_by=lambda d: d % bd))
    check(obj, obj.flip(dims), lambda t, _: t.flip([_norm(d, bd) for d in dims]))
    shifts = data.draw(st.lists(st.integers(-4, 4), min_size=len(dims), max_size=len(dims)))
    pos = [_norm(d, bd) for d in dims]
    check(obj, obj.roll(shifts, dims), lambda t, _: t.roll(shifts, pos))
    check(obj, obj.roll(shifts[0], dims[0]), lambda t, _: t.roll(shifts[0], pos[0]))
    if bd >= 2:
        check(obj, obj.fliplr(), lambda t, _: torch.fliplr(t))
        k = data.draw(st.integers(-5, 5))
        plane = data.draw(st.permutations(range(-bd, 0)).map(lambda p: p[:2]))
        pos = [_norm(d, bd) for d in plane]
        check(obj, obj.rot90(k, plane), lambda t, _: torch.rot90(t, k, pos))
        check(obj, torch.rot90(obj, k, plane), lambda t, _: torch.rot90(t, k, pos))


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data(), bs=BATCH, feat=FEATS)
def test_tile_repeat_broadcast(kind: str, data: Any, bs: tuple[int, ...], feat: Any) -> None:
    obj = make(kind, bs, feat)
    bd = len(bs)
    reps = tuple(data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=bd + 1)))
    padded = (1,) * (bd - len(reps)) + reps

    def tiled(t: Tensor, bd: int) -> Tensor:
        return torch.tile(t, padded + (1,) * (t.ndim - bd))

    check(obj, obj.tile(reps), tiled)
    check(obj, torch.tile(obj, reps), tiled)
    if len(reps) == bd:
        check(obj, obj.repeat(*reps), tiled)
    lead = tuple(data.draw(st.lists(st.integers(1, 2), max_size=2)))
    shape = lead + tuple(data.draw(st.sampled_from([s, 1 if s == 1 else s])) for s in bs)
    out = obj.broadcast_to(shape)
    check(obj, out, lambda t, bd: torch.broadcast_to(t, shape + t.shape[bd:]))


@pytest.mark.parametrize("kind", KINDS)
@given(bs=st.lists(st.integers(1, 3), max_size=4).map(tuple), feat=FEATS)
def test_atleast(kind: str, bs: tuple[int, ...], feat: Any) -> None:
    if not bs:  # make() needs a batch dim for its per-row labels
        obj = TensorDict(a=torch.zeros(feat), batch_size=[])
        assert obj.atleast_1d().batch_size == (1,) and obj.atleast_3d().batch_size == (1, 1, 1)
        return
    obj = make(kind, bs, feat)
    for n, fn in ((1, torch.atleast_1d), (2, torch.atleast_2d), (3, torch.atleast_3d)):
        out = fn(obj)
        if len(bs) >= n:
            assert out is obj
        else:  # new batch dims lead (tensordict's rule, also torch's for 1d and 2d)
            check(obj, out, lambda t, bd, n=n: t.reshape((1,) * (n - bd) + t.shape))


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data(), bs=BATCH, feat=FEATS)
def test_repeat_interleave(kind: str, data: Any, bs: tuple[int, ...], feat: Any) -> None:
    obj = make(kind, bs, feat)
    bd = len(bs)
    r = data.draw(st.integers(0, 3))
    d = data.draw(_dim(bd))
    check(obj, obj.repeat_interleave(r, d), lambda t, _: t.repeat_interleave(r, _norm(d, bd)))
    per = torch.tensor(data.draw(st.lists(st.integers(0, 3), min_size=bs[d], max_size=bs[d])))
    check(
        obj,
        torch.repeat_interleave(obj, per, dim=d),
        lambda t, _: t.repeat_interleave(per, _norm(d, bd)),
    )

    def flat(t: Tensor, bd: int) -> Tensor:
        return t.reshape(-1, *t.shape[bd:]).repeat_interleave(r, 0)

    check(obj, obj.repeat_interleave(r), flat)


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data(), bs=BATCH, feat=FEATS)
def test_tensor_split(kind: str, data: Any, bs: tuple[int, ...], feat: Any) -> None:
    obj = make(kind, bs, feat)
    bd = len(bs)
    d = data.draw(_dim(bd))
    arg = data.draw(
        st.integers(1, 4)
        | st.lists(st.integers(-4, 4), max_size=3)
        | st.lists(st.integers(0, 4), max_size=3).map(lambda v: torch.tensor(v, dtype=torch.long))
    )
    parts = obj.tensor_split(arg, d)
    for i, part in enumerate(parts):
        check(obj, part, lambda t, _, i=i: torch.tensor_split(t, arg, _norm(d, bd))[i])
    assert len(parts) == len(torch.tensor_split(_rows(bs), arg, _norm(d, bd)))
    assert torch.tensor_split(obj, arg, dim=d)[0].batch_size == parts[0].batch_size


@pytest.mark.parametrize("kind", KINDS)
def test_gather_and_ndimension(kind: str) -> None:
    obj = make(kind, (3, 2), (4,))
    idx = torch.tensor([[2, 0], [1, 1]])
    check(
        obj,
        obj.gather(0, idx),
        lambda t, bd: torch.gather(
            t, 0, idx.reshape(*idx.shape, *(1,) * (t.ndim - bd)).expand(*idx.shape, *t.shape[bd:])
        ),
    )
    assert obj.ndimension() == 2 and obj.names is None
    obj.names = None
    with pytest.raises(TypeError, match=r"cannot set names=\['x', 'y'\]: tensorbox has no named"):
        obj.names = ["x", "y"]


def test_views_and_copies() -> None:
    td = TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3])
    td.movedim(0, 1)["a"][0, 0] = 1.0  # movedim, swapaxes, broadcast_to: views as in torch
    td.swapaxes(0, 1)["a"][1, 0] += 1.0
    assert td["a"][0, 0] == 1.0 and td["a"][0, 1] == 1.0
    assert td.broadcast_to((4, 2, 3))["a"].data_ptr() == td["a"].data_ptr()
    for out in (td.tile((1, 1)), td.rot90(4), td.repeat(1, 1)):  # always copies
        out["a"].fill_(7.0)
    assert td["a"].max() == 1.0


def test_a_field_may_be_called_names() -> None:
    class Tagged(TensorClass):
        x: Tensor
        names: list

    t = Tagged(torch.zeros(2), ["a", "b"], batch_size=[2])
    assert t.names == ["a", "b"] and t.ndimension() == 1


@pytest.mark.parametrize("kind", KINDS)
def test_errors_say_what_was_wrong(kind: str) -> None:
    obj = make(kind, (2, 3), (4,))
    with pytest.raises(IndexError, match=r"swapaxes: dim 2 is out of range for 2 batch dim"):
        obj.swapaxes(0, 2)
    with pytest.raises(IndexError, match=r"movedim: dim -3 is out of range .*\[-2, 1\]"):
        obj.movedim(-3, 0)
    with pytest.raises(RuntimeError, match=r"movedim: repeated dim in source \(0, -2\)"):
        obj.movedim((0, -2), (0, 1))
    with pytest.raises(RuntimeError, match="movedim: repeated dim in destination"):
        obj.movedim((0, 1), (1, 1))
    with pytest.raises(ValueError, match="must have the same number of elements, got 1 and 2"):
        obj.movedim((0,), (0, 1))
    with pytest.raises(TypeError, match="movedim: dim '0' is a str, expected an int"):
        obj.movedim("0", 1)
    with pytest.raises(RuntimeError, match=r"rot90 requires at least 2 batch dims.*\(2,\)"):
        obj[:, 0].rot90()
    with pytest.raises(RuntimeError, match=r"rot90: dims must name exactly 2 batch dims"):
        obj.rot90(1, (0,))
    with pytest.raises(RuntimeError, match=r"rot90: repeated dim in dims \(0, -2\)"):
        obj.rot90(1, (0, -2))
    with pytest.raises(RuntimeError, match=r"fliplr requires at least 2 batch dims"):
        obj[0].fliplr()
    with pytest.raises(RuntimeError, match=r"flipud requires at least 1 batch dim"):
        obj[0, 0].flipud()
    with pytest.raises(ValueError, match=r"tile: dims must be non-negative ints, got \(2, -1\)"):
        obj.tile((2, -1))
    with pytest.raises(ValueError, match=r"repeat_interleave: repeats must be non-negative"):
        obj.repeat_interleave(-1, 0)
    with pytest.raises(ValueError, match=r"repeats of shape \(3,\) must be a single count or"):
        obj.repeat_interleave(torch.tensor([1, 2, 3]), 0)
    with pytest.raises(ValueError, match=r"repeat_interleave: repeats must be >= 0"):
        obj.repeat_interleave(torch.tensor([1, -2]), 0)
    with pytest.raises(TypeError, match=r"repeats must hold ints, got dtype torch.float32"):
        obj.repeat_interleave(torch.tensor([1.0, 2.0]), 0)
    with pytest.raises(IndexError, match="repeat_interleave: dim 2 is out of range"):
        obj.repeat_interleave(2, 2)
    with pytest.raises(ValueError, match=r"tensor_split needs at least 1 batch dim"):
        obj[0, 0].tensor_split(2)
    with pytest.raises(ValueError, match=r"tensor_split: number of sections must be > 0, got 0"):
        obj.tensor_split(0)
    with pytest.raises(TypeError, match=r"indices_or_sections must be an int, a sequence.*2\.5"):
        obj.tensor_split(2.5)
    with pytest.raises(TypeError, match=r"a 0-d or 1-d int tensor, got dtype torch.float32"):
        obj.tensor_split(torch.tensor([1.0]))
    with pytest.raises(ValueError, match=r"roll: got 2 shifts for 1 dims"):
        obj.roll((1, 2), 0)
    with pytest.raises(ValueError, match=r"gather: index of shape \(2, 4\) is larger than"):
        obj.gather(0, torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("kind", KINDS)
def test_expand_as(kind: str) -> None:
    obj = make(kind, (3,), (1,))
    target = TensorDict(a=torch.zeros(2, 3, 4), batch_size=[2, 3])
    out = TensorDict(a=obj.get("a"), batch_size=[3]).expand_as(target)
    torch.testing.assert_close(out["a"], obj.get("a").expand(2, 3, 4))
    assert out.batch_size == (2, 3)
    check(obj, obj.expand_as(torch.zeros(2, 3)), lambda t, bd: t.expand(2, *t.shape))


def test_data_ptr_of_storage() -> None:
    td = TensorDict(a=torch.arange(6.0), batch_size=[6])
    part = td[2:]
    assert part.data_ptr()["a"].item() == td["a"].data_ptr() + 2 * 4
    assert part.data_ptr(storage=True)["a"].item() == td["a"].data_ptr()


@pytest.mark.parametrize("how", ["expand", "reshape", "view"])
def test_a_zero_dim_batch_to_the_empty_shape(how: str) -> None:
    """``td.expand(torch.Size([]))`` of 0-d leaves was a TypeError from torch ("expand()
    missing 1 required positional arguments"): an empty argument list; tensordict works."""
    td = TensorDict({"a": torch.tensor(1.0), "b": {"c": torch.ones(2)}}, [])
    out = getattr(td, how)(torch.Size([]))
    assert out.batch_size == torch.Size([])
    assert torch.equal(out["a"], td["a"]) and torch.equal(out["b", "c"], td["b", "c"])
