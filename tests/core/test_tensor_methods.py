"""The container's tensor-like methods (tensorbox/_core/methods/: casts in leaves.py, math in
math.py, batch-dim repeat/flip/roll/gather in shape.py, mapping helpers in keys.py): each op
against torch on every leaf."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from tensorbox import TensorDict, tensorclass
from tensorbox.errors import LockedError


@tensorclass
class _Pair:
    x: Tensor
    y: Tensor


def _td() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        a=torch.rand(2, 3, 4, generator=g) + 0.5,
        b=TensorDict(c=torch.rand(2, 3, generator=g) + 0.5, batch_size=[2, 3]),
        batch_size=[2, 3],
    )


def _tc() -> _Pair:
    g = torch.Generator().manual_seed(1)
    return _Pair(
        torch.rand(2, 3, 4, generator=g) + 0.5,
        torch.rand(2, 3, generator=g) + 0.5,
        batch_size=[2, 3],
    )


MAKERS = [_td, _tc]
KEYS = {"_td": ["a", ("b", "c")], "_tc": ["x", "y"]}


def _check(
    make: Callable[[], Any], op: Callable[[Any], Any], oracle: Callable[[Tensor], Tensor]
) -> Any:
    obj = make()
    out = op(obj)
    assert type(out) is type(obj)
    for k in KEYS[make.__name__]:
        torch.testing.assert_close(out.get(k), oracle(obj.get(k)), equal_nan=True)
    return out


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("float", torch.float32),
        ("double", torch.float64),
        ("half", torch.float16),
        ("bfloat16", torch.bfloat16),
        ("int", torch.int32),
        ("long", torch.int64),
        ("bool", torch.bool),
    ],
)
def test_casts(make: Any, name: str, dtype: torch.dtype) -> None:
    _check(make, lambda o: getattr(o, name)(), lambda t: t.to(dtype))


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize(
    ("op", "oracle"),
    [
        (lambda o: o.abs(), torch.abs),
        (lambda o: o.exp(), torch.exp),
        (lambda o: o.log(), torch.log),
        (lambda o: o.sqrt(), torch.sqrt),
        (lambda o: o.sigmoid(), torch.sigmoid),
        (lambda o: o.clamp(0.7, 1.2), lambda t: t.clamp(0.7, 1.2)),
        (lambda o: o**2, lambda t: t**2),
        (lambda o: o < 1, lambda t: t < 1),
        (lambda o: o <= 1, lambda t: t <= 1),
        (lambda o: o > 1, lambda t: t > 1),
        (lambda o: o >= 1, lambda t: t >= 1),
        (lambda o: o < 1, lambda t: t < 1),
        (lambda o: 3 - o, lambda t: 3 - t),
        (lambda o: 3 / o, lambda t: 3 / t),
        (lambda o: o**o, lambda t: t**t),
        (lambda o: o < o * 2, lambda t: t < t * 2),
        (lambda o: torch.zeros_like(o), torch.zeros_like),
        (
            lambda o: torch.ones_like(o, dtype=torch.int64),
            lambda t: torch.ones_like(t, dtype=torch.int64),
        ),
        (lambda o: torch.full_like(o, 7.0), lambda t: torch.full_like(t, 7.0)),
        (lambda o: torch.empty_like(o).zero_(), torch.zeros_like),
    ],
)
def test_elementwise(make: Any, op: Any, oracle: Any) -> None:
    _check(make, op, oracle)


MASK = torch.tensor([[True, False, True], [False, False, True]])


def _lead(m: Tensor, t: Tensor) -> Tensor:
    return m.reshape(*m.shape, *(1,) * (t.ndim - m.ndim)).expand(t.shape)


@pytest.mark.parametrize("make", MAKERS)
def test_masked_fill_and_where(make: Any) -> None:
    _check(make, lambda o: o.masked_fill(MASK, 0.0), lambda t: t.masked_fill(_lead(MASK, t), 0.0))
    _check(
        make,
        lambda o: o.masked_fill(MASK[:1].expand(2, 3)[:, 0], -1.0),
        lambda t: t.masked_fill(_lead(MASK[:1].expand(2, 3)[:, 0], t), -1.0),
    )
    _check(make, lambda o: o.where(MASK, 0.0), lambda t: torch.where(_lead(MASK, t), t, 0.0))
    _check(make, lambda o: torch.where(MASK, o, -o), lambda t: torch.where(_lead(MASK, t), t, -t))
    _check(make, lambda o: torch.where(MASK, 5.0, o), lambda t: torch.where(_lead(MASK, t), 5.0, t))
    obj = make()
    ref = obj.clone()
    assert obj.masked_fill_(MASK, 0.0) is obj
    for k in KEYS[make.__name__]:
        torch.testing.assert_close(obj.get(k), ref.get(k).masked_fill(_lead(MASK, ref.get(k)), 0.0))


@pytest.mark.parametrize("make", MAKERS)
def test_mask_shape_mismatch_names_the_key(make: Any) -> None:
    key = KEYS[make.__name__][0]
    with pytest.raises(ValueError, match=rf"masked_fill: mask of shape \(3,\).*key '?{key}'?"):
        make().masked_fill(torch.ones(3, dtype=torch.bool), 0.0)
    with pytest.raises(ValueError, match="where: mask of shape"):
        make().where(torch.ones(3, 2, dtype=torch.bool), 0.0)


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("name", ["sum", "mean", "std", "var", "amax", "amin"])
def test_reductions(make: Any, name: str) -> None:
    fn = getattr(torch, name)
    out = _check(make, lambda o: getattr(o, name)(), fn)
    assert out.batch_size == torch.Size([])
    out = _check(make, lambda o: getattr(o, name)(0), lambda t: fn(t, dim=0))
    assert out.batch_size == torch.Size([3])
    out = _check(
        make, lambda o: getattr(o, name)(-1, keepdim=True), lambda t: fn(t, dim=1, keepdim=True)
    )
    assert out.batch_size == torch.Size([2, 1])
    out = _check(make, lambda o: getattr(o, name)((0, 1)), lambda t: fn(t, dim=(0, 1)))
    assert out.batch_size == torch.Size([])
    with pytest.raises(IndexError, match=f"{name}: dim 2 is out of range"):
        getattr(make(), name)(2)


@pytest.mark.parametrize("make", MAKERS)
def test_shape_ops(make: Any) -> None:
    out = _check(make, lambda o: o.repeat(2, 1), lambda t: t.repeat(2, 1, *(1,) * (t.ndim - 2)))
    assert out.batch_size == torch.Size([4, 3])
    _check(make, lambda o: o.repeat((1, 2)), lambda t: t.repeat(1, 2, *(1,) * (t.ndim - 2)))
    _check(make, lambda o: o.flip(0), lambda t: t.flip(0))
    _check(make, lambda o: torch.flip(o, (0, -1)), lambda t: t.flip(0, 1))
    _check(make, lambda o: o.roll(1, 1), lambda t: t.roll(1, 1))
    _check(make, lambda o: torch.roll(o, (1, 2), (0, 1)), lambda t: t.roll((1, 2), (0, 1)))
    idx = torch.tensor([[2, 0], [1, 1]])
    out = _check(
        make,
        lambda o: torch.gather(o, 1, idx),
        lambda t: torch.gather(t, 1, _lead(idx, t[:, :2]).contiguous()),
    )
    assert out.batch_size == torch.Size([2, 2])
    with pytest.raises(ValueError, match="repeat: got 1 counts"):
        make().repeat(2)
    with pytest.raises(IndexError, match="flip: dim 2 is out of range"):
        make().flip(2)
    with pytest.raises(ValueError, match=r"gather: index\.ndim is 1, expected 2"):
        make().gather(0, torch.tensor([0]))


def test_empty_and_mapping_helpers() -> None:
    td = _td()
    td.set("n", "text")
    e = td.empty()
    assert e.batch_size == td.batch_size and list(e.keys()) == []
    assert td.sorted_keys == ["a", "b", "n"]
    assert td.get_item_shape("a") == torch.Size([2, 3, 4])
    assert td.get_item_shape("b") == torch.Size([2, 3])
    assert td.entry_class("a") is Tensor and td.entry_class("b") is TensorDict
    with pytest.raises(KeyError, match="key 'zz' not found"):
        td.get_item_shape("zz")
    assert list(td.filter_non_tensor_data().keys()) == ["a", "b"]
    new = torch.zeros(2, 3)
    assert td.setdefault("z", new) is new and td.setdefault("z", torch.ones(2, 3)) is new
    f = TensorDict.fromkeys(["x", "y"], 3)
    assert f.batch_size == torch.Size([]) and f["x"].item() == 3
    sel, rest = td.split_keys(["a"])
    assert list(sel.keys()) == ["a"] and sorted(rest.keys()) == ["b", "n", "z"]
    ptr = td.data_ptr()
    assert ptr["a"].item() == td["a"].data_ptr() and ptr["b", "c"].item() == td["b", "c"].data_ptr()
    arrays = td.numpy()
    assert (arrays["b"]["c"] == td["b", "c"].numpy()).all() and arrays["n"] == "text"
    rows = td.tolist()
    assert len(rows) == 2 and len(rows[0]) == 3
    assert torch.equal(rows[1][2]["a"], td["a"][1, 2]) and rows[0][0]["n"] == "text"
    assert td[0, 0].tolist(convert_tensors=True)["b"]["c"] == td["b", "c"][0, 0].item()
    stacked = TensorDict.maybe_dense_stack([td, td], 1)
    assert stacked.batch_size == torch.Size([2, 2, 3])
    auto = TensorDict({"a": torch.zeros(2, 3, 4), "b": {"c": torch.zeros(2, 3)}})
    assert auto.auto_batch_size_() is auto and auto.batch_size == torch.Size([2, 3])
    assert TensorDict({"a": torch.zeros(2, 3)}).auto_batch_size_(1).batch_size == torch.Size([2])


def test_tensorclass_helpers() -> None:
    tc = _tc()
    assert type(tc.empty()) is _Pair and tc.empty().batch_size == tc.batch_size
    assert tc.sorted_keys == ["x", "y"] and tc.entry_class("x") is Tensor
    assert tc.get_item_shape("y") == torch.Size([2, 3])
    ptr = tc.data_ptr()
    assert type(ptr) is _Pair and ptr.x.item() == tc.x.data_ptr()
    assert (tc.numpy()["x"] == tc.x.numpy()).all()
    assert torch.equal(tc.tolist()[1][0]["y"], tc.y[1, 0])
    x_only, rest = tc.split_keys(["x"])
    assert type(x_only) is _Pair and list(x_only.keys()) == ["x"]
    assert torch.equal(rest.y, tc.y)
    assert _Pair.fromkeys(["x", "y"], 1).x.item() == 1
    bare = _Pair(torch.zeros(2, 5), torch.zeros(2))
    assert bare.auto_batch_size_().batch_size == torch.Size([2])
    assert _Pair.maybe_dense_stack([tc, tc]).batch_size == torch.Size([2, 2, 3])


def test_split_keys_options() -> None:
    td = TensorDict(
        a=torch.zeros(2), b={"c": torch.ones(2), "d": torch.ones(2)}, e="text", batch_size=[2]
    )
    with pytest.raises(KeyError, match=r"split_keys: key 'zz' not found \(pass strict=False"):
        td.split_keys(["a", "zz"])
    part, rest = td.split_keys(["a", "zz"], strict=False)
    assert list(part.keys()) == ["a"] and sorted(rest.keys()) == ["b", "e"]
    part, _ = td.split_keys(["zz"], strict=False, default=torch.full((2,), 3.0))
    assert part["zz"].tolist() == [3.0, 3.0]
    renamed, rest = td.split_keys({("b", "c"): "c", "e": ("x", "e")})
    assert list(renamed.keys(True)) == ["c", "x", ("x", "e")] and renamed["x", "e"] == "text"
    assert list(rest.keys(True, True)) == ["a", ("b", "d")]
    p1, p2, rest = td.split_keys([("b", "c")], [("b", "d")], inplace=True)
    assert rest is td and sorted(td.keys()) == ["a", "e"]  # "b", emptied, is dropped
    assert p1["b", "c"].sum() == 2 and p2["b", "d"].sum() == 2
    with pytest.raises(LockedError):
        td.lock_().split_keys(["a"], inplace=True)
    tc = _tc()
    x_only, rest = tc.split_keys(["x"], inplace=True)
    assert rest is tc and list(tc.keys()) == ["y"] and torch.equal(x_only.x, _tc().x)


@pytest.mark.parametrize("make", MAKERS)
def test_masked_select(make: Any) -> None:
    out = _check(make, lambda o: torch.masked_select(o, MASK), lambda t: t[MASK])
    assert out.batch_size == torch.Size([3])
    _check(make, lambda o: o.masked_select(MASK), lambda t: t[MASK])
    with pytest.raises(ValueError, match=r"masked_select: mask must be a bool tensor shaped like"):
        make().masked_select(MASK[0])
    with pytest.raises(ValueError, match=r"got dtype torch.int64 and shape \(2, 3\)"):
        make().masked_select(MASK.long())
