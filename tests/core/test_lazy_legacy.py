"""tensordict's lazy-legacy mode (tensorbox/_core/lazy_legacy.py, _core/lazyshape.py).

Under ``set_lazy_legacy(True)`` the shape ops of a TensorDict give views whose reads
are torch's op on the source's leaves (checked against torch for random shapes and
permutations), whose writes land in the source through the inverse op (checked
against torch's inverse op), and on which the inverse op gives the source itself.
Off (the default), nothing changes.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import (
    BatchSizeError,
    LockedError,
    NonTensorStack,
    TensorClass,
    TensorDict,
    lazy_legacy,
    set_lazy_legacy,
)
from tensorbox._core.lazyshape import ShapeView

BATCH = st.lists(st.integers(1, 3), min_size=1, max_size=4).map(tuple)


def make(bs: tuple[int, ...]) -> TensorDict:
    g = torch.Generator().manual_seed(len(bs))
    return TensorDict(
        a=torch.rand(*bs, 2, generator=g),
        n=TensorDict(c=torch.rand(*bs, 3, 2, generator=g), batch_size=[*bs, 3]),
        s="text",
        batch_size=bs,
    )


@st.composite
def batch_and_perm(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    bs = draw(BATCH)
    return bs, tuple(draw(st.permutations(range(len(bs)))))


# ------------------------------------------------------------------ the switch


def test_switch_off_by_default_and_restored() -> None:
    assert lazy_legacy() is False
    with set_lazy_legacy(True):
        assert lazy_legacy() is True
        with set_lazy_legacy(False):
            assert lazy_legacy() is False
        assert lazy_legacy() is True
    assert lazy_legacy() is False


def test_switch_as_decorator_and_set() -> None:
    switch = set_lazy_legacy(True)

    @switch
    def inner(depth: int) -> bool:
        return lazy_legacy() and (depth == 0 or inner(depth - 1))

    assert inner(2) and not lazy_legacy()  # re-entering the same switch restores once each
    switch.clone().set()
    try:
        assert lazy_legacy()
    finally:
        set_lazy_legacy(False).set()
    assert not lazy_legacy()


@pytest.mark.heavy
@pytest.mark.parametrize(("value", "expected"), [("1", "True"), ("off", "False")])
def test_environment_variable_gives_the_starting_mode(value: str, expected: str) -> None:
    env = {**os.environ, "LAZY_LEGACY_OP": value}
    code = "import tensorbox; print(tensorbox.lazy_legacy())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == expected


@pytest.mark.parametrize("name", ["LAZY_LEGACY_OP", "LIST_TO_STACK"])
def test_environment_variable_bad_value(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorbox._core.modeswitch import env_flag

    monkeypatch.setenv(name, "maybe")
    with pytest.raises(ValueError, match=rf"{name}='maybe': expected a truth value"):
        env_flag(name)
    monkeypatch.setenv(name, " TRUE ")
    assert env_flag(name) is True


def test_off_nothing_changes() -> None:
    td = make((2, 3))
    p = td.permute(1, 0)
    assert type(p) is TensorDict and p.permute(1, 0) is not td
    assert type(td.unsqueeze(0).squeeze(0)) is TensorDict
    p.set("new", torch.zeros(3, 2))
    assert "new" not in td


# ------------------------------------------------------------- reads and writes


@settings(max_examples=30, deadline=None)
@given(batch_and_perm())
def test_permute_reads_writes_and_inverse(case: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    bs, perm = case
    nd = len(bs)
    td = make(bs)
    inv = tuple(sorted(range(nd), key=perm.__getitem__))
    with set_lazy_legacy(True):
        p = td.permute(*perm)
        assert p.batch_size == torch.Size(bs[d] for d in perm)
        assert torch.equal(p["a"], td["a"].permute(*perm, nd))
        assert torch.equal(p["n", "c"], td["n", "c"].permute(*perm, nd, nd + 1))
        value = torch.rand(*p.batch_size, 4)
        p.set("w", value)  # a new key, written into the source through the inverse op
        assert torch.equal(td["w"], value.permute(*inv, nd))
        p["a"] = torch.ones(*p.batch_size, 2)  # replacing an entry reaches the source too
        assert bool((td["a"] == 1).all())
        p.set_("a", torch.zeros(*p.batch_size, 2))
        assert bool((td["a"] == 0).all())
        assert p.permute(*inv) is td
        assert torch.permute(p, inv) is td
        identity = tuple(range(nd))
        if perm == identity:
            assert p is td
        else:
            assert p.permute(*identity) is p
        if perm != inv:  # applying perm twice is no inverse: a view of the view
            other = p.permute(*perm)
            assert other is not td and type(other) is ShapeView and other._source is p


@settings(max_examples=30, deadline=None)
@given(BATCH, st.data())
def test_transpose_unsqueeze_squeeze_view(bs: tuple[int, ...], data: st.DataObject) -> None:
    nd = len(bs)
    td = make(bs)
    a = data.draw(st.integers(-nd, nd - 1))
    b = data.draw(st.integers(-nd, nd - 1))
    d = data.draw(st.integers(-nd - 1, nd))
    with set_lazy_legacy(True):
        t = td.transpose(a, b)
        assert torch.equal(t["a"], td["a"].transpose(a % nd, b % nd))
        assert t.transpose(b, a) is td
        u = td.unsqueeze(d)
        assert torch.equal(u["a"], td["a"].unsqueeze(d % (nd + 1)))
        u.set("w", torch.full((*u.batch_size, 2), 7.0))
        assert td["w"].shape == (*bs, 2) and bool((td["w"] == 7).all())
        assert u.squeeze(d) is td
        s = u.squeeze(d % (nd + 1) - nd - 1)  # the same dim counted from the end
        assert s is td
        flat = td.view(-1)
        assert torch.equal(flat["a"], td["a"].reshape(-1, 2))
        flat.set("z", torch.arange(float(flat.batch_size[0])))
        assert torch.equal(td["z"], torch.arange(float(flat.batch_size[0])).reshape(bs))
        assert flat.view(bs) is td and td.view(bs) is td


def test_squeeze_all_singletons_and_back() -> None:
    td = make((1, 3, 1))
    with set_lazy_legacy(True):
        s = td.squeeze()
        assert s.batch_size == (3,)
        s.set("w", torch.ones(3))
        assert td["w"].shape == (1, 3, 1)
        assert td.squeeze(1) is td  # a dim that is not 1 stays: nothing to do
        sq = torch.squeeze(td, dim=-1)
        assert sq.unsqueeze(-1) is td


def test_nested_key_through_the_view() -> None:
    td = make((2, 3))
    with set_lazy_legacy(True):
        t = td.transpose(0, 1)
        t.set(("some", "deep", "x"), torch.zeros(3, 2, 5))
        assert td["some", "deep", "x"].shape == (2, 3, 5)
        assert td["some"].batch_size == (2, 3)
        t["n", "new"] = torch.ones(3, 2, 3)  # into the existing nested entry
        assert td["n", "new"].shape == (2, 3, 3)
        td["later"] = torch.zeros(2, 3)  # a key the source gains afterwards shows up
        assert t["later"].shape == (3, 2)
        del t["later"]
        assert "later" not in td


def test_non_tensor_values_follow() -> None:
    td = TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3])
    td["s"] = NonTensorStack.from_list([["a", "b", "c"], ["d", "e", "f"]])  # one per row
    with set_lazy_legacy(True):
        t = td.transpose(0, 1)
        assert t["s"] == [["a", "d"], ["b", "e"], ["c", "f"]]
        t["u"] = "one value"
        assert td["u"] == "one value"
        t["s"] = NonTensorStack.from_list([["x", "y"], ["z", "w"], ["v", "q"]])
        assert td["s"] == [["x", "z", "v"], ["y", "w", "q"]]


# ----------------------------------------------------------------- the edges


def test_lock_is_the_sources() -> None:
    td = make((2, 3)).lock_()
    with set_lazy_legacy(True):
        t = td.transpose(0, 1)
        assert t.is_locked
        with pytest.raises(LockedError, match="cannot set 'w': the TensorDict is locked"):
            t.set("w", torch.zeros(3, 2))
        t.set_("a", torch.ones(3, 2, 2))  # in place works on a locked source
        assert bool((td["a"] == 1).all())
        with t.unlock_():
            assert not td.is_locked
            t.set("w", torch.zeros(3, 2))
        assert td.is_locked and "w" in td


def test_wrong_shape_and_batch_size_refused() -> None:
    td = make((2, 3))
    with set_lazy_legacy(True):
        t = td.transpose(0, 1)
        with pytest.raises(BatchSizeError, match="'w'"):
            t.set("w", torch.zeros(2, 3))
        assert "w" not in td
        with pytest.raises(RuntimeError, match="cannot set the batch size of a lazy transpose"):
            t.batch_size = [3]
        with pytest.raises(ValueError, match="out of range"):
            td.transpose(-5, -6)
        with pytest.raises(RuntimeError, match="permute"):
            td.permute(0, 0)


def test_other_ops_give_plain_containers() -> None:
    td = make((2, 3))
    with set_lazy_legacy(True):
        t = td.transpose(0, 1)
        assert type(t.clone()) is TensorDict
        assert type(t.apply(lambda x: x + 1)) is TensorDict
        assert type(t.to_tensordict()) is TensorDict
        back = pickle.loads(pickle.dumps(t))
        assert type(back) is TensorDict and torch.equal(back["a"], t["a"])
        assert t.get_parent_tensordict() is td
    plain = t.permute(1, 0)  # the switch off: the plain op, a new container
    assert type(plain) is TensorDict and plain is not td


class Pair(TensorClass):
    x: torch.Tensor


def test_tensorclass_takes_the_plain_op() -> None:
    pc = Pair(x=torch.zeros(2, 3), batch_size=[2, 3])
    with set_lazy_legacy(True):
        t = pc.transpose(0, 1)
        assert type(t) is Pair and t.batch_size == (3, 2)


# ------------------------------------------------- contexts, movedim identity


def test_unlock_context_on_a_plain_view_does_not_write_back() -> None:
    td = make((2, 3)).lock_()
    t = td.transpose(0, 1)  # locked too, as in tensordict
    with t.unlock_():
        t.set("w", torch.zeros(3, 2))
    assert t.is_locked and "w" not in td
    td.unlock_()
    with td.transpose(0, 1) as t2:  # the op's own context still writes back
        t2.set("w", torch.zeros(3, 2))
    assert td["w"].shape == (2, 3)


def test_movedim_that_moves_nothing_is_the_container() -> None:
    td = make((2, 3, 4))
    assert td.movedim(1, 1) is td and td.movedim((0, 2), (0, 2)) is td
    assert td.movedim(0, 2).batch_size == (3, 4, 2)
