"""tensordict behaviours of its test_generic file, added for drop-in use: is_empty,
'in' with a non-key, locked data/grad, separates, from_any of tuples and lists,
update(update_batch_size=True), from_modules / to_module for ensembles, share_memory_
locking, pad of lazy stacks in place and of per-row non-tensor values."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tensorbox import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorClass,
    TensorDict,
    lazy_stack,
)
from tensorbox import pad as pad_fn
from tensorbox.errors import BatchSizeError, KeyTypeError, LockedError

# ------------------------------------------------------------------ keys


def test_is_empty_counts_non_tensor_values_and_filter_empty_keeps_them() -> None:
    assert TensorDict({"a": {"b": {}}}).is_empty()
    assert not TensorDict({"a": {"b": {}, "c": NonTensorData("text")}}).is_empty()
    assert not TensorDict({"a": {"c": 1}}).is_empty()
    td = TensorDict({"a": {"c": NonTensorData("text")}, "e": {}})
    assert sorted(td.filter_empty_().keys()) == ["a"]  # the string is content, kept


def test_in_with_a_non_key_raises_a_type_and_runtime_error() -> None:
    td = TensorDict.fromkeys({"a", ("d", "e")}, 0)
    assert "a" in td and ("d", "e") in td and "f" not in td
    for err in (KeyTypeError, TypeError, RuntimeError):
        with pytest.raises(err, match=r"'in' looks up keys \(str or tuple of str\), got int"):
            0 in td  # noqa: B015


def test_data_and_grad_of_a_locked_container_are_locked() -> None:
    td = TensorDict(a=torch.ones(3, requires_grad=True), n={"b": torch.ones(3, requires_grad=True)})
    (td["a"] * 2 + td["n", "b"]).sum().backward()
    assert not td.grad.is_locked and not td.data.is_locked
    assert td.grad is not td.grad
    td.lock_()
    assert td.grad.is_locked and td.data.is_locked and td.grad["n"].is_locked
    assert td.grad["a"].tolist() == [2.0] * 3


def test_separates_moves_entries_out() -> None:
    td = TensorDict(a=0, b=TensorDict(c=0, d=0), unique=TensorDict(val=0))
    out = td.separates("a", ("b", ("d",)), ("unique", "val"))
    assert out.keys(True, True) == ["a", ("b", "d"), ("unique", "val")]
    assert td.keys(True, True) == [("b", "c")]  # "unique", left empty, is dropped
    td = TensorDict(a=0, unique=TensorDict(val=0))
    out = td.separates("a", ("unique", "val"), "e", default=None, filter_empty=False)
    assert out["e"] is None and "unique" in td and td["unique"].is_empty()
    out = td.separates("missing", strict=False)
    assert out.is_empty() and "unique" in td


def test_separates_keeps_batch_sizes_and_refuses_before_changing() -> None:
    td = TensorDict(
        a=torch.zeros(2), n=TensorDict(x=torch.zeros(2, 3), batch_size=[2, 3]), batch_size=[2]
    )
    out = td.separates(("n", "x"))
    assert out.batch_size == (2,) and out["n"].batch_size == (2, 3)
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    with pytest.raises(KeyError, match="separates: key 'e' not found"):
        td.separates("a", "e")
    assert "a" in td
    td.lock_()
    with pytest.raises(LockedError, match="separates: the container is locked"):
        td.separates("a")
    assert "a" in td


@given(st.sets(st.sampled_from(["a", "b", ("n", "c"), ("n", "d")]), max_size=4))
def test_separates_and_the_rest_partition_the_leaves(keys: set[object]) -> None:
    t = {"a": torch.zeros(2), "b": torch.ones(2), "n": {"c": torch.zeros(2), "d": torch.ones(2)}}
    td = TensorDict(t, batch_size=[2])
    before = {k: v.clone() for k, v in td.items(True, True)}
    out = td.separates(*keys)
    moved, rest = set(out.keys(True, True)), set(td.keys(True, True))
    assert moved == keys and not moved & rest and moved | rest == set(before)
    for k in moved:
        assert torch.equal(out[k], before[k])


# ------------------------------------------------------------------ from_any


def test_from_any_of_tuples_keys_items_by_position() -> None:
    pytree = ([[1, 2], [3, 4]], {"t": torch.zeros(2), "tuple": (1, 2)}, {"td": TensorDict(x=1)})
    td = TensorDict.from_any(pytree)
    assert set(td.keys(True, True)) == {
        "0",
        ("1", "t"),
        ("1", "tuple", "0"),
        ("1", "tuple", "1"),
        ("2", "td", "x"),
    }
    assert td["0"].tolist() == [[1, 2], [3, 4]]


def test_from_any_of_a_list_is_a_tensor_or_a_stack() -> None:
    assert torch.equal(
        TensorDict.from_any([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    )
    ragged = TensorDict.from_any([[1, 2], [3]])
    assert isinstance(ragged, NonTensorStack) and ragged.tolist() == [[1, 2], [3]]
    with pytest.raises(TypeError, match="from_any: cannot make a container of a int"):
        TensorDict.from_any(3)


# ------------------------------------------------------------------ update


def test_update_from_another_batch_size_is_refused_without_the_flag() -> None:
    td = TensorDict(batch_size=[3])
    with pytest.raises(
        BatchSizeError, match=r"batch_size \(4,\) does not match this container's \(3,\)"
    ):
        td.update(TensorDict(batch_size=[4]))
    td.update(TensorDict(batch_size=[]))  # a prefix-compatible source is fine
    td.update(TensorDict(a=torch.zeros(3, 2), batch_size=[3, 2]))
    assert td["a"].shape == (3, 2)


def test_update_batch_size_resizes_in_place_keeping_nested_containers() -> None:
    dst = TensorDict(
        a=torch.zeros(3), n=TensorDict(x=torch.zeros(3, 5), batch_size=[3, 5]), batch_size=[3]
    )
    nested = dst["n"]
    src = TensorDict(
        a=torch.ones(2), n=TensorDict(x=torch.ones(2, 4), batch_size=[2, 4]), batch_size=[2]
    )
    assert dst.update(src, update_batch_size=True) is dst
    assert dst.batch_size == (2,) and dst["n"] is nested and nested.batch_size == (2, 4)
    assert torch.equal(dst["n", "x"], torch.ones(2, 4)) and torch.equal(dst["a"], torch.ones(2))
    # a nested mismatch under a matching root
    root = TensorDict(n=TensorDict(x=torch.zeros(3), batch_size=[3]))
    root.update(TensorDict(n=TensorDict(x=torch.ones(5), batch_size=[5])), update_batch_size=True)
    assert root["n"].batch_size == (5,)


def test_update_batch_size_resizes_nested_containers_of_lazy_stack_members() -> None:
    def stack(n: int) -> LazyStackedTensorDict:
        return lazy_stack(
            [TensorDict(n=TensorDict(x=torch.zeros(n), batch_size=[n])) for _ in range(2)]
        )

    s = stack(3)
    s.update(stack(4), update_batch_size=True)
    assert s.tensordicts[0]["n"].batch_size == (4,) and s["n", "x"].shape == (2, 4)


def test_update_batch_size_refusals() -> None:
    src = TensorDict(a=torch.zeros(4), batch_size=[4])
    with pytest.raises(BatchSizeError, match="neither inplace=True nor keys_to_update"):
        TensorDict(a=torch.zeros(3), batch_size=[3]).update(
            src, update_batch_size=True, inplace=True
        )
    with pytest.raises(BatchSizeError, match="neither inplace=True nor keys_to_update"):
        TensorDict(a=torch.zeros(3), batch_size=[3]).update(
            src, update_batch_size=True, keys_to_update=["a"]
        )
    with pytest.raises(
        LockedError, match=r"update\(update_batch_size=True\): the container is locked"
    ):
        TensorDict(batch_size=[3], lock=True).update(src, update_batch_size=True)
    dst = TensorDict(b=torch.zeros(3), batch_size=[3])
    with pytest.raises(BatchSizeError, match="key 'b' is not in the source"):
        dst.update(src, update_batch_size=True)
    assert dst.batch_size == (3,) and "b" in dst  # unchanged
    stack = lazy_stack([TensorDict(batch_size=[3])] * 2)
    with pytest.raises(BatchSizeError, match="a lazy stack keeps its batch size"):
        stack.update(lazy_stack([TensorDict(batch_size=[4])] * 2), update_batch_size=True)
    stack.lock_()
    with pytest.raises(LockedError, match="the lazy stack is locked"):
        stack.update(lazy_stack([TensorDict(batch_size=[4])] * 2), update_batch_size=True)


# ------------------------------------------------------------------ modules


def test_from_modules_gives_trainable_parameter_stacks() -> None:
    modules = [nn.Linear(3, 4) for _ in range(3)]
    params = TensorDict.from_modules(*modules)
    assert isinstance(params["weight"], nn.Parameter) and params["weight"].is_leaf
    assert params["weight"].shape == (3, 4, 3)
    torch.testing.assert_close(params["weight"][1], modules[1].weight.detach())
    bn = TensorDict.from_modules(nn.BatchNorm1d(2), nn.BatchNorm1d(2))
    assert type(bn["running_mean"]) is torch.Tensor  # buffers stay buffers


@pytest.mark.parametrize("preserve", [True, False])
def test_vmap_over_stacked_weights_trains_the_stack(preserve: bool) -> None:
    empty = nn.Linear(3, 4, device="meta")
    modules = [nn.Linear(3, 4) for _ in range(3)]
    params = TensorDict.from_modules(*modules)

    def run(p: TensorDict, x: torch.Tensor) -> torch.Tensor:
        with p.to_module(empty, preserve_module_state=preserve):
            return empty(x)

    x = torch.randn(3)
    y = torch.vmap(run, (0, None))(params, x)
    expected = torch.stack([m(x) for m in modules])
    torch.testing.assert_close(y, expected)
    y.sum().backward()
    assert all(p.grad is None for p in modules[0].parameters())
    torch.testing.assert_close(params["bias"].grad, torch.ones(3, 4))


def test_from_modules_expand_identical_shares_the_common_weight() -> None:
    shared = nn.Linear(3, 3)
    modules = [nn.Sequential(shared, nn.Linear(3, 4)) for _ in range(2)]
    params = TensorDict.from_modules(*modules, expand_identical=True)
    w0 = params["0", "weight"]
    assert not isinstance(w0, nn.Parameter) and w0.shape == (2, 3, 3)
    assert w0.data_ptr() == shared.weight.data_ptr()
    assert isinstance(params["1", "weight"], nn.Parameter)
    assert params["1", "weight"].data_ptr() != modules[0][1].weight.data_ptr()
    empty = nn.Sequential(nn.Linear(3, 3, device="meta"), nn.Linear(3, 4, device="meta"))

    def run(p: TensorDict, x: torch.Tensor) -> torch.Tensor:
        with p.to_module(empty, preserve_module_state=False):
            return empty(x)

    torch.vmap(run, (0, None))(params, torch.zeros(3)).sum().backward()
    assert shared.weight.grad is not None  # reached through the expanded view
    assert modules[0][1].weight.grad is None and params["1", "weight"].grad is not None


def test_from_module_use_state_dict_snapshots_what_the_hooks_give() -> None:
    net = nn.Linear(2, 2)

    def adder(module: nn.Module, *args: object) -> None:
        for p in module.parameters(recurse=False):
            p.data += 1

    def remover(module: nn.Module, *args: object) -> None:
        for p in module.parameters(recurse=False):
            p.data = p.data - 1

    net.register_state_dict_pre_hook(adder)
    net._register_state_dict_hook(remover)
    plain = TensorDict.from_module(net).detach().clone()
    via_sd = TensorDict.from_module(net, use_state_dict=True)
    torch.testing.assert_close(via_sd["weight"], plain["weight"] + 1)


# ------------------------------------------------------------------ share_memory_


def test_share_memory_locks() -> None:
    td = TensorDict(a=torch.zeros(4, 5), batch_size=[4, 5]).share_memory_()
    assert td.is_shared() and td.is_locked
    td.set("a", torch.ones(4, 5), inplace=True)
    td.set_("a", torch.ones(4, 5))
    with pytest.raises(LockedError, match="cannot set 'b': the TensorDict is locked"):
        td.set("b", torch.ones(4, 5))
    with td.unlock_():
        td.set("b", torch.ones(4, 5))


# ------------------------------------------------------------------ pad


def _members(n: int, size: int) -> list[TensorDict]:
    return [
        TensorDict(x=torch.arange(size, dtype=torch.float32) + 10 * i, batch_size=[size])
        for i in range(n)
    ]


def test_lazy_stack_pad_in_place_keeps_the_members() -> None:
    members = _members(2, 4)
    s = lazy_stack(members, 0)
    assert s.pad([0, 0, 0, 1], value=-1.0, inplace=True) is s
    assert s.batch_size == (2, 5) and s.tensordicts[0] is members[0]
    assert members[1]["x"].tolist() == [10.0, 11.0, 12.0, 13.0, -1.0]
    s.pad([1, -1], value=9.0, inplace=True)  # a new first member, the last one dropped
    assert len(s.tensordicts) == 2 and s.tensordicts[1] is members[0]
    assert s.tensordicts[0]["x"].tolist() == [9.0] * 5
    twice = lazy_stack([members[0], members[0]], 0)  # one object stacked twice: padded once
    twice.pad([0, 0, 0, 1], inplace=True)
    assert members[0]["x"].shape == (6,) and twice.batch_size == (2, 6)


def test_lazy_stack_pad_in_place_refusals() -> None:
    s = lazy_stack(_members(2, 3), 0)
    with pytest.raises(BatchSizeError, match="negative output size"):
        s.pad([0, 0, -4, 0], inplace=True)
    assert s.batch_size == (2, 3)
    s.lock_()
    with pytest.raises(LockedError, match=r"pad\(inplace=True\) on a locked lazy stack"):
        s.pad([0, 1], inplace=True)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 3),
    size=st.integers(1, 4),
    dim=st.sampled_from([0, 1]),
    sizes=st.lists(st.integers(-1, 2), min_size=2, max_size=4).filter(lambda s: len(s) % 2 == 0),
)
def test_lazy_stack_pad_in_place_matches_torch(
    n: int, size: int, dim: int, sizes: list[int]
) -> None:
    s = lazy_stack(_members(n, size), dim)
    dense = torch.stack([m["x"] for m in s.tensordicts], dim)
    flat: list[int] = []  # F.pad takes the last dim first
    for d in reversed(range(2)):
        flat += sizes[2 * d : 2 * d + 2] if 2 * d < len(sizes) else [0, 0]
    if any(n + b + a < 0 for n, b, a in zip(dense.shape, flat[2::-2], flat[3::-2], strict=False)):
        with pytest.raises(BatchSizeError):
            s.pad(sizes, value=7.0, inplace=True)
        return
    expected = torch.nn.functional.pad(dense, flat, value=7.0)
    out = s.pad(sizes, value=7.0, inplace=True)
    assert isinstance(out, LazyStackedTensorDict) and out.batch_size == expected.shape
    assert torch.equal(out["x"], expected)


def test_pad_pads_per_row_non_tensor_values_with_none() -> None:
    td = TensorDict(x=torch.arange(3), instr=NonTensorStack("a", "b", "c"), batch_size=[3])
    assert td.pad([0, 2])["instr"] == ["a", "b", "c", None, None]
    assert td.pad([1, 1])["instr"] == [None, "a", "b", "c", None]
    assert td.pad([-1, 1])["instr"] == ["b", "c", None]
    shared = TensorDict(meta=NonTensorData("m"), batch_size=[3])
    assert shared.pad([0, 2])["meta"] == ["m", "m", "m", None, None]  # new rows hold None
    assert shared.pad([-1, 0])["meta"] == "m"  # cropping keeps one shared value
    grid = NonTensorStack.from_list([["00", "01"], ["10", "11"]])
    out = TensorDict(g=grid, batch_size=[2, 2]).pad([0, 1, 1, 0])
    assert out["g"] == [[None, "00", "01"], [None, "10", "11"], [None, None, None]]


def test_non_tensor_data_pad() -> None:
    stack = NonTensorStack("a", "b")
    padded = pad_fn(stack, [1, 1])
    assert isinstance(padded, NonTensorStack) and padded.tolist() == [None, "a", "b", None]
    assert pad_fn(stack, [0, 1], inplace=True) is stack and stack.tolist() == ["a", "b", None]
    assert NonTensorData("a", batch_size=[2]).pad([0, 1]).tolist() == ["a", "a", None]
    with pytest.raises(BatchSizeError, match="cannot preserve the identity"):
        NonTensorData("a", batch_size=[2]).pad([0, 1], inplace=True)
    with pytest.raises(BatchSizeError, match="negative output size"):
        stack.pad([-4, 0])


# ------------------------------------------------------------------ from_dict_instance


class _Node(TensorClass):
    x: torch.Tensor | None = None
    y: int | None = None
    z: _Node | None = None


def test_from_dict_instance_reads_to_dict_back_with_the_classes() -> None:
    td = TensorDict(a=torch.zeros(()), b=_Node(x=torch.zeros(()), y=1, z=_Node(y=2)))
    back = td.from_dict_instance(td.to_dict(), auto_batch_size=True)
    assert type(back) is TensorDict and type(back["b"]) is _Node and type(back["b"].z) is _Node
    assert back["b"].y == 1 and type(back["b"].y) is int and back["b"].z.y == 2
    assert torch.equal(back["b"].x, torch.zeros(()))
    plain = TensorDict(a=torch.zeros(2), n={"name": "x"}, batch_size=[2])
    again = plain.from_dict_instance({"a": torch.ones(2), "n": {"name": "y"}}, batch_size=[2])
    assert again["n", "name"] == "y" and again.batch_size == (2,)
