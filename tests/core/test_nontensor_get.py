"""Reading non-tensor entries as tensordict does: ``get``/``items``/``values`` give the
``NonTensorData``/``NonTensorStack`` wrapper (batch size of its level), ``td[key]`` the
Python value; real tensordict 0.15.3 is the oracle where installed."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import (
    NonTensorData,
    NonTensorStack,
    TensorDict,
    lazy_stack,
    pad,
    tensorclass,
)

words = st.text(alphabet="abcxyz", min_size=1, max_size=4)
batch = st.lists(st.integers(1, 3), max_size=2)


def _sample() -> TensorDict:
    return TensorDict(
        {"x": torch.zeros(3), "s": "hello", "n": {"t": "in", "y": torch.ones(3, 2)}},
        batch_size=[3],
    )


def test_get_gives_the_wrapper_with_its_levels_batch_size() -> None:
    td = _sample()
    g = td.get("s")
    assert type(g) is NonTensorData and td.is_non_tensor("s")
    assert (g.data, g.batch_size, g.shape, g.tolist()) == ("hello", (3,), (3,), ["hello"] * 3)
    assert td["s"] == "hello" and td["n", "t"] == "in"
    assert td.get(("n", "t")).data == "in" and td.get(("n", "t")).batch_size == (3,)
    assert td.get_non_tensor(("n", "t")) == "in"
    assert td.get("x") is td._tensordict["x"]  # tensors unchanged


def test_items_and_values_give_wrappers_leaves_only_skips_them() -> None:
    td = _sample()
    kinds = {k: type(v).__name__ for k, v in td.items(True)}
    assert kinds["s"] == "NonTensorData" and kinds[("n", "t")] == "NonTensorData"
    assert [type(v).__name__ for v in td.values()] == ["Tensor", "NonTensorData", "TensorDict"]
    assert all(isinstance(v, torch.Tensor) for v in td.values(True, True))


def test_a_stack_reads_as_nontensorstack_and_a_list() -> None:
    td = torch.stack([TensorDict(s="a"), TensorDict(s="b")])
    s = td.get("s")
    assert isinstance(s, NonTensorStack) and s.batch_size == (2,) and s.tolist() == ["a", "b"]
    assert td["s"] == ["a", "b"]
    assert td.get_at("s", 0).data == "a" and td.get_at("s", 0).batch_size == ()
    assert td.get_at("s", slice(0, 2)).tolist() == ["a", "b"]
    masked = td[torch.tensor([False, True])]
    assert masked.get("s").tolist() == ["b"] and masked["s"] == ["b"]  # a stack, as tensordict


def test_lazy_stack_get_wraps_with_the_stacks_batch_size() -> None:
    ls = lazy_stack([TensorDict(q=NonTensorData(f"q{i}"), x=torch.zeros(())) for i in range(3)])
    assert isinstance(ls.get("q"), NonTensorStack) and ls["q"] == ["q0", "q1", "q2"]
    same = lazy_stack([TensorDict(q="z", x=torch.zeros(())) for _ in range(2)])
    assert same.get("q").batch_size == (2,) and same["q"] == ["z", "z"]  # as tensordict


def test_tensorclass_field_and_get_read_the_value_items_the_wrapper() -> None:
    @tensorclass
    class Tagged:
        x: torch.Tensor
        s: str
        td: TensorDict

    c = Tagged(x=torch.zeros(2), s="hi", td=TensorDict(q="z", batch_size=[2]), batch_size=[2])
    assert c.s == "hi" and c.get("s") == "hi"
    assert type(c.get(("td", "q"))) is NonTensorData
    assert type(dict(c.items())["s"]) is NonTensorData
    holder = TensorDict(c=c, batch_size=[2])
    assert holder.get(("c", "s")).batch_size == (2,) and holder["c", "s"] == "hi"


def test_setting_a_read_wrapper_elsewhere_takes_the_new_batch_size() -> None:
    g = _sample().get("s")
    other = TensorDict(batch_size=[5]).set("s", g)
    assert other.get("s").batch_size == (5,) and other["s"] == "hello"


def test_pad_a_shared_value_fills_new_rows_with_none() -> None:
    td = TensorDict(meta=NonTensorData("m", batch_size=[3]), x=torch.ones(3), batch_size=[3])
    assert pad(td, [0, 2]).get("meta").tolist() == ["m", "m", "m", None, None]
    assert pad(td, [-1, 0])["meta"] == "m"  # cropping keeps one value


def test_clone_copies_the_value() -> None:
    d = NonTensorData(["x"], batch_size=[2])
    c = d.clone()
    assert c.data == d.data and c.data is not d.data and c.batch_size == (2,)
    s = NonTensorStack("a", "b")
    assert s.clone().tolist() == ["a", "b"] and s.clone() is not s
    assert d.clone(recurse=False).data is d.data


def test_update_at_writes_values_seen_through_get() -> None:
    td = TensorDict({"val": NonTensorData(data=0, batch_size=[10])}, [10])
    new = TensorDict({"val": NonTensorData(data=1, batch_size=[5])}, [5])
    td.update_at_(new, slice(1, None, 2))
    assert td.get("val").tolist() == [0, 1] * 5


def test_a_missing_key_still_raises() -> None:
    with pytest.raises(KeyError, match="nope"):
        _sample().get_non_tensor("nope")


@settings(max_examples=25, deadline=None)
@given(value=words, bs=batch)
def test_get_matches_tensordict(value: str, bs: list[int]) -> None:
    tensordict = pytest.importorskip("tensordict")
    ours = TensorDict({"s": value, "n": {"t": value}}, batch_size=bs)
    theirs = tensordict.TensorDict({"s": value, "n": {"t": value}}, batch_size=bs)
    for key in ("s", ("n", "t")):
        a, b = ours.get(key), theirs.get(key)
        assert type(a).__name__ == type(b).__name__
        assert (a.data, a.batch_size, a.tolist()) == (b.data, b.batch_size, b.tolist())
        assert ours[key] == theirs[key]
    assert [type(v).__name__ for _, v in ours.items(True)] == [
        type(v).__name__ for _, v in theirs.items(True)
    ]


@settings(max_examples=25, deadline=None)
@given(values=st.lists(words, min_size=2, max_size=4, unique=True))
def test_stack_get_matches_tensordict(values: list[str]) -> None:
    tensordict = pytest.importorskip("tensordict")
    ours = torch.stack([TensorDict(s=v) for v in values])
    theirs = torch.stack([tensordict.TensorDict(s=v) for v in values])
    a, b = ours.get("s"), theirs.get("s")
    assert isinstance(a, NonTensorStack) and isinstance(b, tensordict.NonTensorStack)
    assert (a.batch_size, a.tolist()) == (b.batch_size, b.tolist())
    assert list(ours["s"]) == list(theirs["s"])
    assert ours.get_at("s", 1).data == theirs.get_at("s", 1).data


def test_tensor_only_field_annotated_nontensordata_reads_the_wrapper() -> None:
    from collections import UserDict

    from tensorbox import TensorClass

    class Holder(TensorClass["tensor_only"]):
        data: NonTensorData
        x: torch.Tensor | None = None

    value = UserDict({"metadata": "value"})
    h = Holder(data=value)
    assert isinstance(h.data, NonTensorData) and h.data.data is value
    assert h.x is None
