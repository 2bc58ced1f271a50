"""tensordict's method spellings of the operators (``add``, ``sub``, ``mul``, ``div``,
``pow``), leaf by leaf against torch as the oracle."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorbox import TensorDict, tensorclass


@tensorclass
class _X:
    a: torch.Tensor
    b: str


finite = st.floats(-100, 100, allow_nan=False, width=32)


@given(st.lists(finite, min_size=1, max_size=6), finite, st.sampled_from([None, 2.0, -0.5]))
@settings(max_examples=40, deadline=None)
def test_methods_match_torch(values: list[float], scalar: float, alpha: float | None) -> None:
    t = torch.tensor(values)
    td = TensorDict({"x": t, "n": {"y": t * 2}}, batch_size=[len(values)])
    kw = {} if alpha is None else {"alpha": alpha}
    for name in ("add", "sub"):
        out = getattr(td, name)(scalar, **kw)
        torch.testing.assert_close(out["n", "y"], getattr(torch, name)(t * 2, scalar, **kw))
    for name in ("mul", "div"):
        torch.testing.assert_close(
            getattr(td, name)(scalar)["x"], getattr(torch, name)(t, scalar), equal_nan=True
        )
    torch.testing.assert_close(td.pow(2)["x"], torch.pow(t, 2))
    torch.testing.assert_close(td.add(td, **kw)["x"], torch.add(t, t, **kw))


def test_on_a_tensorclass_keep_the_class_and_plain_fields() -> None:
    x = _X(torch.zeros(()), "a string")
    out = x.add(1)
    assert type(out) is _X and out.b == "a string" and (out == x + 1).all()
    assert (x.mul(2) == x * 2).all() and (x.div(2) == x / 2).all()


def test_mismatched_keys_name_the_key() -> None:
    td = TensorDict(x=torch.zeros(2), batch_size=[2])
    with pytest.raises(KeyError, match="y"):
        td.add(TensorDict(y=torch.zeros(2), batch_size=[2]), alpha=2)
