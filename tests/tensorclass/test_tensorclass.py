"""Tests of @tensorclass / TensorClass: construction, fields, refusals, container ops."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import weakref
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from tensorbox import (
    BatchSizeError,
    LockedError,
    NonTensorData,
    TensorClass,
    TensorDict,
    TensorDictKeyError,
    field,
    fields,
    is_tensorclass,
    tensorclass,
)
from tensorbox._core.tree import CLASS_REGISTRY
from tensorbox.errors import FormatError

# ---------------------------------------------------------------- classes


@tensorclass
class Obs:
    pixels: torch.Tensor
    reward: torch.Tensor
    tag: str = "train"

    def mean_pixel(self) -> torch.Tensor:
        return self.pixels.float().mean(dim=tuple(range(self.batch_dims, self.pixels.ndim)))

    @classmethod
    def zeros(cls, n: int) -> Obs:
        return cls(torch.zeros(n, 2, 2), torch.zeros(n), batch_size=[n])

    @staticmethod
    def kind() -> str:
        return "obs"

    @property
    def total(self) -> torch.Tensor:
        return self.reward.sum()


class Step(TensorClass):
    obs: Obs
    action: torch.Tensor
    extra: Optional[TensorDict] = None  # noqa: UP045 - the spelling users write
    info: dict = field(default_factory=dict)


def make_obs(n: int = 4, tag: str = "train") -> Obs:
    return Obs(
        torch.arange(n * 4, dtype=torch.float32).reshape(n, 2, 2),
        torch.arange(n, dtype=torch.float32),
        tag,
        batch_size=[n],
    )


def make_step(n: int = 4) -> Step:
    return Step(make_obs(n), torch.arange(n), batch_size=[n])


# ---------------------------------------------------------------- construction


def test_construct_positional_keyword_and_defaults() -> None:
    o = Obs(torch.zeros(3, 2), torch.ones(3), batch_size=[3])
    assert o.tag == "train" and o.batch_size == torch.Size([3]) and o.device is None
    o2 = Obs(pixels=torch.zeros(3, 2), reward=torch.ones(3), tag="val", batch_size=3)
    assert o2.tag == "val" and o2.batch_size == torch.Size([3])
    assert Obs(torch.zeros(2), torch.zeros(2)).batch_size == torch.Size([])
    o3 = Obs(torch.zeros(2, 1), torch.zeros(2), batch_size=[2], device="cpu")
    assert o3.device == torch.device("cpu") and o3.pixels.device.type == "cpu"


def test_signature_fields_then_keyword_only_batch_size_and_device() -> None:
    sig = inspect.signature(Obs)
    params = list(sig.parameters.values())
    assert [p.name for p in params] == ["pixels", "reward", "tag", "batch_size", "device", "names"]
    assert params[2].default == "train"
    assert params[3].kind is inspect.Parameter.KEYWORD_ONLY
    assert params[4].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError):
        Obs(torch.zeros(2), torch.zeros(2), "x", [2])  # batch_size is keyword-only


def test_default_factory_runs_per_instance() -> None:
    a, b = make_step(), make_step()
    a.info["x"] = 1  # the returned dict is the stored value
    assert b.info == {}
    assert a.extra is None


def test_dataclasses_field_and_kw_only_options() -> None:
    class K(TensorClass, kw_only=True):
        a: torch.Tensor
        b: int = dataclasses.field(default=3)

    sig = inspect.signature(K)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in sig.parameters.values())
    assert K(a=torch.zeros(2), batch_size=[2]).b == 3

    @tensorclass
    class M:
        a: torch.Tensor
        _: dataclasses.KW_ONLY
        b: torch.Tensor
        c: int = field(default=1, init=False)
        d: str = field(default="d", kw_only=False)

    names = {p.name: p.kind for p in inspect.signature(M).parameters.values()}
    assert names["b"] is inspect.Parameter.KEYWORD_ONLY and "c" not in names
    m = M(torch.zeros(1), "dd", b=torch.ones(1))
    assert m.c == 1 and m.d == "dd"
    assert [f.name for f in fields(M)] == ["a", "b", "c", "d"]


def test_classvar_and_annotation_objects() -> None:
    class C(TensorClass):
        scale: ClassVar[float] = 2.0
        x: torch.Tensor

    assert [f.name for f in fields(C)] == ["x"] and C.scale == 2.0
    # tensordict's __expected_keys__: the fields, not the ClassVars
    assert C(x=torch.zeros(1)).__expected_keys__ == {"x"} == C.__expected_keys__
    # Annotations as objects (no ``from __future__ import annotations`` in the user's module).
    ns = {
        "__annotations__": {"scale": ClassVar[int], "_": dataclasses.KW_ONLY, "x": torch.Tensor},
        "scale": 3,
    }
    R = type("R", (TensorClass,), ns)
    (param,) = [p for p in inspect.signature(R).parameters.values() if p.name == "x"]
    assert [f.name for f in fields(R)] == ["x"] and param.kind is inspect.Parameter.KEYWORD_ONLY
    assert R(x=torch.zeros(1)).scale == 3


def test_field_named_self_and_generic_class() -> None:
    S = type("S", (TensorClass,), {"__annotations__": {"self": torch.Tensor}})
    assert S(self=torch.ones(1)).self.item() == 1.0
    from typing import Generic, TypeVar

    T = TypeVar("T")

    class Box(TensorClass, Generic[T]):
        x: torch.Tensor
        payload: T

    b = Box[str](torch.zeros(2), "p", batch_size=[2])
    assert b.payload == "p" and type(b[0]) is Box


def test_value_conversions() -> None:
    class V(TensorClass):
        arr: torch.Tensor
        meta: dict
        nested: TensorDict
        names: list
        none: Optional[str] = None  # noqa: UP045

    v = V(np.ones((2, 3)), {"a": 1}, {"t": torch.zeros(2)}, [1, 2], batch_size=[2])
    assert isinstance(v.arr, torch.Tensor) and v.arr.shape == (2, 3)
    assert v.meta == {"a": 1} and type(v._tensordict["meta"]) is NonTensorData
    assert isinstance(v.nested, TensorDict) and v.nested.batch_size == torch.Size([2])
    assert v.names == [1, 2] and v.none is None


def test_nested_tensorclass_and_optional_none() -> None:
    s = make_step()
    assert isinstance(s.obs, Obs) and s.extra is None
    s.extra = TensorDict(z=torch.zeros(4), batch_size=[4])
    assert s[1].extra["z"].shape == ()
    assert s[1].obs.tag == "train" and type(s[1].obs) is Obs


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("name", ["apply", "to", "batch_size", "keys", "device", "shape", "clone"])
def test_field_clashing_with_a_container_member_is_refused(name: str) -> None:
    with pytest.raises(TypeError, match=rf"field '{name}' clashes with the \w+ TensorClass.{name}"):
        type("Bad", (TensorClass,), {"__annotations__": {name: torch.Tensor}})
    with pytest.raises(TypeError, match=rf"field '{name}' clashes"):
        tensorclass(type("Bad", (), {"__annotations__": {name: torch.Tensor}}))


def test_storage_and_dunder_names_are_refused() -> None:
    with pytest.raises(TypeError, match="'_tensordict' clashes with the storage slot"):
        type("Bad", (TensorClass,), {"__annotations__": {"_tensordict": int}})
    with pytest.raises(TypeError, match=r"cannot be named '__x__'"):
        type("Bad", (TensorClass,), {"__annotations__": {"__x__": int}})


@pytest.mark.parametrize("default", [[], {}, np.zeros(2)])
def test_mutable_default_is_refused(default: object) -> None:
    with pytest.raises(ValueError, match=r"Bad.x: a \w+ default would be shared.*default_factory"):
        type("Bad", (TensorClass,), {"__annotations__": {"x": object}, "x": default})


def test_required_after_default_is_refused() -> None:
    with pytest.raises(TypeError, match="field 'b' has no default but comes after 'a'"):

        class Bad(TensorClass):
            a: int = 1
            b: torch.Tensor


def test_init_false_without_default_and_both_defaults_are_refused() -> None:
    with pytest.raises(TypeError, match="field 'a' has init=False and no default"):

        class Bad(TensorClass):
            a: torch.Tensor = field(init=False)

    with pytest.raises(ValueError, match="default or default_factory, not both"):
        field(default=1, default_factory=int)


def test_user_init_initvar_and_method_clash_are_refused() -> None:
    with pytest.raises(TypeError, match="defines __init__; a tensorclass generates it"):

        @tensorclass
        class A:
            x: torch.Tensor

            def __init__(self) -> None:
                pass

    with pytest.raises(TypeError, match="InitVar fields are not supported"):

        class B(TensorClass):
            x: dataclasses.InitVar[int]

    with pytest.raises(
        TypeError, match="'x' is annotated as a field but also defined as a function"
    ):
        type("C", (TensorClass,), {"__annotations__": {"x": int}, "x": lambda self: 1})


def test_decorator_refuses_non_class_and_base_is_abstract() -> None:
    with pytest.raises(TypeError, match="@tensorclass decorates a class"):
        tensorclass(lambda: 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="already a dataclass: remove @dataclass"):

        @tensorclass
        @dataclasses.dataclass
        class D:
            x: torch.Tensor

    with pytest.raises(TypeError, match="TensorClass is a base class"):
        TensorClass()


def test_shape_mismatch_names_field_and_both_shapes() -> None:
    tail = r"does not start with the batch_size \(4,\)"
    with pytest.raises(BatchSizeError, match=rf"Obs.reward: shape \(5,\) {tail}"):
        Obs(torch.zeros(4, 2), torch.zeros(5), batch_size=[4])
    with pytest.raises(BatchSizeError, match=rf"Obs.pixels: shape \(3, 2, 2\) {tail}"):
        make_obs().pixels = torch.zeros(3, 2, 2)
    with pytest.raises(BatchSizeError, match=rf"Step.obs: Obs batch_size \(3,\) {tail}"):
        Step(make_obs(3), torch.zeros(4), batch_size=[4])


def test_unknown_attribute_and_item_are_refused() -> None:
    o = make_obs()
    fields_list = r"\['pixels', 'reward', 'tag'\]"
    with pytest.raises(
        AttributeError, match=rf"Obs has no field 'pixel'; its fields are {fields_list}"
    ):
        o.pixel = torch.zeros(4)
    with pytest.raises(TensorDictKeyError, match="Obs has no field 'nope'"):
        o["nope"] = torch.zeros(4)
    with pytest.raises(AttributeError, match="cannot delete field 'tag' of Obs"):
        del o.tag


def test_frozen() -> None:
    @tensorclass(frozen=True)
    class F:
        x: torch.Tensor
        n: int = 0

        def __post_init__(self) -> None:
            object.__setattr__(self, "n", int(self.x.numel()))  # the dataclass idiom works

    f = F(torch.zeros(3), batch_size=[3])
    assert f.n == 3
    with pytest.raises(
        dataclasses.FrozenInstanceError, match="cannot assign to field 'x' of frozen F"
    ):
        f.x = torch.ones(3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f["n"] = 1
    assert f.replace(x=torch.ones(2), batch_size=[2]).n == 2
    f[0] = F(torch.tensor(5.0))  # rows stay writable in place
    assert f.x[0] == 5

    class Sub(F):  # inherited
        y: int = 1

    with pytest.raises(dataclasses.FrozenInstanceError):
        Sub(torch.zeros(1)).y = 2


def test_locked_instance_refuses_field_replacement() -> None:
    o = make_obs().lock_()
    assert o.is_locked
    with pytest.raises(LockedError, match="locked"):
        o.reward = torch.ones(4)
    o.reward[:] = 1  # in-place writes stay allowed
    assert o.unlock_().reward.sum() == 4


# ---------------------------------------------------------------- methods, post_init


def test_user_methods_kept() -> None:
    o = make_obs()
    assert o.mean_pixel().shape == (4,)
    assert Obs.zeros(2).batch_size == torch.Size([2])
    assert Obs.kind() == "obs" and o.total == 6


def test_zero_arg_super_and_mixin_in_decorated_class() -> None:
    class Mixin:
        def describe(self) -> str:
            return "mixin"

    @tensorclass
    class W(Mixin):
        x: torch.Tensor

        def describe(self) -> str:
            return "w+" + super().describe()

        @property
        def double(self) -> torch.Tensor:
            return self.x * 2

        @double.setter
        def double(self, value: torch.Tensor) -> None:
            self.x = value / 2

    w = W(torch.ones(2), batch_size=[2])
    assert w.describe() == "w+mixin" and isinstance(w, Mixin) and is_tensorclass(w)
    w.double = torch.full((2,), 8.0)
    assert w.x.tolist() == [4.0, 4.0]


_CALLS: list[int] = []


@tensorclass
class Counted:
    x: torch.Tensor

    def __post_init__(self) -> None:
        _CALLS.append(1)


def test_post_init_runs_once_per_user_construction() -> None:
    calls = _CALLS
    calls.clear()
    P = Counted
    p = P(torch.zeros(4, 2), batch_size=[4])
    assert len(calls) == 1
    p[0], p[1:], p[torch.tensor([0, 1])], p.apply(lambda t: t + 1), p.clone(), p.to(torch.float64)
    torch.stack([p, p]), torch.cat([p, p]), p.unbind(0), p.reshape(2, 2), list(p)
    pickle.loads(pickle.dumps(p)), copy.deepcopy(p), tree_map(lambda t: t, p)
    assert len(calls) == 1
    P.from_tensordict(p.to_tensordict())
    p.replace(x=torch.ones(4, 2))
    assert len(calls) == 3
    P.from_tensordict(p.to_tensordict(), run_post_init=False)
    assert len(calls) == 3


# ---------------------------------------------------------------- indexing


def test_indexing_returns_the_class() -> None:
    s = make_step()
    for idx in (
        0,
        -1,
        slice(1, 3),
        torch.tensor([3, 0]),
        [0, 2],
        torch.tensor([1, 0, 1, 0]).bool(),
        ...,
        None,
    ):
        out = s[idx]
        assert type(out) is Step and type(out.obs) is Obs
        assert torch.equal(out.action, s.action[idx])
    assert s["obs", "reward"].shape == (4,) and s["action"].shape == (4,)


def test_index_errors() -> None:
    o = make_obs()
    with pytest.raises(IndexError, match="out of range"):
        o[4]
    with pytest.raises(IndexError, match="too many indices"):
        o[0, 0]
    with pytest.raises(IndexError):
        o[0][0]


def test_setitem_writes_rows_in_place() -> None:
    data = Obs(torch.zeros(6, 2, 2), torch.zeros(6), batch_size=[6])
    data[2:4] = make_obs(2)
    assert data.reward.tolist() == [0, 0, 0, 1, 0, 0]
    data[5] = Obs(torch.ones(2, 2), torch.tensor(7.0))
    assert data.reward[5] == 7 and data.pixels[5].sum() == 4
    data[torch.tensor([True, False, False, False, False, False])] = make_obs(1)
    assert data.pixels[0].tolist() == [[0, 1], [2, 3]]
    data[1:3] = make_obs(2, tag="val")  # a differing non-tensor value becomes per row
    assert data.tag == ["train", "val", "val", "train", "train", "train"]
    data["reward"] = torch.full((6,), 2.0)
    assert data.reward.sum() == 12


@st.composite
def _case(draw: st.DrawFn) -> tuple[torch.Size, object]:
    bs = torch.Size(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    parts = []
    for size in bs[: draw(st.integers(1, len(bs)))]:
        kind = draw(st.sampled_from(["int", "slice", "tensor", "mask", "none"]))
        if kind == "int":
            parts.append(draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            parts.append(
                slice(
                    draw(st.integers(0, size)), draw(st.integers(0, size)), draw(st.integers(1, 2))
                )
            )
        elif kind == "tensor":
            parts.append(
                torch.tensor(draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=5)))
            )
        elif kind == "mask":
            parts.append(torch.tensor(draw(st.lists(st.booleans(), min_size=size, max_size=size))))
        else:
            parts.append(None)
            parts.append(slice(None))
    tensors = sum(isinstance(p, torch.Tensor) for p in parts)
    if tensors > 1:  # several advanced indices must broadcast; keep one
        first = next(i for i, p in enumerate(parts) if isinstance(p, torch.Tensor))
        parts = [
            p if i == first or not isinstance(p, torch.Tensor) else slice(None)
            for i, p in enumerate(parts)
        ]
    index = parts[0] if len(parts) == 1 and draw(st.booleans()) else tuple(parts)
    return bs, index


@settings(max_examples=60, deadline=None)
@given(_case())
def test_indexing_matches_per_field_torch_indexing(case: tuple[torch.Size, object]) -> None:
    bs, index = case
    o = Obs(torch.randn(*bs, 3), torch.randn(*bs), tag="t", batch_size=bs)
    out = o[index]
    assert torch.equal(out.pixels, o.pixels[index])
    assert torch.equal(out.reward, o.reward[index])
    assert out.batch_size == o.reward[index].shape and out.tag == "t"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.data())
def test_stack_unbind_roundtrip(shape: list[int], data: st.DataObject) -> None:
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    o = Obs(torch.randn(*shape, 2), torch.randn(*shape), batch_size=shape)
    parts = o.unbind(dim)
    assert all(type(p) is Obs for p in parts) and len(parts) == shape[dim]
    back = torch.stack(parts, dim)
    assert type(back) is Obs and back.batch_size == o.batch_size
    assert (back == o).all()


# ---------------------------------------------------------------- container ops


def test_stack_and_cat_non_tensor_values() -> None:
    a, b = make_obs(2), make_obs(2, tag="val")
    same = torch.stack([a, a])  # a value per element, as tensordict's NonTensorStack
    assert same.tag == [["train", "train"], ["train", "train"]] and same[0, 1].tag == "train"
    mixed = torch.stack([a, b])
    assert mixed.tag == [["train", "train"], ["val", "val"]] and mixed[1, 0].tag == "val"
    cat = torch.cat([a, b])
    assert cat.tag == ["train", "train", "val", "val"] and cat[2:].tag == ["val", "val"]
    assert torch.cat([a, a]).tag == "train"  # one shared value stays one, as tensordict
    assert torch.stack([a[0], b[0]]).tag == ["train", "val"]
    assert [x.tag for x in cat] == ["train", "train", "val", "val"]


def test_apply_to_clone_and_shape_ops_return_the_class() -> None:
    s = make_step(6)
    assert type(s.apply(lambda t: t * 2)) is Step
    assert s.apply(lambda t: t * 2).obs.reward[1] == 2
    assert s.apply(lambda x, y: x + y, s).action[3] == 6
    half = s.to(torch.float16, floating_only=True)
    assert half.obs.pixels.dtype == torch.float16 and half.action.dtype == torch.int64
    on_cpu = s.to("cpu")
    assert on_cpu.device == torch.device("cpu") and on_cpu.to("cpu") is on_cpu
    c = s.clone()
    c.obs.reward[0] = 100
    assert s.obs.reward[0] == 0
    sh = s.copy()
    sh.obs.reward[0] = 5
    assert s.obs.reward[0] == 5
    m = s.reshape(2, 3)
    outs = [m, s.view(3, 2), s.unsqueeze(0), s.unsqueeze(0).squeeze(0), m.permute(1, 0)]
    outs += [m.transpose(0, 1), s[None].expand(2, 6), m.flatten(), s.unflatten(0, (3, 2))]
    outs += [s.contiguous(), s.detach()]
    shapes = [(2, 3), (3, 2), (1, 6), (6,), (3, 2), (3, 2), (2, 6), (6,), (3, 2), (6,), (6,)]
    for out, bs in zip(outs, shapes, strict=True):
        assert type(out) is Step and out.batch_size == torch.Size(bs), out
        assert type(out.obs) is Obs and out.obs.batch_size[: len(bs)] == torch.Size(bs)
    assert [type(x) for x in s.split(4)] == [Step, Step] and len(s.chunk(3)) == 3
    assert s.numel() == 6 and s.ndim == s.dim() == s.batch_dims == 1 and s.size(0) == 6
    assert s.shape == s.batch_size == s.size() and len(s) == 6


def test_batch_size_setter_and_inplace_ops() -> None:
    o = Obs(torch.zeros(2, 3, 1), torch.zeros(2, 3), batch_size=[2, 3])
    o.batch_size = [2]
    assert o.batch_size == torch.Size([2])
    with pytest.raises(BatchSizeError):
        o.batch_size = [5]
    p = make_obs().clone().requires_grad_()
    assert p.pixels.requires_grad and not p.detach_().pixels.requires_grad
    assert p.zero_().reward.sum() == 0 and p.fill_("reward", 2.0).reward.sum() == 8
    q = make_obs()
    assert q.apply(lambda t: t.mul_(0), inplace=True) is q and q.reward.sum() == 0
    assert q.share_memory_().is_shared()


def test_comparison_math_and_reductions() -> None:
    a, b = make_obs(), make_obs()
    eq = a == b
    assert type(eq) is Obs and eq.reward.dtype == torch.bool and eq.all()
    b.reward[0] = 9
    assert not (a == b).all() and (a != b).any()
    per_row = (a == b).apply(lambda t: t.reshape(4, -1).all(1) if t.ndim > 1 else t)
    assert per_row.reward.tolist() == [False, True, True, True]
    assert (a == b).all(0).batch_size == torch.Size([]) and not (a == b).all(0).reward
    assert (a + a).reward[1] == 2 and (a * 2).reward[1] == 2 and (2 * a).reward[1] == 2
    assert (a - a).reward.sum() == 0 and (a / 1).reward[2] == 2 and (-a).reward[1] == -1
    assert (a + 1).tag == "train"
    m = Obs(torch.ones(2, 1).bool(), torch.zeros(2).bool(), batch_size=[2])
    assert (~m).reward.all() and (m | ~m).all() and not (m & ~m).any()
    assert (a == 1.0).reward.tolist() == [False, True, False, False]
    assert a.__eq__("x") is NotImplemented and (a == "x") is False
    with pytest.raises(RuntimeError, match="truth value of a Obs is ambiguous"):
        bool(a)
    with pytest.raises(TypeError):
        hash(a)


def test_iteration_getitems_and_dataloader() -> None:
    o = make_obs(10)
    assert [int(x.reward) for x in o] == list(range(10))
    batch = o.__getitems__([1, 3])
    assert type(batch) is Obs and batch.reward.tolist() == [1, 3]
    loader = torch.utils.data.DataLoader(o, batch_size=4)  # type: ignore[arg-type]
    batches = list(loader)
    assert [type(b) for b in batches] == [Obs] * 3 and batches[-1].batch_size == torch.Size([2])
    stacked = torch.utils.data.default_collate([o[0], o[1]])
    assert type(stacked) is Obs and stacked.reward.tolist() == [0, 1]


def test_to_from_tensordict_and_dict() -> None:
    s = make_step()
    td = s.to_tensordict()
    assert type(td) is TensorDict and type(td["obs"]) is TensorDict
    assert td["obs", "tag"] == "train" and (td["obs", "pixels"] == s.obs.pixels).all()
    assert td["obs", "pixels"] is not s.obs.pixels  # a copy, as tensordict's
    back = Step.from_tensordict(TensorDict(dict(s.items()), batch_size=s.batch_size))
    assert type(back) is Step and back.obs is s.obs
    o = Obs.from_tensordict(
        TensorDict(pixels=torch.zeros(2, 1), reward=torch.zeros(2), batch_size=[2])
    )
    assert o.tag == "train"  # the default filled in
    with pytest.raises(TensorDictKeyError, match=r"keys \['x'\] are not fields of Obs"):
        Obs.from_tensordict(TensorDict(x=torch.zeros(2), batch_size=[2]))
    with pytest.raises(TensorDictKeyError, match="required field 'reward' is missing"):
        Obs.from_tensordict(TensorDict(pixels=torch.zeros(2), batch_size=[2]))
    with pytest.raises(TypeError, match="expects a TensorDict"):
        Obs.from_tensordict({"pixels": 1})  # type: ignore[arg-type]
    d = make_obs(2).to_dict()
    assert d["tag"] == "train" and isinstance(d["pixels"], torch.Tensor)
    assert type(Obs.from_dict(d, batch_size=[2])) is Obs


def test_replace_update_select_exclude_keys() -> None:
    o = make_obs()
    r = o.replace(tag="val")
    assert copy.replace(o, tag="x").tag == "x" if hasattr(copy, "replace") else True
    assert r.tag == "val" and r.pixels is o.pixels and o.tag == "train"
    with pytest.raises(TypeError, match=r"unknown fields \['nope'\]"):
        o.replace(nope=1)

    class WithDerived(TensorClass):
        x: torch.Tensor
        n: int = field(default=0, init=False)

    with pytest.raises(ValueError, match="field 'n' has init=False"):
        WithDerived(torch.zeros(1)).replace(n=1)
    o.update({"reward": torch.ones(4)})
    assert o.reward.sum() == 4
    o.update_(make_obs())
    assert o.reward.sum() == 6
    with pytest.raises(TensorDictKeyError, match=r"Obs has no field 'x' \(fields: \['pixels'"):
        o.update({"x": torch.ones(4)})
    sel = o.select("reward")
    assert type(sel) is Obs and sel.reward is o.reward
    assert sel.pixels is None  # a field without an entry reads None, as in tensordict
    assert list(o.exclude("tag").keys()) == ["pixels", "reward"]
    assert list(o.keys()) == ["pixels", "reward", "tag"] and "reward" in o
    assert dict(o.items())["tag"].data == "train" and len(list(o.values())) == 3
    assert o.get("nope", 5) == 5 and o.get("tag") == "train"
    s = make_step()
    s.set(("obs", "reward"), torch.full((4,), 3.0))
    assert s.obs.reward.sum() == 12 and not s.is_empty()


def test_repr_shows_class_and_fields() -> None:
    @tensorclass
    class R:
        x: torch.Tensor
        secret: str = field(default="s", repr=False)
        name: str = "n"

    r = R(torch.zeros(3, 2), batch_size=[3])
    assert repr(r) == "R(x=float32[2], name='n', batch_size=[3], device=None)"
    assert "obs=Obs(pixels=float32[2, 2]" in repr(make_step())
    long = R(torch.zeros(3, 2), secret="s" * 50, name="n" * 100, batch_size=[3])
    assert repr(long).startswith("R(x=float32[2], name='nnn") and "..." in repr(long)
    wide = make_step()
    wide.info = {"k" * 20: "v" * 30}
    assert repr(wide).startswith("Step(\n    obs=Obs(pixels=float32[2, 2], ")


def test_pickle_copy_deepcopy() -> None:
    s = make_step()
    for out in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert type(out) is Step and type(out.obs) is Obs and (out == s).all()
        assert out.obs.pixels is not s.obs.pixels and out.obs.tag == "train"
    shallow = copy.copy(s)
    shallow.action = torch.zeros(4)
    assert s.action[3] == 3  # the copy has its own structure


def test_registry_and_is_tensorclass() -> None:
    assert CLASS_REGISTRY[f"{Obs.__module__}:Obs"] is Obs
    assert CLASS_REGISTRY[f"{Step.__module__}:Step"] is Step
    assert is_tensorclass(Obs) and is_tensorclass(make_obs()) and is_tensorclass(Step)
    assert (
        not is_tensorclass(TensorDict) and not is_tensorclass(TensorClass) and not is_tensorclass(3)
    )
    assert Obs._is_tensor_collection and make_step()._is_tensor_collection
    assert issubclass(Obs, TensorClass) and Obs.__qualname__ == "Obs"
    with pytest.raises(TypeError, match="'int' is not a tensorclass"):
        fields(3)


def test_inheritance_adds_and_overrides_fields() -> None:
    class Base(TensorClass):
        x: torch.Tensor
        tag: str = "base"

    class Child(Base):
        y: torch.Tensor = field(default_factory=lambda: torch.zeros(()))
        tag: str = "child"

    assert [f.name for f in fields(Child)] == ["x", "tag", "y"]
    c = Child(torch.zeros(2))
    assert c.tag == "child" and type(c[None]) is Child
    assert CLASS_REGISTRY[f"{Child.__module__}:{Child.__qualname__}"] is Child

    @tensorclass(frozen=True)
    class Again(Base):
        z: int = 0

    assert Again.__tc_frozen__ and [f.name for f in fields(Again)] == ["x", "tag", "z"]


@pytest.mark.heavy
def test_pytree_roundtrip_and_compile() -> None:
    s = make_step()
    leaves, spec = tree_flatten(s)
    assert all(isinstance(t, torch.Tensor) for t in leaves) and len(leaves) == 3
    back = tree_unflatten([t + 1 for t in leaves], spec)
    assert type(back) is Step and type(back.obs) is Obs and back.obs.tag == "train"
    assert back.action[0] == 1

    def fn(step: Step) -> Step:
        out = step.apply(lambda t: t * 2)
        return torch.stack([out[0], out[1]])

    out = torch.compile(fn, fullgraph=True, backend="eager")(s)
    assert type(out) is Step and out.action.tolist() == [0, 2] and out.obs.tag == "train"

    def build(pixels: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
        o = Obs(pixels, reward, batch_size=[4])
        return o[1:].reward.sum() + o.pixels.sum()

    o = make_obs()
    assert torch.compile(build, fullgraph=True, backend="eager")(o.pixels, o.reward) == 6 + 120


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_moves_and_pins() -> None:
    s = make_step()
    g = s.to("cuda")
    assert type(g) is Step and g.device.type == "cuda" and g.obs.pixels.is_cuda
    assert g.obs.tag == "train" and (g.cpu() == s).all()
    assert s.cuda().action.is_cuda and s.to("cuda", non_blocking=True).action.is_cuda
    o = Obs(torch.zeros(2, 1), torch.zeros(2), batch_size=[2], device="cuda")
    assert o.pixels.is_cuda and o[0].device.type == "cuda"
    o.reward = torch.ones(2)  # moved to the instance's device on set
    assert o.reward.is_cuda
    pinned = make_obs().pin_memory()
    assert type(pinned) is Obs and pinned.is_pinned()


def test_pin_memory_and_weakref() -> None:
    o = make_obs()
    if torch.cuda.is_available():
        assert o.pin_memory().is_pinned() and type(o.pin_memory()) is Obs
    else:
        with pytest.raises(RuntimeError, match="pin_memory"):
            o.pin_memory()
    assert weakref.ref(o)() is o  # instances support weak references


# ---------------------------------------------------------------- persistence


def test_memmap_save_load_roundtrip(tmp_path: Path) -> None:
    s = make_step()
    s.info = {"run": 1, "names": ["a", "b"]}
    saved = s.memmap(tmp_path / "s")
    assert type(saved) is Step and type(saved.obs) is Obs
    assert saved.is_memmap() and saved.is_locked and not s.is_memmap()
    for back in (Step.load_memmap(tmp_path / "s"), Step.load(tmp_path / "s")):
        assert type(back) is Step and type(back.obs) is Obs and back.is_memmap()
        assert (back == s).all() and back.obs.tag == "train" and back.extra is None
        assert back.info == {"run": 1, "names": ["a", "b"]}
    # a registered class is rebuilt even when loading through TensorDict
    assert type(TensorDict.load_memmap(tmp_path / "s")) is Step
    with pytest.raises(LockedError):
        saved.action = torch.zeros(4)
    in_ram = Step.load_memmap(tmp_path / "s").clone()  # device="cpu" keeps the mapping
    assert not in_ram.is_memmap() and in_ram.action.tolist() == [0, 1, 2, 3]
    assert type(in_ram) is Step and in_ram.device == torch.device("cpu")


def test_memmap_in_place_like_save_and_wrong_class(tmp_path: Path) -> None:
    o = make_obs()
    assert o.memmap_(tmp_path / "o") is o and o.is_memmap()
    like = make_obs().memmap_like(tmp_path / "like")
    assert type(like) is Obs and like.pixels.shape == (4, 2, 2) and like.tag == "train"
    saved = make_obs().save(tmp_path / "saved")
    assert type(saved) is Obs and (Obs.load(tmp_path / "saved") == make_obs()).all()
    both = torch.cat([make_obs(2), make_obs(2, tag="val")])
    both.memmap(tmp_path / "b")
    back = Obs.load_memmap(tmp_path / "b")
    assert back.tag == ["train", "train", "val", "val"] and back[3].tag == "val"
    make_step().memmap(tmp_path / "s")
    # The saved class is known, so the loader names the file and both classes.
    with pytest.raises(FormatError, match=r"meta.json: the saved '.*Step' does not fit Obs"):
        Obs.load_memmap(tmp_path / "s")


def test_pickle_of_memmapped_data_is_by_file(tmp_path: Path) -> None:
    big = Obs(torch.zeros(100_000, 4), torch.zeros(100_000), batch_size=[100_000])
    saved = big.memmap(tmp_path / "big")
    data = pickle.dumps(saved)
    assert len(data) < 20_000  # a reference to the files, not 2 MB of floats
    back = pickle.loads(data)
    assert type(back) is Obs and back.is_memmap() and back.pixels.shape == (100_000, 4)


def test_docs_list_every_reserved_name() -> None:
    from tensorbox._tensorclass.fields import reserved_names

    text = (Path(__file__).resolve().parents[2] / "docs" / "tensorclass.md").read_text()
    public = [n for n in reserved_names(TensorClass) if not n.startswith("_")]
    assert [n for n in public if f"`{n}`" not in text] == []


def test_shadow_lets_fields_hide_convenience_methods_only() -> None:
    with pytest.raises(TypeError, match=r"field 'mean' clashes .* or pass shadow=True"):

        @tensorclass
        class Gauss:
            mean: torch.Tensor

    @tensorclass(shadow=True)
    class Gaussian:
        mean: torch.Tensor
        std: torch.Tensor

    g = Gaussian(torch.zeros(4, 2), torch.ones(4, 2), batch_size=[4])
    assert torch.equal(g.mean, torch.zeros(4, 2)) and torch.equal(g[1].std, torch.ones(2))
    assert g.double().std.dtype == torch.float64  # the other convenience methods remain

    class Summed(TensorClass, shadow=True):
        sum: torch.Tensor

    assert torch.equal(Summed(torch.ones(3), batch_size=[3]).sum, torch.ones(3))
    # Names the library relies on stay refused, with no shadow hint.
    with pytest.raises(TypeError, match=r"field 'apply' clashes .*'apply_'\)$"):

        @tensorclass(shadow=True)
        class Bad:
            apply: torch.Tensor


def test_shadowable_names_are_a_written_list() -> None:
    # The names a field may hide with shadow=True are a written decision, not whatever the
    # container's mixins happen to define: this pins the set the mixin-derived rule gave
    # before the mixins were regrouped by job.
    from tensorbox._tensorclass.fields import FIELD_MAY_HIDE, SHADOWABLE, reserved_names

    expected = {
        *[
            "abs",
            "all_gather",
            "all_reduce",
            "all_reduce_",
            "amax",
            "amin",
            "atleast_1d",
            "atleast_2d",
        ],
        *[
            "atleast_3d",
            "auto_batch_size_",
            "bfloat16",
            "bool",
            "broadcast",
            "broadcast_",
            "broadcast_to",
        ],
        *[
            "cat_from_tensordict",
            "cat_tensors",
            "clamp",
            "clear",
            "copy_at_",
            "create_nested",
            "data_ptr",
        ],
        *["depth", "double", "dtype", "empty", "entry_class", "exp", "expand_as", "filter_empty_"],
        *[
            "filter_non_tensor_data",
            "flip",
            "fliplr",
            "flipud",
            "float",
            "from_remote_init",
            "fromkeys",
        ],
        *[
            "gather",
            "get_at",
            "get_item_shape",
            "get_non_tensor",
            "half",
            "init_remote",
            "int",
            "irecv",
        ],
        *["is_non_tensor", "isend", "log", "long", "masked_fill", "masked_fill_", "masked_select"],
        *[
            "maybe_dense_stack",
            "mean",
            "moveaxis",
            "movedim",
            "names",
            "ndimension",
            "numpy",
            "recv",
            "repeat",
        ],
        *[
            "repeat_interleave",
            "replace",
            "roll",
            "rot90",
            "send",
            "set_at_",
            "set_non_tensor",
            "setdefault",
        ],
        *[
            "sigmoid",
            "sorted_keys",
            "split_keys",
            "sqrt",
            "stack_from_tensordict",
            "stack_tensors",
            "std",
        ],
        *[
            "sum",
            "swapaxes",
            "swapdims",
            "tensor_split",
            "tile",
            "tolist",
            "update_at_",
            "var",
            "where",
        ],
    }
    # tensordict's reductions, autograd helpers, constructors and consolidation
    expected |= {
        *["backward", "consolidate", "cummax", "cummin", "from_consolidated", "from_modules"],
        *["from_namedtuple", "grad", "is_consolidated", "isfinite", "isinf", "isnan"],
        *["isneginf", "isposinf", "isreal", "log_softmax", "logsumexp", "max", "min"],
        *["nanmean", "nansum", "new_empty", "new_full", "new_ones", "new_tensor"],
        *["new_zeros", "popitem", "prod", "quantile", "softmax", "to_namedtuple"],
        "zero_grad",
    }
    # tensordict's cast and lazy-stack conversion
    expected |= {"to_lazystack", "type"}
    # tensordict's method spellings of the operators
    expected |= {"add", "sub", "mul", "div", "pow"}
    assert expected == SHADOWABLE and len(SHADOWABLE) == 124
    # Every listed name is a public member of the base (a rename is caught here).
    reserved = reserved_names(TensorClass)
    assert sorted(n for n in SHADOWABLE - FIELD_MAY_HIDE if n not in reserved) == []
    # The library's own names stay outside it, whichever mixin holds them.
    assert {"apply", "get", "set", "to", "clone", "reshape", "memmap"}.isdisjoint(SHADOWABLE)

    @tensorclass(shadow=True)
    class Masked:
        where: torch.Tensor
        tensor_split: torch.Tensor

    m = Masked(torch.zeros(2), torch.ones(2), batch_size=[2])
    assert torch.equal(m.where, torch.zeros(2)) and torch.equal(m[0].tensor_split, torch.ones(()))
