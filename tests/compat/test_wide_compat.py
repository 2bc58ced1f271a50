"""tensordict spellings added for drop-in use: select(as_tensordict=), load_memmap(allow_pickle=),
the logical operators with scalars on either side."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tensorbox import TensorClass, TensorDict


class Transition(TensorClass):
    obs: torch.Tensor
    label: str


def test_select_as_tensordict_shares_the_tensors() -> None:
    t = Transition(torch.zeros(3), "cat", batch_size=[3])
    out = t.select("obs", as_tensordict=True)
    assert type(out) is TensorDict and out["obs"] is t.obs and list(out.keys()) == ["obs"]
    assert t.select("obs").label is None  # the class keeps its fields, unselected ones None
    td = TensorDict(a=torch.zeros(2), n={"b": torch.ones(2)}, batch_size=[2])
    assert td.select(("n", "b"), as_tensordict=True)["n", "b"] is td["n", "b"]
    with pytest.raises(ValueError, match="as_tensordict=True gives a new TensorDict; drop inplace"):
        td.select("a", inplace=True, as_tensordict=True)


def test_load_memmap_allow_pickle_is_checked(tmp_path: Path) -> None:
    TensorDict(a=torch.arange(2), batch_size=[2]).memmap(tmp_path)
    for flag in (None, True, False):
        assert TensorDict.load_memmap(tmp_path, allow_pickle=flag)["a"].tolist() == [0, 1]
    with pytest.raises(TypeError, match=r"allow_pickle must be a bool or None, got 1 \(int\)"):
        TensorDict.load_memmap(tmp_path, allow_pickle=1)


@given(
    a=st.lists(st.booleans(), min_size=1, max_size=5),
    scalar=st.booleans(),
)
def test_logical_ops_match_torch(a: list[bool], scalar: bool) -> None:
    t = torch.tensor(a)
    td = TensorDict(x=t, n={"y": t.long()}, batch_size=[len(a)])
    s = torch.tensor(scalar)
    for got, want in [
        ((td ^ scalar)["x"], torch.logical_xor(t, s)),
        ((scalar ^ td)["n", "y"], torch.logical_xor(t, s)),
        ((scalar | td)["x"], torch.logical_or(t, s)),
        ((scalar & td)["x"], torch.logical_and(t, s)),
        ((td ^ td)["x"], torch.zeros_like(t)),
    ]:
        assert torch.equal(got, want)


def test_abs() -> None:
    td = TensorDict(a=torch.tensor([-1.0, 2.0]), n={"b": torch.tensor([-3, 0])}, batch_size=[2])
    out = abs(td)
    assert out["a"].tolist() == [1.0, 2.0] and out["n", "b"].tolist() == [3, 0]
